//! The HTML report: self-contained, complete, escaped, deterministic, bounded in size, and
//! robust to empty or degenerate inputs. Also writes an example page to look at
//! (`$TMPDIR/report-example.html`).

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use qm_sim::report::render_html;
use qm_sim::{
    Dist, FairnessStats, IdleStats, ShareStats, Stats, Timeline, VariantMetrics, VariantRun,
};

/// A deterministic pseudo-random value in 0..1 (no RNG dependency needed for fabricated data).
fn noise(a: usize, b: usize, c: usize) -> f64 {
    let mut x = (a as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (b as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ (c as u64).wrapping_mul(0x1656_67b1_9e37_79f9);
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 29;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

fn stats(seed: usize, scale: f64) -> Stats {
    let d = |base: f64| Dist {
        p50: base * scale,
        p95: base * scale * 6.0,
        p99: base * scale * 20.0,
        mean: base * scale * 2.0,
    };
    Stats {
        jobs: 1000,
        completed: 990 - (seed as u64 % 7),
        never_started: seed as u64 % 7,
        jct_s: d(3600.0),
        queue_delay_s: d(120.0),
        slowdown: Dist {
            p50: 1.0 + scale,
            p95: 4.0 * scale,
            p99: 9.0 * scale,
            mean: 2.0 * scale,
        },
        reclaim_delay_s: d(30.0),
        preemptions: (seed as u64 * 13) % 50,
        needless_preemptions: (seed as u64 * 3) % 7,
        lost_gpu_hours: (seed % 17) as f64 * 1.37,
        restart_overhead_gpu_hours: (seed % 5) as f64 * 0.21,
        borrowed_gpu_hours: (seed % 11) as f64 * 12.5,
        utilization: 0.5 + noise(seed, 0, 0) * 0.4,
    }
}

/// A variant with `shares` shares, `bins` bins of 10 minutes on `capacity` instances, and
/// `delays` queueing delays (a few of them zero).
fn run(variant: usize, name: &str, shares: &[String], bins: usize, capacity: f64) -> VariantRun {
    // Own usage swings around the entitlement; shares of one third borrow most of what the
    // others leave idle.
    let per_share = capacity / shares.len().max(1) as f64;
    let own: Vec<Vec<f64>> = (0..shares.len())
        .map(|s| {
            (0..bins)
                .map(|b| {
                    let wave = 0.6 + 0.4 * ((b as f64 / 90.0) + s as f64).sin();
                    per_share * (wave * (0.9 + 0.1 * noise(variant, s, b))).min(1.0)
                })
                .collect()
        })
        .collect();
    let borrowers = (0..shares.len())
        .filter(|s| s % 3 == variant % 3)
        .count()
        .max(1);
    let borrowed = (0..shares.len())
        .map(|s| {
            (0..bins)
                .map(|b| {
                    let idle = capacity - own.iter().map(|o| o[b]).sum::<f64>();
                    if s % 3 == variant % 3 {
                        idle * 0.8 * (0.8 + 0.2 * noise(variant + 7, s, b)) / borrowers as f64
                    } else {
                        0.0
                    }
                })
                .collect()
        })
        .collect();
    let mut delays: Vec<f64> = (0..2000)
        .map(|i| {
            if i % 10 == 0 {
                0.0
            } else {
                10f64.powf(noise(variant, i, 1) * 5.0 + variant as f64 * 0.3)
            }
        })
        .collect();
    delays.sort_by(f64::total_cmp);
    VariantRun {
        metrics: VariantMetrics {
            name: name.to_string(),
            overall: stats(variant + 1, 1.0 + variant as f64),
            shares: shares
                .iter()
                .enumerate()
                .map(|(s, share)| ShareStats {
                    name: share.clone(),
                    stats: stats(variant * 31 + s, 1.0),
                })
                .collect(),
            idle_while_waiting: IdleStats {
                instance_hours: 12.5 * variant as f64,
                fraction: 0.04 * variant as f64,
                cause: (variant > 0).then_some("borrow_limit"),
                by_cause: [("borrow_limit", 12.5 * variant as f64)].into(),
                by_instance_type: [("gpu".to_string(), 12.5 * variant as f64)].into(),
            },
            fairness: FairnessStats {
                jain: 1.0 - 0.05 * variant as f64,
                jain_contended: 1.0 - 0.2 * variant as f64,
                contended_hours: 40.0 * variant as f64,
            },
        },
        timeline: Timeline {
            // Variants end at different times: the charts share one time axis.
            start_s: 0.0,
            bin_s: 600.0 * (1.0 + variant as f64 * 0.5),
            capacity,
            queued: (0..shares.len())
                .map(|s| {
                    (0..bins)
                        .map(|b| (b % 40) as f64 * noise(variant, s, b))
                        .collect()
                })
                .collect(),
            idle_waiting: (0..bins).map(|b| (b % 7) as f64 * variant as f64).collect(),
            jain: (0..bins)
                .map(|b| 1.0 - 0.5 * noise(variant, 99, b) * (b % 3).min(1) as f64)
                .collect(),
            shares: shares.to_vec(),
            own,
            borrowed,
        },
        queue_delays: delays,
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:02}")).collect()
}

fn notes() -> Vec<String> {
    vec![
        "workload: fabricated.csv (2,000 jobs)".to_string(),
        "seed 7; checkpoints every 1800 s, restart overhead 60 s, stop grace 120 s".to_string(),
    ]
}

fn runs(variants: &[&str], shares: &[String], bins: usize) -> Vec<VariantRun> {
    variants
        .iter()
        .enumerate()
        .map(|(v, name)| run(v, name, shares, bins, 64.0))
        .collect()
}

fn count(page: &str, needle: &str) -> usize {
    page.matches(needle).count()
}

#[test]
fn the_page_loads_nothing_from_the_network() {
    let page = render_html("study", &runs(&["a", "b"], &names("s", 3), 100), &notes());
    let without_namespace = page.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    assert!(!without_namespace.contains("http://"));
    assert!(!without_namespace.contains("https://"));
    assert!(!page.contains("<script"));
    assert!(!page.contains("<link"));
    assert!(!page.contains("@import"));
    assert!(!page.contains("url(http"));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.ends_with("</html>\n"));
}

#[test]
fn every_variant_share_and_note_appears() {
    let shares = names("team", 5);
    let page = render_html(
        "study",
        &runs(&["strict", "pooled", "lend"], &shares, 50),
        &notes(),
    );
    for name in ["strict", "pooled", "lend"]
        .iter()
        .map(|s| s.to_string())
        .chain(shares)
    {
        assert!(page.contains(&format!(">{name}<")), "{name} missing");
    }
    for note in notes() {
        assert!(page.contains(&format!("<li>{note}</li>")));
    }
}

#[test]
fn names_from_user_files_are_escaped() {
    let evil = "<b>&\"x";
    let shares = vec![evil.to_string(), "plain".to_string()];
    let page = render_html(evil, &runs(&[evil, "ok"], &shares, 20), &[evil.to_string()]);
    assert!(!page.contains(evil));
    assert!(!page.contains("<b>"));
    assert!(page.contains("&lt;b&gt;&amp;&quot;x"));
}

#[test]
fn each_plot_kind_has_its_svg() {
    let page = render_html(
        "study",
        &runs(&["a", "b", "c"], &names("s", 4), 80),
        &notes(),
    );
    assert_eq!(
        count(&page, "<svg class=\"plot utilization\""),
        3,
        "one per variant"
    );
    assert_eq!(count(&page, "<svg class=\"plot cdf\""), 1);
    assert_eq!(count(&page, "<svg class=\"plot bars preemptions\""), 1);
    assert_eq!(count(&page, "<svg class=\"plot bars lost-work\""), 1);
    assert_eq!(count(&page, "<svg class=\"plot queue-depth\""), 1);
    assert_eq!(count(&page, "<svg class=\"plot idle-waiting\""), 1);
    assert_eq!(count(&page, "<svg class=\"plot jain\""), 1);
    assert_eq!(count(&page, "<svg"), 9);
    assert_eq!(count(&page, "<svg"), count(&page, "</svg>"));
    assert_eq!(count(&page, "<table class=\"stats\">"), 1);
}

/// The section of `page` from `start` to the next `</svg>`.
fn svg<'a>(page: &'a str, start: &str) -> &'a str {
    let from = page.find(start).expect(start);
    &page[from..from + page[from..].find("</svg>").unwrap()]
}

