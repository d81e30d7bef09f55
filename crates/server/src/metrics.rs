//! `GET /metrics` in the Prometheus text format: capacity per share and type (entitled, used,
//! borrowed), runnable jobs per share, preemptions, scheduling pass duration and API latency.
//! Gauges are read from the state when scraped; the two histograms are kept as they happen.

use std::collections::BTreeMap;
use std::fmt::Write;

use crate::state::State;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// A cumulative histogram with fixed buckets.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    /// Records one observation in seconds.
    pub fn observe(&mut self, seconds: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                self.counts[i] += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum);
        let _ = writeln!(out, "{name}_count{braces} {}", self.count);
    }
}

/// API latency per operation, kept by the HTTP layer.
#[derive(Debug, Default)]
pub struct ApiLatency {
    by_operation: BTreeMap<String, Histogram>,
}

impl ApiLatency {
    /// Records one request.
    pub fn observe(&mut self, operation: &str, seconds: f64) {
        self.by_operation
            .entry(operation.to_string())
            .or_default()
            .observe(seconds);
    }

    /// The `qm_api_request_seconds` family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP qm_api_request_seconds Time from request to response, by operation.\n",
        );
        out.push_str("# TYPE qm_api_request_seconds histogram\n");
        for (op, h) in &self.by_operation {
            h.render(
                &mut out,
                "qm_api_request_seconds",
                &format!("operation=\"{}\"", escape(op)),
            );
        }
        out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families the state knows.
pub fn render_state(state: &State) -> String {
    let mut out = String::new();
    let gauge = |out: &mut String, name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    };
    let mut rows = Vec::new();
    for q in state.queues.values() {
        let runnable = state.runnable_counts(&q.name);
        for mut u in state.share_usage(&q.name) {
            if q.shares.contains_key(&u.share) {
                u.pending = runnable
                    .get(&(u.share.clone(), u.instance_type.clone()))
                    .copied()
                    .unwrap_or(0) as usize;
                rows.push((q.name.clone(), u));
            }
        }
    }
    let labels = |q: &str, u: &qm_core::ShareUsage| {
        format!(
            "job_queue=\"{}\",quota_share=\"{}\",instance_type=\"{}\"",
            escape(q),
            escape(&u.share),
            escape(&u.instance_type)
        )
    };
    for (name, help, value) in [
        (
            "qm_share_entitled_instances",
            "Instances the share may use without borrowing.",
            (|u: &qm_core::ShareUsage| u.entitlement) as fn(&qm_core::ShareUsage) -> u32,
        ),
        (
            "qm_share_used_instances",
            "Instances held by the share's attempts, stopping ones included.",
            |u| u.usage,
        ),
        (
            "qm_share_borrowed_instances",
            "Instances used above the share's entitlement.",
            |u| u.borrowed,
        ),
        (
            "qm_share_runnable_jobs",
            "RUNNABLE jobs of the share that can fit (misconfigured ones excluded).",
            |u| u.pending as u32,
        ),
    ] {
        gauge(&mut out, name, help);
        for (q, u) in &rows {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(q, u), value(u));
        }
    }
    let _ = writeln!(
        out,
        "# HELP qm_preemptions_total Attempts preempted (reclaim or in-share), by the victim's share.\n# TYPE qm_preemptions_total counter"
    );
    for ((q, s), n) in &state.preemptions {
        let _ = writeln!(
            out,
            "qm_preemptions_total{{job_queue=\"{}\",quota_share=\"{}\"}} {n}",
            escape(q),
            escape(s)
        );
    }
    gauge(&mut out, "qm_jobs", "Jobs the server knows, by status.");
    let mut by_status: BTreeMap<&str, u64> = BTreeMap::new();
    for rec in state.jobs.values() {
        *by_status.entry(rec.status.as_str()).or_default() += 1;
    }
    for (status, n) in by_status {
        let _ = writeln!(out, "qm_jobs{{status=\"{status}\"}} {n}");
    }
    out.push_str(
        "# HELP qm_scheduling_pass_seconds Duration of applying a batch and its scheduling pass (one per batch).\n",
    );
    out.push_str("# TYPE qm_scheduling_pass_seconds histogram\n");
    state
        .pass_seconds
        .render(&mut out, "qm_scheduling_pass_seconds", "");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket() {
        let mut h = Histogram::default();
        h.observe(0.0002);
        h.observe(0.02);
        let mut out = String::new();
        h.render(&mut out, "x", "");
        assert!(out.contains("x_bucket{le=\"0.00025\"} 1"), "{out}");
        assert!(out.contains("x_bucket{le=\"0.025\"} 2"), "{out}");
        assert!(out.contains("x_bucket{le=\"+Inf\"} 2"), "{out}");
        assert!(out.contains("x_count 2"), "{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut a = ApiLatency::default();
        a.observe("we\"ird", 0.001);
        assert!(a.render().contains("operation=\"we\\\"ird\""));
    }
}
