//! The self-contained HTML report of `qm simulate` (`DIR/report.html`): each variant's capacity
//! idle while jobs wait as a headline, a side-by-side table of every variant's overall
//! statistics (the fairness of idle capacity among them), then hand-written SVG plots — usage
//! over time stacked by share (own vs borrowed), queue depth, idle capacity and the fairness
//! index over time (every chart over time on one time axis), CDFs of queueing delay,
//! preemptions and lost work per share — and a table per variant of every share's statistics.
//!
//! Hand-written rather than `plotters`: the charts need a few primitives (`Frame`, one time
//! axis, step paths) that are already here, while `plotters`' SVG backend would add a dependency
//! tree, its own text layout and number formatting, and make byte-stable output and the
//! escaping rule below harder to keep.
//!
//! House rules of this module:
//! - The page loads nothing: CSS and SVG are inline, tooltips are SVG `<title>`s, fonts are the
//!   system's. The only URL in the page is the SVG namespace.
//! - The output is a pure function of the input: fixed float precision, no clock, no hash-map
//!   order. The same simulation writes the same bytes.
//! - Every name that comes from a user file (variants, shares, notes) goes through [`escape`].
//! - Everything has a bound: a timeline is averaged down to at most [`MAX_COLUMNS`] columns and a
//!   CDF to at most [`MAX_CDF_POINTS`] points, whatever the length of the run, so a 15-share,
//!   4-variant report of 2,000 bins stays well under a megabyte.
//! - Inputs are not trusted to be finite: NaN or infinite values are shown as `—` in the table
//!   and drawn as zero, never written into the page.

use std::collections::BTreeSet;
use std::fmt::Write;

use crate::metrics::{Dist, FairnessStats, Stats, Timeline, VariantRun};

/// Most columns a utilization chart draws; longer timelines are averaged in groups of bins
/// (the chart is about 1,070 px wide, so more columns would not show).
pub const MAX_COLUMNS: usize = 500;

/// Most points a CDF line has; longer lists of delays are sampled at evenly spaced ranks.
pub const MAX_CDF_POINTS: usize = 500;

/// Share colours: Kelly's 20 colours of maximum contrast, the most distinct first. More shares
/// than this reuse them in order.
const SHARE_COLOURS: [&str; 20] = [
    "#0067a5", "#f38400", "#008856", "#be0032", "#875692", "#f3c300", "#a1caf1", "#882d17",
    "#848482", "#e68fac", "#8db600", "#604e97", "#c2b280", "#2b3d26", "#b3446c", "#654522",
    "#f99379", "#dcd300", "#e25822", "#f6a600",
];

/// Variant colours: Okabe–Ito (safe for colour-blind readers). Past six, lines are dashed.
const VARIANT_COLOURS: [&str; 6] = [
    "#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9",
];

/// Ticks of the logarithmic delay axis, in seconds, with their labels.
pub const LOG_TICKS: [(f64, &str); 10] = [
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (21_600.0, "6 h"),
    (86_400.0, "1 d"),
    (604_800.0, "1 w"),
    (2_592_000.0, "30 d"),
    (31_536_000.0, "1 y"),
];

