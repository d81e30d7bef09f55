//! `qm report review`: a [`ReviewReport`] as tables for people or as a self-contained HTML page
//! (JSON is the report itself). Pure functions from the report to text; the page draws with
//! the simulator report's primitives (`qm_sim::report`) and keeps its house rules: it loads
//! nothing, every name goes through `escape`, the same report gives the same bytes.

use std::fmt::Write;

use qm_api::review::{Completion, ReviewGroup, ReviewReport};
use qm_sim::report::{
    coord, escape, format_duration, grouped, page_start, tint, value_axis, Frame, LOG_TICKS,
};

use super::format::table;
use super::time::utc;

/// Appends formatted text to a `String` (writing to a `String` cannot fail).
macro_rules! w {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// Own use, and what the charts draw first.
const BLUE: &str = "#0072b2";
/// Restarts and reclaims: what went wrong.
const VERMILION: &str = "#d55e00";
/// Resumes: what went right.
const GREEN: &str = "#009e73";
/// Unknown outcomes.
const GREY: &str = "#999999";

fn seconds(s: Option<f64>) -> String {
    s.map_or("-".into(), format_duration)
}

fn hours(h: f64) -> String {
    if h == 0.0 {
        "-".into()
    } else {
        format!("{h:.2}")
    }
}

fn class(g: &ReviewGroup) -> String {
    g.class.clone().unwrap_or_else(|| "-".into())
}

fn key(g: &ReviewGroup) -> Vec<String> {
    vec![g.job_queue.clone(), g.quota_share_name.clone(), class(g)]
}

fn completion(c: &Completion) -> [String; 3] {
    [
        c.jobs.to_string(),
        seconds(c.p50_seconds),
        seconds(c.p95_seconds),
    ]
}

/// The review as three tables (lending, recovery, stability) and the audit's figures.
pub fn review_table(report: &ReviewReport) -> String {
    let mut out = format!(
        "Policy review from {} to {}{}\n",
        utc(report.since),
        utc(report.until),
        report
            .quota_share_name
            .as_ref()
            .map(|s| format!(", quota share {s}"))
            .unwrap_or_default()
    );
    if report.groups.is_empty() {
        out.push_str("No job of this window.\n");
    } else {
        out.push_str(&section(
            report,
            "Lending: completion time of jobs on own capacity only and of jobs that borrowed; time lost to reclaims; owners' wait for lent capacity",
            &LENDING,
            lending_cells,
        ));
        out.push_str(&section(
            report,
            "Recovery: preemptions and how the next attempts resumed",
            &RECOVERY,
            recovery_cells,
        ));
        out.push_str(&section(
            report,
            "Stability: changes to the jobs, from the audit log",
            &STABILITY,
            stability_cells,
        ));
    }
    out.push_str(&policy_lines(report));
    for note in &report.notes {
        w!(out, "note: {note}\n");
    }
    out
}

/// The lending figures' headers and cells.
const LENDING: [&str; 14] = [
    "OWN",
    "P50",
    "P95",
    "BORROWED",
    "P50",
    "P95",
    "RECLAIMS",
    "REQUEUED-H",
    "REDONE-H",
    "OWNER WAITS",
    "P50",
    "P95",
    "MAX",
    "WAITING",
];

fn lending_cells(g: &ReviewGroup) -> Vec<String> {
    let (l, d) = (&g.reclaim_loss, &g.owner_reclaim_delay);
    let mut cells = Vec::from(completion(&g.own_only));
    cells.extend(completion(&g.borrowed));
    cells.extend([
        l.reclaims.to_string(),
        hours(l.requeued_hours),
        hours(l.recomputed_hours),
        d.count.to_string(),
        seconds(d.p50_seconds),
        seconds(d.p95_seconds),
        seconds(d.max_seconds),
        d.still_waiting.to_string(),
    ]);
    cells
}

const RECOVERY: [&str; 10] = [
    "PREEMPTED",
    "RECLAIM",
    "IN-SHARE",
    "DRILL",
    "RESUMED",
    "RESTARTED",
    "UNKNOWN",
    "REDONE GPU-H",
    "AT LIMIT",
    "3+ TIMES",
];

fn recovery_cells(g: &ReviewGroup) -> Vec<String> {
    let r = &g.recovery;
    vec![
        r.preemptions.to_string(),
        r.reclaims.to_string(),
        r.in_share.to_string(),
        r.drills.to_string(),
        r.resumed.to_string(),
        r.restarted.to_string(),
        r.unknown.to_string(),
        hours(r.recomputed_gpu_hours),
        r.reached_preemption_limit.to_string(),
        r.preempted_three_times_or_more.to_string(),
    ]
}

const STABILITY: [&str; 4] = [
    "PRIORITY CHANGES",
    "ABOVE DEFAULT",
    "BY",
    "TERMINATED BY OTHERS",
];

fn stability_cells(g: &ReviewGroup) -> Vec<String> {
    let s = &g.stability;
    vec![
        s.priority_changes.to_string(),
        s.priority_changes_above_default.to_string(),
        counts(&s.priority_changes_by),
        s.terminations_by_others.to_string(),
    ]
}

/// A section's figures of a group, as table cells.
type Cells = fn(&ReviewGroup) -> Vec<String>;

/// One titled table: a row per group, its key then `cells`.
fn section(report: &ReviewReport, title: &str, headers: &[&str], cells: Cells) -> String {
    let mut all = vec!["QUEUE", "SHARE", "CLASS"];
    all.extend(headers);
    let rows: Vec<Vec<String>> = report
        .groups
        .iter()
        .map(|g| {
            let mut row = key(g);
            row.extend(cells(g));
            row
        })
        .collect();
    format!("\n{title}\n{}", table(&all, &rows))
}

/// `alice 2, bob 1`, or `-`.
fn counts(map: &std::collections::BTreeMap<String, u64>) -> String {
    if map.is_empty() {
        return "-".into();
    }
    let parts: Vec<String> = map.iter().map(|(k, n)| format!("{k} {n}")).collect();
    parts.join(", ")
}

fn policy_lines(report: &ReviewReport) -> String {
    let p = &report.policy;
    let mut out = format!(
        "\nPolicy edits: {} (by {}; {}); qm apply runs: {}\n",
        p.policy_edits,
        counts(&p.policy_edits_by),
        counts(&p.policy_edits_by_action),
        p.applies
    );
    if p.priority_changes_unattributed > 0 {
        w!(
            out,
            "Priority changes of jobs with no record in the window: {}\n",
            p.priority_changes_unattributed
        );
    }
    w!(
        out,
        "Limit changes that preempted running work: {}\n",
        p.limit_changes_that_preempted.len()
    );
    for c in &p.limit_changes_that_preempted {
        w!(
            out,
            "  {} {} {}: {} preempted ({})\n",
            utc(c.at),
            c.actor,
            c.action,
            c.preemptions,
            c.summary
        );
    }
    out
}

/// The review as one HTML page that loads nothing: the tables, then the owners' reclaim delay
/// CDF, own against borrowed use over time, and preemptions and resume outcomes per week.
pub fn review_html(report: &ReviewReport) -> String {
    let title = format!(
        "Policy review, {} to {}",
        &utc(report.since)[..10],
        &utc(report.until)[..10]
    );
    let mut out = page_start(&title, &report.notes);
    if let Some(s) = &report.quota_share_name {
        w!(out, "<p class=\"caption\">Quota share {}.</p>\n", escape(s));
    }
    out.push_str("<h2>Per share and class</h2>\n");
    html_groups(&mut out, report);
    out.push_str("<h2>Owners' reclaim delay</h2>\n");
    delay_cdf(&mut out, report);
    out.push_str("<h2>Own against borrowed use over time</h2>\n");
    use_chart(&mut out, report);
    out.push_str("<h2>Preemptions and resume outcomes per week</h2>\n");
    weeks_chart(&mut out, report);
    out.push_str("<h2>Policy</h2>\n");
    w!(
        out,
        "<pre>{}</pre>\n</body>\n</html>\n",
        escape(policy_lines(report).trim())
    );
    out
}

/// The text tables' three sections, each an HTML table of a row per group.
fn html_groups(out: &mut String, report: &ReviewReport) {
    if report.groups.is_empty() {
        out.push_str("<p class=\"empty\">No job of this window.</p>\n");
        return;
    }
    let sections: [(&str, &[&str], Cells); 3] = [
        ("Lending", &LENDING, lending_cells),
        ("Recovery", &RECOVERY, recovery_cells),
        ("Stability", &STABILITY, stability_cells),
    ];
    for (title, headers, cells) in sections {
        w!(
            out,
            "<h3>{title}</h3>\n<table class=\"stats review\">\n<thead><tr><th>queue / share / class</th>"
        );
        for h in headers {
            w!(out, "<th>{}</th>", escape(&h.to_lowercase()));
        }
        out.push_str("</tr></thead>\n<tbody>\n");
        for g in &report.groups {
            w!(out, "<tr><th>{}</th>", escape(&key(g).join(" / ")));
            for c in cells(g) {
                w!(out, "<td>{}</td>", escape(&c));
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody>\n</table>\n");
    }
}

fn frame() -> Frame {
    Frame {
        width: 1140.0,
        height: 320.0,
        left: 64.0,
        right: 24.0,
        top: 12.0,
        bottom: 40.0,
    }
}

/// The CDF of the owners' reclaim delays on a log axis, as the simulator draws queueing delay.
fn delay_cdf(out: &mut String, report: &ReviewReport) {
    let points = &report.owner_reclaim_delay_cdf;
    out.push_str(
        "<p class=\"caption\">Of the jobs submitted while their share lent part of its \
         capacity, the fraction running within a delay (log scale; under 1 s drawn at 1 s).</p>\n",
    );
    let longest = points.last().map_or(1.0, |p| p.0);
    let hi = LOG_TICKS
        .iter()
        .map(|&(t, _)| t)
        .find(|&t| t >= longest.max(10.0))
        .unwrap_or(longest);
    let x_of = |s: f64| s.max(1.0).log10() / hi.log10();
    let f = frame();
    f.open(out, "cdf owner-delay", "Owners' reclaim delay CDF");
    f.value_axis(out, 1.0, 0.25, "fraction of owners");
    for &(t, label) in LOG_TICKS.iter().filter(|&&(t, _)| t <= hi) {
        f.x_tick(out, f.x(x_of(t)), label);
    }
    f.x_axis(out, "from submission to running (log scale)");
    if points.is_empty() {
        f.empty_note(out, "no owner submitted while its share was lending");
    } else {
        let mut path = format!("M{},{}", coord(f.x(x_of(points[0].0))), coord(f.y(0.0)));
        for &(s, fr) in points {
            w!(path, "L{},{}", coord(f.x(x_of(s))), coord(f.y(fr)));
        }
        w!(
            out,
            "<path d=\"{path}\" fill=\"none\" stroke=\"{BLUE}\" stroke-width=\"2\">\
             <title>{} owners' delays</title></path>\n",
            points.len()
        );
    }
    out.push_str("</svg>\n");
}

/// Bars per period: own use below, borrowed use stacked above it.
fn use_chart(out: &mut String, report: &ReviewReport) {
    let periods = &report.use_over_time;
    w!(
        out,
        "<div class=\"legend\"><span><i class=\"sw\" style=\"background:{BLUE}\"></i>own \
         (within entitlement)</span><span><i class=\"sw\" style=\"background:{}\"></i>borrowed\
         </span></div>\n",
        tint(VERMILION, 0.3)
    );
    let max = periods
        .iter()
        .map(|p| p.own_instance_hours + p.borrowed_instance_hours)
        .fold(0.0, f64::max);
    let (top, step) = value_axis(max, 5.0);
    let f = frame();
    f.open(out, "use", "Own against borrowed instance-hours per period");
    f.value_axis(out, top, step, "instance-hours");
    f.x_axis(out, "period (UTC)");
    let width = f.plot_width() / periods.len().max(1) as f64;
    let label_every = periods.len().div_ceil(12).max(1);
    for (i, p) in periods.iter().enumerate() {
        let x = f.x0() + width * i as f64;
        let own_top = f.y(p.own_instance_hours / top);
        let all_top = f.y((p.own_instance_hours + p.borrowed_instance_hours) / top);
        let date = &utc(p.period_start)[..10];
        let bar = |y0: f64, y1: f64, colour: &str, what: &str, v: f64| {
            format!(
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{colour}\">\
                 <title>{date}: {} instance-hours {what}</title></rect>\n",
                coord(x + 1.0),
                coord(y1),
                coord((width - 2.0).max(1.0)),
                coord((y0 - y1).max(0.0)),
                grouped(v, 2)
            )
        };
        out.push_str(&bar(f.base(), own_top, BLUE, "own", p.own_instance_hours));
        let borrowed = tint(VERMILION, 0.3);
        out.push_str(&bar(
            own_top,
            all_top,
            &borrowed,
            "borrowed",
            p.borrowed_instance_hours,
        ));
        if i % label_every == 0 {
            f.x_tick(out, x + width / 2.0, date);
        }
    }
    if max == 0.0 {
        f.empty_note(out, "no capacity was used in this window");
    }
    out.push_str("</svg>\n");
}

/// Four bars per week: preemptions, then resumes by outcome.
fn weeks_chart(out: &mut String, report: &ReviewReport) {
    let series: [(&str, &str); 4] = [
        ("preemptions", GREY),
        ("resumed", GREEN),
        ("restarted", VERMILION),
        ("unknown", "#cccccc"),
    ];
    out.push_str("<div class=\"legend\">");
    for (name, colour) in series {
        w!(
            out,
            "<span><i class=\"sw\" style=\"background:{colour}\"></i>{name}</span>"
        );
    }
    out.push_str("</div>\n");
    let weeks = &report.weeks;
    let values = |wk: &qm_api::review::RecoveryWeek| {
        [wk.preemptions, wk.resumed, wk.restarted, wk.unknown].map(|n| n as f64)
    };
    let max = weeks.iter().flat_map(&values).fold(0.0, f64::max);
    let (top, step) = value_axis(max, 4.0);
    let f = frame();
    f.open(out, "weeks", "Preemptions and resume outcomes per week");
    f.value_axis(out, top, step, "attempts");
    f.x_axis(out, "week (from Monday, UTC)");
    let width = f.plot_width() / weeks.len().max(1) as f64;
    let bar_width = (width - 4.0).max(4.0) / series.len() as f64;
    let label_every = weeks.len().div_ceil(12).max(1);
    for (i, wk) in weeks.iter().enumerate() {
        let x = f.x0() + width * i as f64 + 2.0;
        let date = &utc(wk.week_start)[..10];
        for (k, (v, (name, colour))) in values(wk).into_iter().zip(series).enumerate() {
            let y = f.y(v / top);
            w!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{colour}\">\
                 <title>week of {date}: {} {name}</title></rect>\n",
                coord(x + bar_width * k as f64),
                coord(y),
                coord(bar_width.max(1.0)),
                coord(f.base() - y),
                grouped(v, 0)
            );
        }
        if i % label_every == 0 {
            f.x_tick(out, x + width / 2.0 - 2.0, date);
        }
    }
    if max == 0.0 {
        f.empty_note(out, "no preemption and no resume in this window");
    }
    out.push_str("</svg>\n");
}
