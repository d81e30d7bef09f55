//! `GET /metrics` on the `prometheus-client` crate: capacity per share and type (entitled,
//! used, own, borrowed), who lends to whom, the pool, runnable jobs per share and queue,
//! preemptions, scheduling pass duration and API latency.
//!
//! Gauges are read from the state when scraped, into a registry made for that scrape (the
//! state is the one truth; nothing is kept twice); the two histograms live as long as the
//! server and are registered into it. One registry, two encodings: OpenMetrics for a scraper
//! that asks for it (`Accept: application/openmetrics-text`, as Prometheus does), else the
//! Prometheus text format 0.0.4. The series names are the same in both (docs/server.md); only
//! OpenMetrics carries the API latency's exemplars (the request id of each bucket's latest).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::exemplar::HistogramWithExemplars;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use crate::state::State;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// The `Content-Type` of an OpenMetrics answer.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The `Content-Type` of a Prometheus text answer.
pub const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A histogram of durations with the server's buckets.
pub fn latency_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    operation: String,
}

/// An exemplar's label: the `x-amzn-RequestId` the client was answered with.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestId {
    request_id: String,
}

type LatencyHistogram = HistogramWithExemplars<RequestId>;

fn latency_with_exemplars() -> LatencyHistogram {
    HistogramWithExemplars::new(BUCKETS.into_iter())
}

/// API latency per operation, kept by the HTTP layer (cheap to clone: the counts are shared).
/// Each bucket keeps the request id of its latest request as an exemplar (OpenMetrics only).
#[derive(Clone, Debug)]
pub struct ApiLatency {
    by_operation: Family<OperationLabels, LatencyHistogram, fn() -> LatencyHistogram>,
}

impl Default for ApiLatency {
    fn default() -> Self {
        ApiLatency {
            by_operation: Family::new_with_constructor(latency_with_exemplars),
        }
    }
}

impl ApiLatency {
    /// Records one request, with the id it was answered with if any.
    pub fn observe(&self, operation: &str, seconds: f64, request_id: Option<&str>) {
        let exemplar = request_id.map(|id| RequestId {
            request_id: id.to_string(),
        });
        self.by_operation
            .get_or_create(&OperationLabels {
                operation: operation.to_string(),
            })
            .observe(seconds, exemplar, None);
    }

    /// Adds the `qm_api_request_seconds` family to a scrape's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "qm_api_request",
            "Time from request to response, by operation",
            Unit::Seconds,
            self.by_operation.clone(),
        );
    }
}