const CSS: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif;\
color:#222;background:#fff;max-width:1180px;margin:0 auto;padding:8px 16px 40px}\
h1{font-size:24px;margin:16px 0 8px}h2{font-size:19px;margin:32px 0 6px;\
border-bottom:1px solid #ddd;padding-bottom:4px}h3{font-size:15px;margin:20px 0 2px}\
ul.notes{margin:4px 0 12px;padding-left:20px;color:#444}\
p.caption{margin:2px 0 6px;color:#555;font-size:13px}\
table.stats{border-collapse:collapse;font-variant-numeric:tabular-nums;margin:8px 0}\
table.stats th,table.stats td{padding:3px 12px;border-bottom:1px solid #eee;text-align:right;\
white-space:nowrap}\
table.stats th:first-child{text-align:left;font-weight:normal;color:#444}\
table.stats thead th{font-weight:600;color:#222;border-bottom:2px solid #ccc;vertical-align:bottom}\
table.stats tr.group th{text-align:left;font-weight:600;color:#222;padding-top:12px;\
border-bottom:1px solid #ccc}\
table.stats td.best{background:#dff3df;font-weight:600}\
table.stats td.na{color:#999}\
table.shares td:first-child{text-align:left}\
p.idle{margin:4px 0;font-size:15px}p.idle.warn{color:#b00020;font-weight:600}\
.legend{display:flex;flex-wrap:wrap;gap:4px 16px;margin:4px 0 8px;font-size:13px}\
.legend span{white-space:nowrap}\
.sw{display:inline-block;width:12px;height:12px;margin-right:5px;vertical-align:-1px;\
border:1px solid rgba(0,0,0,.25)}\
.ln{display:inline-block;width:20px;height:0;margin-right:5px;vertical-align:4px;\
border-top-width:3px;border-top-style:solid}\
svg.plot{display:block;max-width:100%;height:auto}\
svg.plot text{font-size:12px;fill:#333}\
svg.plot .grid{stroke:#e6e6e6;stroke-width:1}\
svg.plot .axis{stroke:#888;stroke-width:1}\
svg.plot .halo{paint-order:stroke;stroke:#fff;stroke-width:3px}\
p.empty{color:#777;font-style:italic}";

/// Appends formatted text to a `String` (writing to a `String` cannot fail).
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// Renders the whole report: `title`, the `notes` as a list (workload, seed, checkpoint model,
/// attributions), the side-by-side table and the plots of every variant in `runs`, in order.
pub fn render_html(title: &str, runs: &[VariantRun], notes: &[String]) -> String {
    let mut out = page_start(title, notes);
    if runs.is_empty() {
        out.push_str("<p class=\"empty\">No variant was simulated.</p>\n</body>\n</html>\n");
        return out;
    }
    // Colours follow share names, so a share has the same colour in every chart.
    let all_shares = share_names(runs, true);

    out.push_str("<h2>Overall</h2>\n");
    out.push_str(
        "<p class=\"caption\">Highlighted: the best value of a row where one is better \
         (shorter delays, fewer preemptions and less lost work, more completed jobs, higher \
         utilization). Hover a cell for its exact value.</p>\n",
    );
    idle_headline(&mut out, runs);
    stats_table(&mut out, runs);

    // One time axis for every chart over time, so that an instant is at the same x in each.
    let axis = TimeAxis::of(runs);
    out.push_str("<h2>Utilization over time</h2>\n");
    out.push_str(
        "<p class=\"caption\">Instances in use, stacked by share: solid within the share's \
         entitlement, hatched above it (borrowed; all borrowed usage is stacked above all own \
         usage). The dashed line is the environment's capacity. Every chart over time has the \
         same time axis.</p>\n",
    );
    for (index, run) in runs.iter().enumerate() {
        utilization_chart(&mut out, index, run, &all_shares, axis);
    }

    out.push_str("<h2>Queue depth and idle capacity over time</h2>\n");
    variant_legend(&mut out, runs);
    line_chart(&mut out, runs, axis, LineKind::QueueDepth);
    line_chart(&mut out, runs, axis, LineKind::IdleWhileWaiting);

    out.push_str("<h2>Fairness of idle capacity</h2>\n");
    out.push_str(
        "<p class=\"caption\">Jain's index of the weighted borrowed shares (borrowed instances \
         / (weight × instances lending shares are entitled to), the largest over instance \
         types) of the shares waiting to borrow: 1 when they borrow alike, 1/n when one of n \
         holds all that is borrowed; 1 when fewer than two wait.</p>\n",
    );
    variant_legend(&mut out, runs);
    line_chart(&mut out, runs, axis, LineKind::Jain);

    out.push_str("<h2>Queueing delay</h2>\n");
    cdf_chart(&mut out, runs);

    out.push_str("<h2>Per share</h2>\n");
    let metric_shares = share_names(runs, false);
    variant_legend(&mut out, runs);
    bar_chart(&mut out, runs, &metric_shares, BarKind::Preemptions);
    bar_chart(&mut out, runs, &metric_shares, BarKind::LostWork);
    for run in runs {
        share_table(&mut out, run);
    }

    out.push_str("</body>\n</html>\n");
    out
}

/// The start of a self-contained page: its head with the style sheet, `title` as its
/// heading, and the `notes` as a list (shared with `qm report review`'s page).
pub fn page_start(title: &str, notes: &[String]) -> String {
    let mut out = String::with_capacity(64 * 1024);
    w!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    if !notes.is_empty() {
        out.push_str("<ul class=\"notes\">\n");
        for note in notes {
            w!(out, "<li>{}</li>\n", escape(note));
        }
        out.push_str("</ul>\n");
    }
    out
}

/// Escapes text for HTML content and attribute values (and for SVG inside HTML).
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A duration for people: `37 s`, `12m 05s`, `1h 23m`, `4.2 d`.
pub fn format_duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "—".to_string();
    }
    let s = seconds.max(0.0);
    if s == 0.0 {
        return "0 s".to_string();
    }
    if s < 9.95 {
        return format!("{s:.1} s");
    }
    if s < 59.5 {
        return format!("{s:.0} s");
    }
    if s < 3599.5 {
        let total = s.round() as u64;
        return format!("{}m {:02}s", total / 60, total % 60);
    }
    let minutes = (s / 60.0).round() as u64;
    if minutes < 24 * 60 {
        return format!("{}h {:02}m", minutes / 60, minutes % 60);
    }
    format!("{:.1} d", s / 86_400.0)
}

// ---------------------------------------------------------------------------------------------
// Numbers

/// `x` if finite, else 0: what the plots draw for values that are not numbers.
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

/// An SVG coordinate: one decimal, never `-0.0`.
pub fn coord(x: f64) -> String {
    let s = format!("{:.1}", finite(x));
    if s == "-0.0" {
        "0.0".to_string()
    } else {
        s
    }
}

/// `x` with `decimals` decimals and thousands separators: `12,345.6`.
pub fn grouped(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "—".to_string();
    }
    let text = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text.as_str(), None),
    };
    let mut out = String::new();
    if x < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        out.push('-');
    }
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(frac) = frac {
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// GPU-hours: two decimals under 10, one above.
fn format_gpu_hours(x: f64) -> String {
    grouped(x, if x.abs() < 10.0 { 2 } else { 1 })
}

/// A step of about `range / target` rounded to 1, 2, 2.5 or 5 times a power of ten.
fn nice_step(range: f64, target: f64) -> f64 {
    let raw = range / target;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let factor = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|&f| norm <= f + 1e-9)
        .unwrap_or(10.0);
    factor * magnitude
}

/// A value axis from 0: its top (a multiple of the step, at least `max`) and its step.
pub fn value_axis(max: f64, target_ticks: f64) -> (f64, f64) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max, target_ticks);
    let top = ((max / step) - 1e-9).ceil().max(1.0) * step;
    (top, step)
}

/// Decimals that show a tick step exactly enough.
fn tick_decimals(step: f64) -> usize {
    if step >= 1.0 {
        0
    } else {
        let d = (-step.log10()).ceil() as usize;
        // 2.5 × 10^-k needs one more.
        if ((step * 10f64.powi(d as i32)).round() - step * 10f64.powi(d as i32)).abs() > 1e-6 {
            d + 1
        } else {
            d
        }
    }
}

/// `#rrggbb` mixed with white (`0.0` = the colour, `1.0` = white).
pub fn tint(hex: &str, white: f64) -> String {
    let rgb = u32::from_str_radix(hex.trim_start_matches('#'), 16).unwrap_or(0);
    let channel = |shift: u32| {
        let v = f64::from((rgb >> shift) & 0xff);
        (v + (255.0 - v) * white).round() as u8
    };
    format!("#{:02x}{:02x}{:02x}", channel(16), channel(8), channel(0))
}

// ---------------------------------------------------------------------------------------------
// Names and colours

/// Share names in order of first appearance: in the metrics of every variant and, when
/// `with_timelines`, in their timelines too.
fn share_names(runs: &[VariantRun], with_timelines: bool) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for run in runs {
        let from_metrics = run.metrics.shares.iter().map(|s| &s.name);
        let from_timeline = run.timeline.shares.iter().filter(|_| with_timelines);
        for name in from_metrics.chain(from_timeline) {
            if seen.insert(name.as_str()) {
                names.push(name.clone());
            }
        }
    }
    names
}

fn share_colour(shares: &[String], name: &str) -> &'static str {
    let index = shares.iter().position(|s| s == name).unwrap_or(0);
    SHARE_COLOURS[index % SHARE_COLOURS.len()]
}

fn variant_colour(index: usize) -> &'static str {
    VARIANT_COLOURS[index % VARIANT_COLOURS.len()]
}

/// Dash pattern of a variant's line: solid for the first six, then dashed (colours repeat).
fn variant_dash(index: usize) -> &'static str {
    match index / VARIANT_COLOURS.len() {
        0 => "",
        1 => " stroke-dasharray=\"8 4\"",
        _ => " stroke-dasharray=\"2 3\"",
    }
}

fn variant_legend(out: &mut String, runs: &[VariantRun]) {
    out.push_str("<div class=\"legend\">");
    for (index, run) in runs.iter().enumerate() {
        w!(
            out,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>",
            variant_colour(index),
            escape(&run.metrics.name)
        );
    }
    out.push_str("</div>\n");
}

// ---------------------------------------------------------------------------------------------
// The table

#[derive(Clone, Copy, PartialEq)]
enum Better {
    Lower,
    Higher,
    Neither,
}

/// One cell: what is shown, the exact value on hover, and the value compared for "best"
/// (`None` when there is nothing to compare: no job had such a value, or it is not a number).
struct Cell {
    text: String,
    exact: String,
    value: Option<f64>,
}

impl Cell {
    fn absent(why: &str) -> Cell {
        Cell {
            text: "—".to_string(),
            exact: why.to_string(),
            value: None,
        }
    }

    fn of(value: f64, text: String, exact: String) -> Cell {
        if value.is_finite() {
            Cell {
                text,
                exact,
                value: Some(value),
            }
        } else {
            Cell::absent("not a number")
        }
    }

    fn count(n: u64) -> Cell {
        Cell::of(n as f64, grouped(n as f64, 0), n.to_string())
    }

    fn duration(seconds: f64) -> Cell {
        Cell::of(seconds, format_duration(seconds), format!("{seconds:.3} s"))
    }

    fn gpu_hours(hours: f64) -> Cell {
        Cell::of(
            hours,
            format_gpu_hours(hours),
            format!("{hours:.3} GPU-hours"),
        )
    }

    fn ratio(x: f64) -> Cell {
        Cell::of(x, format!("{}×", grouped(x, 2)), format!("{x:.3}"))
    }

    fn index(x: f64) -> Cell {
        Cell::of(x, format!("{x:.3}"), format!("{x:.3}"))
    }

    fn percent(fraction: f64) -> Cell {
        Cell::of(
            fraction,
            format!("{:.1} %", fraction * 100.0),
            format!("{fraction:.4}"),
        )
    }
}

struct Row {
    label: String,
    better: Better,
    cells: Vec<Cell>,
}

impl Row {
    fn new(label: &str, better: Better, stats: &[&Stats], cell: impl Fn(&Stats) -> Cell) -> Row {
        Row {
            label: label.to_string(),
            better,
            cells: stats.iter().map(|s| cell(s)).collect(),
        }
    }

    /// Which cells show the best value. Ties (as displayed) all count; a row where every
    /// variant shows the same value, or fewer than two have one, highlights nothing.
    fn best(&self) -> Vec<bool> {
        let none = vec![false; self.cells.len()];
        let valued: Vec<(usize, f64)> = self
            .cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.value.map(|v| (i, v)))
            .collect();
        if self.better == Better::Neither || valued.len() < 2 {
            return none;
        }
        let mut best = valued[0];
        for &(i, v) in &valued[1..] {
            let better = match self.better {
                Better::Lower => v < best.1,
                _ => v > best.1,
            };
            if better {
                best = (i, v);
            }
        }
        let best_text = &self.cells[best.0].text;
        let marks: Vec<bool> = self
            .cells
            .iter()
            .map(|c| c.value.is_some() && c.text == *best_text)
            .collect();
        if marks.iter().filter(|&&m| m).count() == valued.len() {
            return none;
        }
        marks
    }
}

/// A row of a distribution: its label and how to read it.
type Percentile = (&'static str, fn(&Dist) -> f64);

const PERCENTILES: [Percentile; 4] = [
    ("p50", |d| d.p50),
    ("p95", |d| d.p95),
    ("p99", |d| d.p99),
    ("mean", |d| d.mean),
];

/// Rows of a distribution; cells are absent where no job has a value (`pick` gives `None`).
fn dist_rows(
    stats: &[&Stats],
    which: &[Percentile],
    pick: impl Fn(&Stats) -> Option<Dist>,
    why_absent: &str,
) -> Vec<Row> {
    which
        .iter()
        .map(|&(label, get)| {
            Row::new(label, Better::Lower, stats, |s| match pick(s) {
                Some(d) => Cell::duration(get(&d)),
                None => Cell::absent(why_absent),
            })
        })
        .collect()
}

/// Whether a set of jobs has completed ones (the distributions over them have values).
fn completed(s: &Stats) -> Option<()> {
    (s.completed > 0).then_some(())
}

/// The table's first rows: how many jobs, completed, never started.
fn job_rows(stats: &[&Stats]) -> Vec<Row> {
    use Better::*;
    vec![
        Row::new("jobs", Neither, stats, |s| Cell::count(s.jobs)),
        Row::new("completed", Higher, stats, |s| Cell::count(s.completed)),
        Row::new("never started", Lower, stats, |s| {
            Cell::count(s.never_started)
        }),
    ]
}

/// Slowdown's rows: p50, p95 and mean.
fn slowdown_rows(stats: &[&Stats]) -> Vec<Row> {
    [("p50", 0usize), ("p95", 1), ("mean", 3)]
        .into_iter()
        .map(|(label, i)| {
            Row::new(label, Better::Lower, stats, |s| match completed(s) {
                Some(()) => Cell::ratio((PERCENTILES[i].1)(&s.slowdown)),
                None => Cell::absent("no completed job"),
            })
        })
        .collect()
}

/// The fairness rows, one cell per variant.
fn fairness_rows(runs: &[VariantRun]) -> Vec<Row> {
    use Better::*;
    // The fairness figures belong to a variant, not to a set of jobs.
    let fairness = |label: &str, better: Better, cell: fn(&FairnessStats) -> Cell| Row {
        label: label.to_string(),
        better,
        cells: runs.iter().map(|r| cell(&r.metrics.fairness)).collect(),
    };
    vec![
        fairness("Jain index, whole run", Higher, |f| Cell::index(f.jain)),
        fairness("Jain index, contended time", Higher, |f| {
            Cell::index(f.jain_contended)
        }),
        fairness("contended time", Neither, |f| {
            Cell::duration(f.contended_hours * 3600.0)
        }),
    ]
}

/// Preemptions, lost work, borrowing and utilization.
fn sharing_rows(stats: &[&Stats]) -> Vec<Row> {
    use Better::*;
    vec![
        Row::new("preemptions", Lower, stats, |s| Cell::count(s.preemptions)),
        Row::new("needless preemptions", Lower, stats, |s| {
            Cell::count(s.needless_preemptions)
        }),
        Row::new("lost GPU-h", Lower, stats, |s| {
            Cell::gpu_hours(s.lost_gpu_hours)
        }),
        Row::new("restart overhead GPU-h", Lower, stats, |s| {
            Cell::gpu_hours(s.restart_overhead_gpu_hours)
        }),
        Row::new("borrowed GPU-h", Neither, stats, |s| {
            Cell::gpu_hours(s.borrowed_gpu_hours)
        }),
        Row::new("utilization", Higher, stats, |s| {
            Cell::percent(s.utilization)
        }),
    ]
}

/// The overall table's groups of rows, each under its heading.
fn stats_groups(runs: &[VariantRun]) -> Vec<(&'static str, Vec<Row>)> {
    let stats: Vec<&Stats> = runs.iter().map(|r| &r.metrics.overall).collect();
    let started = |s: &Stats| (s.jobs > s.never_started).then_some(());
    vec![
        ("Jobs", job_rows(&stats)),
        (
            "Job completion time (completed jobs)",
            dist_rows(
                &stats,
                &PERCENTILES,
                |s| completed(s).map(|_| s.jct_s),
                "no completed job",
            ),
        ),
        (
            "Queueing delay (completed jobs)",
            dist_rows(
                &stats,
                &PERCENTILES,
                |s| completed(s).map(|_| s.queue_delay_s),
                "no completed job",
            ),
        ),
        (
            "Slowdown: completion time / run time (completed jobs)",
            slowdown_rows(&stats),
        ),
        (
            "Fairness of idle capacity (shares waiting to borrow)",
            fairness_rows(runs),
        ),
        (
            "Owner's reclaim delay (started jobs)",
            dist_rows(
                &stats,
                &PERCENTILES[..2],
                |s| started(s).map(|_| s.reclaim_delay_s),
                "no started job",
            ),
        ),
        ("Preemption and sharing", sharing_rows(&stats)),
    ]
}

fn stats_table(out: &mut String, runs: &[VariantRun]) {
    let groups = stats_groups(runs);
    out.push_str("<table class=\"stats\">\n<thead><tr><th></th>");
    for (index, run) in runs.iter().enumerate() {
        w!(
            out,
            "<th><i class=\"sw\" style=\"background:{}\"></i>{}</th>",
            variant_colour(index),
            escape(&run.metrics.name)
        );
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (group, rows) in &groups {
        w!(
            out,
            "<tr class=\"group\"><th colspan=\"{}\">{}</th></tr>\n",
            runs.len() + 1,
            escape(group)
        );
        for row in rows {
            stats_row(out, row);
        }
    }
    out.push_str("</tbody>\n</table>\n");
}

/// One row of the overall table, its best cells marked.
fn stats_row(out: &mut String, row: &Row) {
    w!(out, "<tr><th>{}</th>", escape(&row.label));
    for (cell, best) in row.cells.iter().zip(row.best()) {
        let class = match (best, cell.value.is_some()) {
            (true, _) => " class=\"best\"",
            (false, false) => " class=\"na\"",
            (false, true) => "",
        };
        w!(
            out,
            "<td{class} title=\"{}\">{}</td>",
            escape(&cell.exact),
            escape(&cell.text)
        );
    }
    out.push_str("</tr>\n");
}

// ---------------------------------------------------------------------------------------------
// Charts

/// A chart's canvas and the plot area inside its margins (public for the other self-contained
/// report, `qm report review`, which draws with the same primitives).
pub struct Frame {
    /// Canvas width (px).
    pub width: f64,
    /// Canvas height (px).
    pub height: f64,
    /// Left margin (px).
    pub left: f64,
    /// Right margin (px).
    pub right: f64,
    /// Top margin (px).
    pub top: f64,
    /// Bottom margin (px).
    pub bottom: f64,
}

impl Frame {
    /// x of the plot's left edge.
    pub fn x0(&self) -> f64 {
        self.left
    }
    /// x of the plot's right edge.
    pub fn x1(&self) -> f64 {
        self.width - self.right
    }
    /// The baseline (y of value 0).
    pub fn base(&self) -> f64 {
        self.height - self.bottom
    }
    /// The plot's width.
    pub fn plot_width(&self) -> f64 {
        self.x1() - self.x0()
    }
    /// The plot's height.
    pub fn plot_height(&self) -> f64 {
        self.base() - self.top
    }
    /// x of a fraction (0..1) of the plot's width.
    pub fn x(&self, fraction: f64) -> f64 {
        self.x0() + finite(fraction) * self.plot_width()
    }
    /// y of a fraction (0..1) of the plot's height.
    pub fn y(&self, fraction: f64) -> f64 {
        self.base() - finite(fraction) * self.plot_height()
    }

    /// Opens the `<svg>` of class `plot {class}`, labelled for screen readers.
    pub fn open(&self, out: &mut String, class: &str, label: &str) {
        w!(
            out,
            "<svg class=\"plot {class}\" xmlns=\"http://www.w3.org/2000/svg\" \
             viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" role=\"img\" \
             aria-label=\"{}\">\n",
            escape(label),
            w = self.width,
            h = self.height
        );
    }

    /// Horizontal grid lines and labels of a value axis from 0 to `top`.
    pub fn value_axis(&self, out: &mut String, top: f64, step: f64, title: &str) {
        let decimals = tick_decimals(step);
        let ticks = (top / step).round() as usize;
        for i in 0..=ticks {
            let v = i as f64 * step;
            let y = coord(self.y(v / top));
            w!(
                out,
                "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>\
                 <text x=\"{}\" y=\"{y}\" dy=\"4\" text-anchor=\"end\">{}</text>\n",
                coord(self.x0()),
                coord(self.x1()),
                coord(self.x0() - 6.0),
                grouped(v, decimals)
            );
        }
        w!(
            out,
            "<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
            coord(self.top + self.plot_height() / 2.0),
            escape(title)
        );
    }

    /// The x axis line and its title.
    pub fn x_axis(&self, out: &mut String, title: &str) {
        let base = coord(self.base());
        w!(
            out,
            "<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{base}\" y2=\"{base}\"/>\n\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            coord(self.x0()),
            coord(self.x1()),
            coord(self.x0() + self.plot_width() / 2.0),
            coord(self.height - 6.0),
            escape(title)
        );
    }

    /// A tick on the x axis at `x` with its label.
    pub fn x_tick(&self, out: &mut String, x: f64, label: &str) {
        let x = coord(x);
        w!(
            out,
            "<line class=\"grid\" x1=\"{x}\" x2=\"{x}\" y1=\"{}\" y2=\"{}\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            coord(self.top),
            coord(self.base() + 4.0),
            coord(self.base() + 17.0),
            escape(label)
        );
    }

    /// A note in the middle of an empty plot.
    pub fn empty_note(&self, out: &mut String, text: &str) {
        w!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-style=\"italic\">{}</text>\n",
            coord(self.x0() + self.plot_width() / 2.0),
            coord(self.top + self.plot_height() / 2.0),
            escape(text)
        );
    }
}

/// One band of the utilization stack: a share's own or borrowed usage per column.
struct Layer<'a> {
    share: &'a str,
    borrowed: bool,
    columns: Vec<f64>,
    mean: f64,
    peak: f64,
}

/// Usage of one bin: finite and non-negative, else 0.
fn usage(row: Option<&Vec<f64>>, bin: usize) -> f64 {
    let v = row.and_then(|r| r.get(bin)).copied().unwrap_or(0.0);
    if v.is_finite() && v > 0.0 {
        v
    } else {
        0.0
    }
}

/// A variant's utilization stack: its layers over the chart's columns, and what draws them.
struct UsageStack<'a> {
    /// The variant's index (hatch ids are unique in the page).
    index: usize,
    all_shares: &'a [String],
    layers: Vec<Layer<'a>>,
    /// Running sums: layer k's top edge.
    tops: Vec<Vec<f64>>,
    bins: usize,
    columns: usize,
    start_s: f64,
    bin_s: f64,
}

impl<'a> UsageStack<'a> {
    fn of(index: usize, timeline: &'a Timeline, all_shares: &'a [String]) -> Self {
        let bins = timeline
            .own
            .iter()
            .chain(&timeline.borrowed)
            .map(Vec::len)
            .max()
            .unwrap_or(0);
        let mut stack = UsageStack {
            index,
            all_shares,
            layers: Vec::new(),
            tops: Vec::new(),
            bins,
            columns: bins.min(MAX_COLUMNS),
            start_s: finite(timeline.start_s),
            bin_s: bin_width(timeline),
        };
        stack.layers = stack.layers_of(timeline);
        stack.tops = stack.stack_tops();
        stack
    }

    /// Column c averages bins [c·bins/columns, (c+1)·bins/columns): equal-width bins, so the
    /// mean of their means is the mean over the column's time.
    fn bounds(&self, c: usize) -> usize {
        c * self.bins / self.columns.max(1)
    }

    /// Own usage of every share below all borrowed usage; empty bands are left out.
    fn layers_of(&self, timeline: &'a Timeline) -> Vec<Layer<'a>> {
        let mut layers: Vec<Layer> = Vec::new();
        for borrowed in [false, true] {
            let rows = if borrowed {
                &timeline.borrowed
            } else {
                &timeline.own
            };
            for (i, share) in timeline.shares.iter().enumerate() {
                let row = rows.get(i);
                let mut total = 0.0;
                let mut peak: f64 = 0.0;
                for bin in 0..self.bins {
                    let v = usage(row, bin);
                    total += v;
                    peak = peak.max(v);
                }
                if peak == 0.0 {
                    continue;
                }
                let columns = (0..self.columns)
                    .map(|c| {
                        let (a, b) = (self.bounds(c), self.bounds(c + 1));
                        (a..b).map(|bin| usage(row, bin)).sum::<f64>() / (b - a) as f64
                    })
                    .collect();
                layers.push(Layer {
                    share,
                    borrowed,
                    columns,
                    mean: total / self.bins as f64,
                    peak,
                });
            }
        }
        layers
    }

    fn stack_tops(&self) -> Vec<Vec<f64>> {
        let mut tops: Vec<Vec<f64>> = Vec::with_capacity(self.layers.len());
        for layer in &self.layers {
            let below = tops
                .last()
                .cloned()
                .unwrap_or_else(|| vec![0.0; self.columns]);
            tops.push(
                below
                    .iter()
                    .zip(&layer.columns)
                    .map(|(b, v)| b + v)
                    .collect(),
            );
        }
        tops
    }

    /// The highest total usage of a column.
    fn peak_total(&self) -> f64 {
        self.tops
            .last()
            .map(|t| t.iter().copied().fold(0.0, f64::max))
            .unwrap_or(0.0)
    }

    fn span_s(&self) -> f64 {
        self.bins as f64 * self.bin_s
    }

    fn hatch_id(&self, share: &str) -> String {
        let j = self.all_shares.iter().position(|s| s == share).unwrap_or(0);
        format!("hatch-{}-{j}", self.index)
    }

    /// Hatches of the shares that borrow; ids are unique in the page (variant, share).
    fn hatch_defs(&self, out: &mut String) {
        let hatched: Vec<&Layer> = self.layers.iter().filter(|l| l.borrowed).collect();
        if hatched.is_empty() {
            return;
        }
        out.push_str("<defs>");
        for layer in hatched {
            let colour = share_colour(self.all_shares, layer.share);
            w!(
                out,
                "<pattern id=\"{}\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
                 patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"{}\"/>\
                 <rect width=\"2.5\" height=\"6\" fill=\"{colour}\"/></pattern>",
                self.hatch_id(layer.share),
                tint(colour, 0.6)
            );
        }
        out.push_str("</defs>\n");
    }

    /// The layers as filled paths on a value axis up to `top`.
    fn draw(&self, out: &mut String, frame: &Frame, axis: TimeAxis, top: f64) {
        let x_of = |t: f64| axis.x(frame, t);
        // Painter's stacking: each layer is filled from the baseline to its top edge, topmost
        // first, so every path needs one edge only (half the bytes of bands).
        let base = coord(frame.base());
        for (layer, layer_top) in self.layers.iter().zip(&self.tops).rev() {
            let mut d = format!("M{},{base}", coord(x_of(self.start_s)));
            let mut current = base.clone();
            for (c, &v) in layer_top.iter().enumerate() {
                let y = coord(frame.y(v / top));
                if y != current {
                    if c > 0 {
                        let t = self.start_s + self.bounds(c) as f64 * self.bin_s;
                        w!(d, "H{}", coord(x_of(t)));
                    }
                    w!(d, "V{y}");
                    current = y;
                }
            }
            w!(d, "H{}V{base}Z", coord(x_of(self.start_s + self.span_s())));
            let fill = if layer.borrowed {
                format!("url(#{})", self.hatch_id(layer.share))
            } else {
                share_colour(self.all_shares, layer.share).to_string()
            };
            w!(
                out,
                "<path d=\"{d}\" fill=\"{fill}\"><title>{} — {}: mean {:.1}, peak {:.1} \
                 instances</title></path>\n",
                escape(layer.share),
                if layer.borrowed {
                    "borrowed (above entitlement)"
                } else {
                    "own (within entitlement)"
                },
                layer.mean,
                layer.peak
            );
        }
    }
}

/// The utilization chart's caption: utilization, capacity, and the bins drawn.
fn utilization_caption(out: &mut String, run: &VariantRun, stack: &UsageStack, capacity: f64) {
    let (bins, columns) = (stack.bins, stack.columns);
    w!(
        out,
        "<p class=\"caption\">Utilization {:.1} % · capacity {} instances · {} bins of {}",
        finite(run.metrics.overall.utilization) * 100.0,
        grouped(capacity, if capacity.fract() == 0.0 { 0 } else { 1 }),
        grouped(bins as f64, 0),
        format_duration(stack.bin_s)
    );
    if columns < bins {
        w!(
            out,
            ", averaged to {} columns of {}",
            columns,
            format_duration(stack.span_s() / columns as f64)
        );
    }
    out.push_str("</p>\n");
}

/// The shares' colours, and the hatch of borrowed usage.
fn share_legend(out: &mut String, shares: &[String], all_shares: &[String]) {
    out.push_str("<div class=\"legend\">");
    for share in shares {
        w!(
            out,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>",
            share_colour(all_shares, share),
            escape(share)
        );
    }
    out.push_str(
        "<span><i class=\"sw\" style=\"background:repeating-linear-gradient(45deg,#666 0 2px,\
         #ccc 2px 5px)\"></i>borrowed (hatched)</span></div>\n",
    );
}

/// The dashed capacity line, labelled.
fn capacity_line(out: &mut String, frame: &Frame, capacity: f64, top: f64) {
    if capacity <= 0.0 {
        return;
    }
    let y = coord(frame.y(capacity / top));
    w!(
        out,
        "<line x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\" stroke=\"#222\" stroke-width=\"1.5\" \
         stroke-dasharray=\"6 4\"><title>capacity: {} instances</title></line>\
         <text class=\"halo\" x=\"{}\" y=\"{y}\" dy=\"-4\" text-anchor=\"end\">capacity {}\
         </text>\n",
        coord(frame.x0()),
        coord(frame.x1()),
        grouped(capacity, 1),
        coord(frame.x1() - 4.0),
        grouped(capacity, if capacity.fract() == 0.0 { 0 } else { 1 })
    );
}

fn utilization_chart(
    out: &mut String,
    index: usize,
    run: &VariantRun,
    all_shares: &[String],
    axis: TimeAxis,
) {
    let timeline = &run.timeline;
    let name = &run.metrics.name;
    let capacity = finite(timeline.capacity).max(0.0);
    let stack = UsageStack::of(index, timeline, all_shares);

    w!(out, "<h3>{}</h3>\n", escape(name));
    utilization_caption(out, run, &stack, capacity);
    share_legend(out, &timeline.shares, all_shares);

    let frame = Frame {
        width: 1140.0,
        height: 280.0,
        left: 64.0,
        right: 16.0,
        top: 12.0,
        bottom: 40.0,
    };
    frame.open(
        out,
        "utilization",
        &format!("Utilization over time: {name}"),
    );
    let (top, step) = value_axis(capacity.max(stack.peak_total()) * 1.08, 5.0);
    stack.hatch_defs(out);
    frame.value_axis(out, top, step, "instances");

    if stack.bins == 0 {
        frame.empty_note(out, "no usage recorded");
    } else {
        axis.draw(&frame, out);
        stack.draw(out, &frame, axis, top);
    }
    capacity_line(out, &frame, capacity, top);
    out.push_str("</svg>\n");
}

/// Points of an empirical CDF, at most [`MAX_CDF_POINTS`]: `(delay, fraction of jobs with at
/// most that delay)`, sampled at evenly spaced ranks (the first and last always), starting at
/// fraction 0.
fn cdf_points(sorted: &[f64]) -> Vec<(f64, f64)> {
    let n = sorted.len();
    if n == 0 {
        return Vec::new();
    }
    // One point goes to the start at 0 and one to the right edge of the chart.
    let m = n.min(MAX_CDF_POINTS - 2);
    let mut points = Vec::with_capacity(m + 1);
    points.push((sorted[0], 0.0));
    for k in 0..m {
        let i = if m == 1 {
            n - 1
        } else {
            (k * (n - 1) + (m - 1) / 2) / (m - 1)
        };
        points.push((sorted[i], (i + 1) as f64 / n as f64));
    }
    points
}

/// Every variant's finite queueing delays (negative ones as 0), sorted.
fn sorted_delays(runs: &[VariantRun]) -> Vec<Vec<f64>> {
    runs.iter()
        .map(|run| {
            let mut d: Vec<f64> = run
                .queue_delays
                .iter()
                .filter(|v| v.is_finite())
                .map(|v| v.max(0.0))
                .collect();
            d.sort_by(f64::total_cmp);
            d
        })
        .collect()
}

/// Where `seconds` is on the log delay axis that ends at 10^`log_hi` (under 1 s at 1 s).
fn log_fraction(seconds: f64, log_hi: f64) -> f64 {
    seconds.max(1.0).log10() / log_hi
}

/// The caption, and per variant its line style, how many jobs and how many waited under 1 s.
fn cdf_legend(out: &mut String, runs: &[VariantRun], delays: &[Vec<f64>]) {
    out.push_str(
        "<p class=\"caption\">Cumulative distribution of the queueing delay of completed jobs \
         (every wait, re-queues after preemption included), log scale. Delays under 1 s, zero \
         included, are drawn at 1 s.</p>\n<div class=\"legend\">",
    );
    for (index, (run, d)) in runs.iter().zip(delays).enumerate() {
        let detail = if d.is_empty() {
            "no completed job".to_string()
        } else {
            let under = d.iter().filter(|&&v| v < 1.0).count();
            format!(
                "{} jobs, {:.1} % under 1 s",
                grouped(d.len() as f64, 0),
                under as f64 * 100.0 / d.len() as f64
            )
        };
        w!(
            out,
            "<span><i class=\"ln\" style=\"border-top-color:{};border-top-style:{}\"></i>{} \
             ({detail})</span>",
            variant_colour(index),
            if index < VARIANT_COLOURS.len() {
                "solid"
            } else {
                "dashed"
            },
            escape(&run.metrics.name)
        );
    }
    out.push_str("</div>\n");
}

/// The CDF's axes: fractions of jobs up the side, delay ticks up to `hi` seconds along.
fn cdf_axes(out: &mut String, frame: &Frame, hi: f64) {
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let y = coord(frame.y(f));
        w!(
            out,
            "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{y}\" y2=\"{y}\"/>\
             <text x=\"{}\" y=\"{y}\" dy=\"4\" text-anchor=\"end\">{} %</text>\n",
            coord(frame.x0()),
            coord(frame.x1()),
            coord(frame.x0() - 6.0),
            i * 25
        );
    }
    w!(
        out,
        "<text transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\">jobs</text>\n",
        coord(frame.top + frame.plot_height() / 2.0)
    );
    let log_hi = hi.log10();
    for &(t, label) in LOG_TICKS.iter().filter(|&&(t, _)| t <= hi) {
        frame.x_tick(out, frame.x(log_fraction(t, log_hi)), label);
    }
    frame.x_axis(out, "queueing delay (log scale)");
}

/// Variant `index`'s CDF line of its sorted delays `d`; nothing when it has none.
fn cdf_line(
    out: &mut String,
    frame: &Frame,
    log_hi: f64,
    (index, run): (usize, &VariantRun),
    d: &[f64],
) {
    let x_fraction = |seconds: f64| log_fraction(seconds, log_hi);
    let points = cdf_points(d);
    let Some(&(first, _)) = points.first() else {
        return;
    };
    let mut path = format!(
        "M{},{}",
        coord(frame.x(x_fraction(first))),
        coord(frame.y(0.0))
    );
    let mut last = String::new();
    for &(v, f) in &points[1..] {
        let p = format!("{},{}", coord(frame.x(x_fraction(v))), coord(frame.y(f)));
        if p != last {
            w!(path, "L{p}");
            last = p;
        }
    }
    w!(path, "L{},{}", coord(frame.x1()), coord(frame.y(1.0)));
    let q = &run.metrics.overall.queue_delay_s;
    w!(
        out,
        "<path d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\" \
         stroke-linejoin=\"round\"{}><title>{}: p50 {}, p95 {}, p99 {}</title></path>\n",
        variant_colour(index),
        variant_dash(index),
        escape(&run.metrics.name),
        format_duration(q.p50),
        format_duration(q.p95),
        format_duration(q.p99)
    );
}

fn cdf_chart(out: &mut String, runs: &[VariantRun]) {
    let delays = sorted_delays(runs);
    let longest = delays
        .iter()
        .filter_map(|d| d.last().copied())
        .fold(1.0, f64::max);
    // The axis ends at the first labelled tick past the longest delay (at least 10 s).
    let hi = LOG_TICKS
        .iter()
        .map(|&(t, _)| t)
        .find(|&t| t >= longest.max(10.0))
        .unwrap_or(longest);
    cdf_legend(out, runs, &delays);

    let frame = Frame {
        width: 1140.0,
        height: 360.0,
        left: 64.0,
        right: 24.0,
        top: 12.0,
        bottom: 40.0,
    };
    frame.open(out, "cdf", "Queueing delay CDF per variant");
    cdf_axes(out, &frame, hi);
    if delays.iter().all(Vec::is_empty) {
        frame.empty_note(out, "no completed job in any variant");
    }
    for (variant, d) in runs.iter().enumerate().zip(&delays) {
        cdf_line(out, &frame, hi.log10(), variant, d);
    }
    out.push_str("</svg>\n");
}

#[derive(Clone, Copy)]
enum BarKind {
    Preemptions,
    LostWork,
}

impl BarKind {
    fn value(self, stats: &Stats) -> f64 {
        match self {
            BarKind::Preemptions => stats.preemptions as f64,
            BarKind::LostWork => finite(stats.lost_gpu_hours).max(0.0),
        }
    }
    fn text(self, value: f64) -> String {
        match self {
            BarKind::Preemptions => format!("{} preemptions", grouped(value, 0)),
            BarKind::LostWork => format!("{} GPU-hours lost", format_gpu_hours(value)),
        }
    }
}

/// The chart's heading, value axis title, CSS class, label and note when every value is 0.
struct BarNames {
    heading: &'static str,
    axis: &'static str,
    class: &'static str,
    label: &'static str,
    nothing: &'static str,
}

impl BarKind {
    fn names(self) -> BarNames {
        match self {
            BarKind::Preemptions => BarNames {
                heading: "Preemptions per share",
                axis: "preemptions",
                class: "preemptions",
                label: "Preemptions per share and variant",
                nothing: "no preemption in any variant",
            },
            BarKind::LostWork => BarNames {
                heading: "Lost work per share",
                axis: "GPU-hours lost",
                class: "lost-work",
                label: "Lost GPU-hours per share and variant",
                nothing: "no work lost in any variant",
            },
        }
    }

    /// values[share][variant]: None where the variant has no such share.
    fn values(self, runs: &[VariantRun], shares: &[String]) -> Vec<Vec<Option<f64>>> {
        shares
            .iter()
            .map(|share| {
                runs.iter()
                    .map(|run| {
                        run.metrics
                            .shares
                            .iter()
                            .find(|s| &s.name == share)
                            .map(|s| self.value(&s.stats))
                    })
                    .collect()
            })
            .collect()
    }
}

/// The bar chart's frame for `shares`, and whether their labels turn.
fn bar_frame(shares: &[String]) -> (Frame, bool) {
    let longest_label = shares.iter().map(|s| s.chars().count()).max().unwrap_or(0);
    let frame_width = 1140.0;
    let group_width = (frame_width - 80.0) / shares.len().max(1) as f64;
    // Labels turn when they would not fit under their group.
    let rotate = longest_label.min(20) as f64 * 7.0 > group_width - 6.0;
    let frame = Frame {
        width: frame_width,
        height: if rotate { 320.0 } else { 260.0 },
        left: 64.0,
        right: 16.0,
        top: 12.0,
        bottom: if rotate { 100.0 } else { 40.0 },
    };
    (frame, rotate)
}

/// A share's name under its group of bars, cut to 20 characters (the whole on hover).
fn bar_label(out: &mut String, share: &str, (cx, ly): (String, String), rotate: bool) {
    let shown: String = if share.chars().count() > 20 {
        share.chars().take(19).chain(['…']).collect()
    } else {
        share.to_string()
    };
    if rotate {
        w!(
            out,
            "<text x=\"{cx}\" y=\"{ly}\" text-anchor=\"end\" \
             transform=\"rotate(-40 {cx} {ly})\"><title>{}</title>{}</text>\n",
            escape(share),
            escape(&shown)
        );
    } else {
        w!(
            out,
            "<text x=\"{cx}\" y=\"{ly}\" text-anchor=\"middle\"><title>{}</title>{}</text>\n",
            escape(share),
            escape(&shown)
        );
    }
}

fn bar_chart(out: &mut String, runs: &[VariantRun], shares: &[String], kind: BarKind) {
    let names = kind.names();
    w!(out, "<h3>{}</h3>\n", names.heading);
    let values = kind.values(runs, shares);
    let max = values
        .iter()
        .flatten()
        .flatten()
        .copied()
        .fold(0.0, f64::max);

    let (frame, rotate) = bar_frame(shares);
    frame.open(out, &format!("bars {}", names.class), names.label);
    let (top, step) = value_axis(max, 5.0);
    frame.value_axis(out, top, step, names.axis);
    let base = frame.base();
    w!(
        out,
        "<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{b}\" y2=\"{b}\"/>\n",
        coord(frame.x0()),
        coord(frame.x1()),
        b = coord(base)
    );
    if shares.is_empty() {
        frame.empty_note(out, "no shares");
    } else if max == 0.0 {
        frame.empty_note(out, names.nothing);
    }

    let group = frame.plot_width() / shares.len().max(1) as f64;
    let bar = group * 0.8 / runs.len().max(1) as f64;
    for (s, share) in shares.iter().enumerate() {
        let gx = frame.x0() + s as f64 * group;
        for (v, value) in values[s].iter().enumerate() {
            let Some(value) = *value else { continue };
            let h = value / top * frame.plot_height();
            w!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} · {}: \
                 {}</title></rect>\n",
                coord(gx + group * 0.1 + v as f64 * bar),
                coord(base - h),
                coord(bar),
                coord(h),
                variant_colour(v),
                escape(share),
                escape(&runs[v].metrics.name),
                kind.text(value)
            );
        }
        let label_at = (coord(gx + group / 2.0), coord(base + 16.0));
        bar_label(out, share, label_at, rotate);
    }
    out.push_str("</svg>\n");
}