#[test]
fn the_queue_depth_and_idle_charts_draw_one_line_per_variant_with_data() {
    let page = render_html(
        "study",
        &runs(&["a", "b", "c"], &names("s", 4), 80),
        &notes(),
    );
    let queue = svg(&page, "<svg class=\"plot queue-depth\"");
    assert_eq!(count(queue, "<path d=\"M"), 3);
    assert!(!queue.contains("none at any time"));
    assert!(queue.contains("waiting jobs</title>"));
    // Variant "a" has nothing idle: only "b" and "c" draw a line.
    let idle = svg(&page, "<svg class=\"plot idle-waiting\"");
    assert_eq!(count(idle, "<path d=\"M"), 3, "a flat line at zero for a");
    let jain = svg(&page, "<svg class=\"plot jain\"");
    assert_eq!(count(jain, "<path d=\"M"), 3);
    assert!(jain.contains("Jain index</title>"));
}

#[test]
fn the_fairness_of_idle_capacity_is_in_the_table() {
    let page = render_html("study", &runs(&["a", "b"], &names("s", 2), 30), &notes());
    let table = &page[page.find("<table class=\"stats\">").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("Fairness of idle capacity"));
    // a: 1.000 over the run; b: 0.950, the lower, not highlighted.
    assert!(table.contains("<tr><th>Jain index, whole run</th><td class=\"best\" title=\"1.000\">1.000</td><td title=\"0.950\">0.950</td></tr>"), "{table}");
    assert!(
        table.contains("<tr><th>contended time</th><td title=\"0.000 s\">0 s</td>"),
        "{table}"
    );
    assert!(table.contains("Slowdown"));
}