/// A scrape in the format the client asked for (by its `Accept` header), with its
/// `Content-Type`.
pub fn encode(
    registry: &Registry,
    accept: &str,
) -> Result<(String, &'static str), std::fmt::Error> {
    let mut out = String::new();
    if accept.contains("application/openmetrics-text") {
        prometheus_client::encoding::text::encode(&mut out, registry)?;
        Ok((out, OPENMETRICS))
    } else {
        prometheus_client::encoding::prometheus_text::encode(&mut out, registry)?;
        Ok((out, PROMETHEUS_TEXT))
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShareLabels {
    job_queue: String,
    quota_share: String,
    instance_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    job_queue: String,
    instance_type: String,
    lender: String,
    borrower: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UnitLabels {
    job_queue: String,
    instance_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdleLabels {
    job_queue: String,
    instance_type: String,
    cause: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueShareLabels {
    job_queue: String,
    quota_share: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    job_queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    status: String,
}

/// The share gauges, one family per column of `qm shares`.
#[derive(Default)]
struct ShareFamilies {
    entitled: Family<ShareLabels, Gauge>,
    used: Family<ShareLabels, Gauge>,
    own: Family<ShareLabels, Gauge>,
    borrowed: Family<ShareLabels, Gauge>,
    runnable: Family<ShareLabels, Gauge>,
}

impl ShareFamilies {
    fn fill(&self, state: &State) {
        for q in state.queues.values() {
            let runnable = state.runnable_counts(&q.name);
            for u in state.share_usage(&q.name) {
                if !q.shares.contains_key(&u.share) {
                    continue;
                }
                let waiting = runnable
                    .get(&(u.share.clone(), u.instance_type.clone()))
                    .copied()
                    .unwrap_or(0);
                let labels = ShareLabels {
                    job_queue: q.name.clone(),
                    quota_share: u.share,
                    instance_type: u.instance_type,
                };
                self.entitled
                    .get_or_create(&labels)
                    .set(i64::from(u.entitlement));
                self.used.get_or_create(&labels).set(i64::from(u.usage));
                self.own
                    .get_or_create(&labels)
                    .set(i64::from(u.usage - u.borrowed));
                self.borrowed
                    .get_or_create(&labels)
                    .set(i64::from(u.borrowed));
                self.runnable.get_or_create(&labels).set(waiting as i64);
            }
        }
    }

    fn register(self, r: &mut Registry) {
        r.register(
            "qm_share_entitled_instances",
            "Instances the share may use without borrowing",
            self.entitled,
        );
        r.register(
            "qm_share_used_instances",
            "Instances held by the share's attempts, stopping ones included",
            self.used,
        );
        r.register(
            "qm_share_own_instances",
            "Instances held by the share's attempts within its entitlement",
            self.own,
        );
        r.register(
            "qm_share_borrowed_instances",
            "Instances used above the share's entitlement",
            self.borrowed,
        );
        r.register(
            "qm_share_runnable_jobs",
            "RUNNABLE jobs of the share that can fit (misconfigured ones excluded)",
            self.runnable,
        );
    }
}

/// The pool per queue and type, and who lends to whom.
fn pool_and_flows(state: &State, r: &mut Registry) {
    let limit = Family::<UnitLabels, Gauge>::default();
    let free = Family::<UnitLabels, Gauge>::default();
    let lending = Family::<FlowLabels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    for q in state.queues.values() {
        for p in state.core.pool(&q.name).unwrap_or_default() {
            let labels = UnitLabels {
                job_queue: q.name.clone(),
                instance_type: p.instance_type,
            };
            limit.get_or_create(&labels).set(i64::from(p.environment));
            free.get_or_create(&labels).set(i64::from(p.free));
        }
        for f in state.core.flows(&q.name).unwrap_or_default() {
            let labels = FlowLabels {
                job_queue: q.name.clone(),
                instance_type: f.instance_type,
                lender: f.lender,
                borrower: f.borrower,
            };
            lending.get_or_create(&labels).set(f.instances);
        }
    }
    r.register(
        "qm_pool_limit_instances",
        "The service environment's limit for the instance type, as the queue sees it",
        limit,
    );
    r.register(
        "qm_pool_free_instances",
        "Instances the queue could still start: its limit (and the physical instances other queues leave) less what it holds",
        free,
    );
    r.register(
        "qm_idle_while_waiting_instances",
        "Instances free while a RUNNABLE job that fits them waits, under the dominant cause (reservation, reserve, borrow_limit, group_limit, no_borrowing, never_fits, other); every cause is 0 otherwise",
        idle_while_waiting(state),
    );
    r.register(
        "qm_lent_instances",
        "Instances the lender's idle entitlement gives the borrower (pooled lending split in proportion)",
        lending,
    );
}

/// Idle while jobs wait, per queue, type and cause: every cause of every pool type has a
/// series (0 but for the dominant one), so that a rate or an alert never sees one vanish.
fn idle_while_waiting(state: &State) -> Family<IdleLabels, Gauge> {
    let idle = Family::<IdleLabels, Gauge>::default();
    for q in state.queues.values() {
        let now = state.idle_while_waiting(&q.name);
        for p in state.core.pool(&q.name).unwrap_or_default() {
            let wasted = now.iter().find(|e| e.capacity_unit == p.instance_type);
            for cause in qm_core::IdleCause::ALL {
                let value = wasted
                    .filter(|e| e.cause == cause.code())
                    .map_or(0, |e| i64::from(e.idle));
                idle.get_or_create(&IdleLabels {
                    job_queue: q.name.clone(),
                    instance_type: p.instance_type.clone(),
                    cause: cause.code().to_string(),
                })
                .set(value);
            }
        }
    }
    idle
}

/// The queue and job counts, and preemptions.
fn counts(state: &State, r: &mut Registry) {
    let preemptions = Family::<QueueShareLabels, Counter>::default();
    // Every share's counter is there from its start, at 0: a rate over a series that appears
    // only at its first preemption would miss that preemption.
    for q in state.queues.values() {
        for s in q.shares.keys() {
            preemptions
                .get_or_create(&QueueShareLabels {
                    job_queue: q.name.clone(),
                    quota_share: s.clone(),
                })
                .inc_by(0);
        }
    }
    for ((q, s), n) in &state.preemptions {
        preemptions
            .get_or_create(&QueueShareLabels {
                job_queue: q.clone(),
                quota_share: s.clone(),
            })
            .inc_by(*n);
    }
    r.register(
        "qm_preemptions",
        "Attempts preempted (reclaim or in-share), by the victim's share",
        preemptions,
    );
    let depth = Family::<QueueLabels, Gauge>::default();
    for q in state.queues.values() {
        depth
            .get_or_create(&QueueLabels {
                job_queue: q.name.clone(),
            })
            .set(q.runnable.len() as i64);
    }
    r.register(
        "qm_queue_runnable_jobs",
        "RUNNABLE jobs of the queue, misconfigured ones included",
        depth,
    );
    let jobs = Family::<StatusLabels, Gauge>::default();
    for rec in state.jobs.values() {
        jobs.get_or_create(&StatusLabels {
            status: rec.status.as_str().to_string(),
        })
        .inc();
    }
    r.register("qm_jobs", "Jobs the server knows, by status", jobs);
}

/// A registry with the families the state knows, for one scrape.
pub fn registry_of(state: &State, pass_seconds: &Histogram) -> Registry {
    let mut r = Registry::default();
    let shares = ShareFamilies::default();
    shares.fill(state);
    shares.register(&mut r);
    pool_and_flows(state, &mut r);
    counts(state, &mut r);
    let drained = Gauge::<i64>::default();
    drained.set(i64::from(state.core.drained().is_some()));
    r.register(
        "qm_executor_drained",
        "1 while the executor is drained (qm drain): no attempt starts",
        drained,
    );
    r.register_with_unit(
        "qm_scheduling_pass",
        "Duration of applying a batch and its scheduling pass (one per batch)",
        Unit::Seconds,
        pass_seconds.clone(),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(r: &Registry, accept: &str) -> String {
        encode(r, accept).unwrap().0
    }

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket_in_both_formats() {
        let h = latency_histogram();
        h.observe(0.0002);
        h.observe(0.02);
        let mut r = Registry::default();
        r.register_with_unit("x", "An example", Unit::Seconds, h);
        for accept in ["", "application/openmetrics-text; version=1.0.0"] {
            let out = scrape(&r, accept);
            assert!(out.contains("x_seconds_bucket{le=\"0.00025\"} 1"), "{out}");
            assert!(out.contains("x_seconds_bucket{le=\"0.025\"} 2"), "{out}");
            assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 2"), "{out}");
            assert!(out.contains("x_seconds_count 2"), "{out}");
        }
    }

    #[test]
    fn openmetrics_ends_with_eof_and_counters_keep_their_total_suffix() {
        let mut r = Registry::default();
        let c: Counter = Counter::default();
        c.inc_by(3);
        r.register("qm_preemptions", "Preemptions", c);
        let (om, ct) = encode(&r, "application/openmetrics-text").unwrap();
        assert_eq!(ct, OPENMETRICS);
        assert!(
            om.ends_with("# EOF\n") && om.contains("qm_preemptions_total 3"),
            "{om}"
        );
        let (text, ct) = encode(&r, "*/*").unwrap();
        assert_eq!(ct, PROMETHEUS_TEXT);
        assert!(
            !text.contains("# EOF") && text.contains("qm_preemptions_total 3"),
            "{text}"
        );
    }

    #[test]
    fn api_latency_carries_the_request_id_as_an_exemplar_in_openmetrics_only() {
        let a = ApiLatency::default();
        a.observe("submitservicejob", 0.003, Some("req-1"));
        let mut r = Registry::default();
        a.register(&mut r);
        let om = scrape(&r, "application/openmetrics-text");
        assert!(om.contains("# {request_id=\"req-1\"} 0.003"), "{om}");
        assert!(
            !scrape(&r, "").contains("req-1"),
            "text 0.0.4 has no exemplars"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        let a = ApiLatency::default();
        a.observe("we\"ird", 0.001, None);
        let mut r = Registry::default();
        a.register(&mut r);
        let out = scrape(&r, "");
        assert!(out.contains("operation=\"we\\\"ird\""), "{out}");
    }
}