// ---------------------------------------------------------------------------------------------
// Over time: one axis for every variant, queue depth and idle capacity, per-share tables

/// A timeline's bin width: finite and positive, else one second.
fn bin_width(timeline: &Timeline) -> f64 {
    if timeline.bin_s.is_finite() && timeline.bin_s > 0.0 {
        timeline.bin_s
    } else {
        1.0
    }
}

/// The simulated time that every chart over time spans, the union of the variants' runs:
/// variants end at different times, and the same instant must be at the same x everywhere.
#[derive(Clone, Copy, Debug)]
struct TimeAxis {
    start_s: f64,
    end_s: f64,
}

impl TimeAxis {
    fn of(runs: &[VariantRun]) -> TimeAxis {
        let (mut start_s, mut end_s) = (f64::INFINITY, f64::NEG_INFINITY);
        for run in runs {
            let t = &run.timeline;
            let bins = t.own.iter().chain(&t.borrowed).map(Vec::len).max();
            let start = finite(t.start_s);
            start_s = start_s.min(start);
            end_s = end_s.max(start + bins.unwrap_or(0) as f64 * bin_width(t));
        }
        if !start_s.is_finite() {
            start_s = 0.0;
        }
        if !end_s.is_finite() || end_s <= start_s {
            end_s = start_s + 1.0;
        }
        TimeAxis { start_s, end_s }
    }