#[test]
fn every_variant_has_a_per_share_table_with_its_numbers() {
    let shares = names("s", 4);
    let page = render_html("study", &runs(&["a", "b"], &shares, 80), &notes());
    assert_eq!(count(&page, "<table class=\"stats shares\">"), 2);
    assert!(page.contains("<h3>a: per share</h3>"));
    let table = &page[page.find("<h3>b: per share</h3>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    for share in &shares {
        assert!(table.contains(&format!("<tr><td>{share}</td>")), "{share}");
    }
    assert!(table.contains("<tr><td>all shares</td>"));
    assert!(table.contains("<th>wait p95</th>"));
    // 4 shares + all: one row each, 14 numbers a row.
    assert_eq!(count(table, "<td title="), 5 * 14);
    assert!(table.contains("<th>slowdown mean</th>"));
}

#[test]
fn charts_over_time_share_one_time_axis() {
    let page = render_html(
        "study",
        &runs(&["a", "b", "c"], &names("s", 4), 80),
        &notes(),
    );
    // The longest variant (c: 80 bins of 20 min) sets every axis; the same ticks everywhere.
    // Every label at the x-axis's height, as (x, text).
    fn ticks(svg: &str) -> Vec<(String, String)> {
        svg.split("<text x=\"")
            .skip(1)
            .filter(|t| {
                t[..t.find('>').unwrap()].ends_with("\"middle\"") && !t.contains("simulated")
            })
            .map(|t| {
                let x = t[..t.find('"').unwrap()].to_string();
                let label = &t[t.find('>').unwrap() + 1..];
                (x, label[..label.find('<').unwrap()].to_string())
            })
            .collect()
    }
    let first = ticks(svg(&page, "<svg class=\"plot utilization\""));
    assert!(first.len() > 3);
    let pieces: Vec<&str> = page
        .split("<svg class=\"plot utilization\"")
        .skip(1)
        .collect();
    for piece in pieces {
        assert_eq!(ticks(&piece[..piece.find("</svg>").unwrap()]), first);
    }
    assert_eq!(ticks(svg(&page, "<svg class=\"plot queue-depth\"")), first);
}

#[test]
fn a_large_idle_while_waiting_is_a_red_headline() {
    let page = render_html(
        "study",
        &runs(&["a", "b", "c"], &names("s", 2), 20),
        &notes(),
    );
    assert!(page.contains("<p class=\"idle\">a: idle while jobs wait 0.00 instance-hours (0.0 %"));
    assert!(page.contains("<p class=\"idle warn\">c: idle while jobs wait 25.0 instance-hours (8.0 % of the capacity), mostly borrow_limit"));
}

#[test]
fn the_best_value_of_a_row_is_highlighted() {
    let mut input = runs(&["slow", "fast"], &names("s", 2), 10);
    input[0].metrics.overall.queue_delay_s.p50 = 7200.0;
    input[1].metrics.overall.queue_delay_s.p50 = 60.0;
    let page = render_html("study", &input, &[]);
    assert!(page.contains("<td class=\"best\" title=\"60.000 s\">1m 00s</td>"));
    assert!(page.contains("<td title=\"7200.000 s\">2h 00m</td>"));
}

#[test]
fn the_same_input_renders_the_same_bytes() {
    let input = runs(&["a", "b", "c"], &names("s", 6), 300);
    assert_eq!(
        render_html("study", &input, &notes()),
        render_html("study", &input.clone(), &notes())
    );
}

#[test]
fn degenerate_inputs_render_without_panics_or_nans() {
    let shares = names("s", 2);
    let no_jobs = VariantRun {
        metrics: VariantMetrics {
            name: "no jobs".to_string(),
            overall: Stats::default(),
            shares: shares
                .iter()
                .map(|name| ShareStats {
                    name: name.clone(),
                    stats: Stats::default(),
                })
                .collect(),
            idle_while_waiting: IdleStats::default(),
            fairness: FairnessStats::default(),
        },
        timeline: Timeline {
            start_s: 0.0,
            bin_s: 0.0,
            capacity: 0.0,
            shares: shares.clone(),
            own: vec![],
            borrowed: vec![],
            queued: vec![],
            idle_waiting: vec![],
            jain: vec![],
        },
        queue_delays: vec![],
    };
    let mut none_completed = run(1, "none completed", &shares, 30, 0.0);
    none_completed.metrics.overall.completed = 0;
    none_completed.metrics.overall.utilization = f64::NAN;
    none_completed.metrics.overall.lost_gpu_hours = f64::INFINITY;
    none_completed.queue_delays.clear();
    none_completed.timeline.own[0][3] = f64::NAN;
    let mut ragged = run(2, "ragged", &shares, 30, 16.0);
    ragged.timeline.own.pop();
    ragged.timeline.borrowed[0].truncate(5);
    ragged
        .timeline
        .shares
        .push("only in the timeline".to_string());

    let cases: Vec<(&str, Vec<VariantRun>)> = vec![
        ("no variant at all", vec![]),
        ("a variant without jobs", vec![no_jobs.clone()]),
        (
            "a variant where no job completed, among others",
            vec![no_jobs, none_completed, ragged],
        ),
    ];
    for (case, input) in cases {
        let page = render_html("", &input, &[]);
        for bad in ["NaN", "inf", "∞"] {
            assert!(!page.contains(bad), "{case}: {bad} in the page");
        }
        assert!(page.ends_with("</html>\n"), "{case}");
    }
}

#[test]
fn a_large_report_stays_small() {
    let input = runs(
        &["strict", "pooled", "lend", "lend-2"],
        &names("share", 15),
        2000,
    );
    let page = render_html("study", &input, &notes());
    eprintln!("15 shares x 4 variants x 2000 bins: {} bytes", page.len());
    assert!(page.len() < 2_000_000, "{} bytes", page.len());
}

#[test]
fn writes_an_example_page() {
    let mut shares = names("team", 12);
    shares.push("a-share-with-a-rather-long-name".to_string());
    let input = runs(&["strict", "pooled", "lend-and-borrow"], &shares, 1500);
    let page = render_html("Quartermaster simulation: example", &input, &notes());
    let path = std::env::temp_dir().join("report-example.html");
    std::fs::write(&path, page).unwrap();
}