    /// x of simulated second `t` in `frame`.
    fn x(&self, frame: &Frame, t: f64) -> f64 {
        frame.x((t - self.start_s) / (self.end_s - self.start_s))
    }

    /// Ticks in days, hours or minutes of simulated time, and the axis title.
    fn draw(&self, frame: &Frame, out: &mut String) {
        let span_s = self.end_s - self.start_s;
        let (unit_s, unit) = if span_s >= 2.0 * 86_400.0 {
            (86_400.0, "days")
        } else if span_s >= 2.0 * 3600.0 {
            (3600.0, "hours")
        } else {
            (60.0, "minutes")
        };
        let tick_step = nice_step(span_s / unit_s, 10.0);
        let decimals = tick_decimals(tick_step);
        let mut k = (self.start_s / unit_s / tick_step - 1e-9).ceil();
        while k * tick_step * unit_s <= self.end_s * (1.0 + 1e-12) {
            let t = k * tick_step * unit_s;
            frame.x_tick(out, self.x(frame, t), &grouped(k * tick_step, decimals));
            k += 1.0;
        }
        frame.x_axis(out, &format!("simulated time ({unit})"));
    }
}

/// What a line chart over time plots, one line per variant.
#[derive(Clone, Copy)]
enum LineKind {
    /// RUNNABLE jobs, all shares together.
    QueueDepth,
    /// Instances idle while jobs that fit them wait.
    IdleWhileWaiting,
    /// The fairness index of the shares waiting to borrow.
    Jain,
}

impl LineKind {
    fn series(self, t: &Timeline) -> Vec<f64> {
        match self {
            LineKind::QueueDepth => {
                let bins = t.queued.iter().map(Vec::len).max().unwrap_or(0);
                (0..bins)
                    .map(|b| t.queued.iter().map(|q| usage(Some(q), b)).sum())
                    .collect()
            }
            LineKind::IdleWhileWaiting => (0..t.idle_waiting.len())
                .map(|b| usage(Some(&t.idle_waiting), b))
                .collect(),
            LineKind::Jain => (0..t.jain.len()).map(|b| usage(Some(&t.jain), b)).collect(),
        }
    }

    /// (svg class, label, value axis title)
    fn names(self) -> (&'static str, &'static str, &'static str) {
        match self {
            LineKind::QueueDepth => ("queue-depth", "Queue depth over time", "waiting jobs"),
            LineKind::IdleWhileWaiting => (
                "idle-waiting",
                "Instances idle while jobs that fit them wait",
                "idle instances",
            ),
            LineKind::Jain => (
                "jain",
                "Jain index of the shares waiting to borrow over time",
                "Jain index",
            ),
        }
    }
}

/// A step line per variant of a per-bin series (mean per bin, averaged down to
/// [`MAX_COLUMNS`] columns) over the shared time axis.
fn line_chart(out: &mut String, runs: &[VariantRun], axis: TimeAxis, kind: LineKind) {
    let (class, label, y_title) = kind.names();
    let lines: Vec<Vec<f64>> = runs.iter().map(|r| kind.series(&r.timeline)).collect();
    let peak = lines.iter().flatten().copied().fold(0.0, f64::max);
    w!(out, "<h3>{label}</h3>\n");
    let frame = Frame {
        width: 1140.0,
        height: 220.0,
        left: 64.0,
        right: 16.0,
        top: 12.0,
        bottom: 40.0,
    };
    frame.open(out, class, label);
    let (top, step) = value_axis(peak * 1.08, 5.0);
    frame.value_axis(out, top, step, y_title);
    axis.draw(&frame, out);
    if peak == 0.0 {
        frame.empty_note(out, "none at any time");
    }
    for (index, (run, values)) in runs.iter().zip(&lines).enumerate() {
        let (bins, bin_s) = (values.len(), bin_width(&run.timeline));
        if bins == 0 || peak == 0.0 {
            continue;
        }
        let start_s = finite(run.timeline.start_s);
        let columns = bins.min(MAX_COLUMNS);
        let bounds = |c: usize| c * bins / columns;
        let mut d = String::new();
        for c in 0..columns {
            let (a, b) = (bounds(c), bounds(c + 1));
            let mean = values[a..b].iter().sum::<f64>() / (b - a) as f64;
            let x = coord(axis.x(&frame, start_s + a as f64 * bin_s));
            let y = coord(frame.y(mean / top));
            if c == 0 {
                w!(d, "M{x},{y}");
            } else {
                w!(d, "H{x}V{y}");
            }
        }
        w!(
            d,
            "H{}",
            coord(axis.x(&frame, start_s + bins as f64 * bin_s))
        );
        let mean = values.iter().sum::<f64>() / bins as f64;
        w!(
            out,
            "<path d=\"{d}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{}><title>{}: \
             mean {mean:.1}, peak {:.1} {y_title}</title></path>\n",
            variant_colour(index),
            variant_dash(index),
            escape(&run.metrics.name),
            values.iter().copied().fold(0.0, f64::max)
        );
    }
    out.push_str("</svg>\n");
}

/// A variant's statistics share by share (the shares of the first policy).
fn share_table(out: &mut String, run: &VariantRun) {
    type Column = (&'static str, fn(&Stats) -> Cell);
    const COLUMNS: [Column; 14] = [
        ("jobs", |s| Cell::count(s.jobs)),
        ("completed", |s| Cell::count(s.completed)),
        ("never started", |s| Cell::count(s.never_started)),
        ("JCT p50", |s| Cell::duration(s.jct_s.p50)),
        ("JCT p95", |s| Cell::duration(s.jct_s.p95)),
        ("wait p50", |s| Cell::duration(s.queue_delay_s.p50)),
        ("wait p95", |s| Cell::duration(s.queue_delay_s.p95)),
        ("wait p99", |s| Cell::duration(s.queue_delay_s.p99)),
        ("reclaim p95", |s| Cell::duration(s.reclaim_delay_s.p95)),
        ("slowdown mean", |s| Cell::ratio(s.slowdown.mean)),
        ("preemptions", |s| Cell::count(s.preemptions)),
        ("lost GPU-h", |s| Cell::gpu_hours(s.lost_gpu_hours)),
        ("borrowed GPU-h", |s| Cell::gpu_hours(s.borrowed_gpu_hours)),
        ("utilization", |s| Cell::percent(s.utilization)),
    ];
    w!(out, "<h3>{}: per share</h3>\n", escape(&run.metrics.name));
    out.push_str("<table class=\"stats shares\">\n<thead><tr><th>share</th>");
    for (label, _) in COLUMNS {
        w!(out, "<th>{label}</th>");
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    let all = ("all shares", &run.metrics.overall);
    let shares = run
        .metrics
        .shares
        .iter()
        .map(|s| (s.name.as_str(), &s.stats));
    for (name, stats) in shares.chain([all]) {
        w!(out, "<tr><td>{}</td>", escape(name));
        for (_, cell) in COLUMNS {
            let c = cell(stats);
            w!(
                out,
                "<td title=\"{}\">{}</td>",
                escape(&c.exact),
                escape(&c.text)
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
}

/// Share of the capacity idle while jobs wait from which the headline is shown as a warning.
pub const IDLE_WARN_FRACTION: f64 = 0.05;

/// Per variant, the capacity left idle while jobs that fit it waited, and why; red from
/// [`IDLE_WARN_FRACTION`] of the capacity.
fn idle_headline(out: &mut String, runs: &[VariantRun]) {
    for run in runs {
        let idle = &run.metrics.idle_while_waiting;
        let fraction = finite(idle.fraction);
        let class = if fraction >= IDLE_WARN_FRACTION {
            "idle warn"
        } else {
            "idle"
        };
        w!(
            out,
            "<p class=\"{class}\">{}: idle while jobs wait {} instance-hours ({:.1} % of the \
             capacity)",
            escape(&run.metrics.name),
            format_gpu_hours(finite(idle.instance_hours)),
            fraction * 100.0
        );
        if let Some(cause) = idle.cause {
            let hours = idle.by_cause.get(cause).copied().unwrap_or(0.0);
            w!(
                out,
                ", mostly {} ({} instance-hours)",
                escape(cause),
                format_gpu_hours(finite(hours))
            );
        }
        out.push_str("</p>\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_human_units() {
        let cases = [
            (0.0, "0 s"),
            (0.25, "0.2 s"),
            (37.0, "37 s"),
            (59.4, "59 s"),
            (59.6, "1m 00s"),
            (725.0, "12m 05s"),
            (4980.0, "1h 23m"),
            (86_369.0, "23h 59m"),
            (86_390.0, "1.0 d"),
            (4.2 * 86_400.0, "4.2 d"),
            (f64::NAN, "—"),
        ];
        for (seconds, text) in cases {
            assert_eq!(format_duration(seconds), text, "{seconds}");
        }
    }

    #[test]
    fn numbers_have_thousands_separators() {
        assert_eq!(grouped(1_234_567.891, 1), "1,234,567.9");
        assert_eq!(grouped(999.0, 0), "999");
        assert_eq!(grouped(-1234.0, 0), "-1,234");
        assert_eq!(grouped(-0.01, 1), "0.0");
        assert_eq!(format_gpu_hours(4.256), "4.26");
    }

    #[test]
    fn axes_end_on_a_round_tick() {
        assert_eq!(value_axis(108.0, 5.0), (125.0, 25.0));
        assert_eq!(value_axis(0.0, 5.0), (1.0, 0.2));
        assert_eq!(value_axis(f64::NAN, 5.0), (1.0, 0.2));
        assert_eq!(tick_decimals(0.25), 2);
        assert_eq!(tick_decimals(0.2), 1);
        assert_eq!(tick_decimals(5.0), 0);
    }

    #[test]
    fn a_cdf_of_many_delays_is_sampled_down() {
        let delays: Vec<f64> = (0..10_000).map(f64::from).collect();
        let points = cdf_points(&delays);
        assert!(points.len() < MAX_CDF_POINTS);
        assert_eq!(points[0], (0.0, 0.0));
        assert_eq!(*points.last().unwrap(), (9999.0, 1.0));
        let few = cdf_points(&[3.0, 5.0]);
        assert_eq!(few, vec![(3.0, 0.0), (3.0, 0.5), (5.0, 1.0)]);
    }
}
