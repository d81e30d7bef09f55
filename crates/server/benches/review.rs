//! Benchmark of the policy review over a large archive (divan;
//! `cargo bench -p qm-server --bench review`).
//!
//! N retired jobs over a quarter (one queue, eight shares entitled to 16 instances each of two
//! instance types, LEND_AND_BORROW), a fifth of them reclaimed once and resumed from a
//! checkpoint, plus 10,000 audit entries, written to an archive in a temporary directory once;
//! then `review`: reading the archive and computing the review of the whole quarter, what
//! `GET /qm/v1/review` does after asking the state for its own jobs.
//!
//! N is 1,000,000 (1,000 when run as a test, e.g. `cargo test --all-targets`). The target of
//! issue 19 is under 5 s for 1,000,000 jobs.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use qm_server::archive::{Archive, ArchivedAudit, ArchivedJob};
use qm_server::command::AuditEntry;
use qm_server::review::{review_with_archive, ReviewFacts, ReviewParams};
use qm_server::usage::{ShareEpoch, ShareHistory};
use serde_json::{json, Value};

fn main() {
    divan::main();
    // The archive is static (written once for every sample): remove it by hand.
    if let Some((dir, _)) = ARCHIVE.get() {
        let _ = std::fs::remove_dir_all(dir.path());
    }
}

static ARCHIVE: OnceLock<(tempfile::TempDir, Archive)> = OnceLock::new();

fn jobs() -> u64 {
    if cfg!(debug_assertions) {
        1_000
    } else {
        1_000_000
    }
}

const DAY: i64 = 86_400_000;
/// 2026-07-06T00:00Z, a Monday.
const SINCE: i64 = 20_640 * DAY;
const UNTIL: i64 = SINCE + 91 * DAY;
const SHARES: u64 = 8;

/// A small deterministic generator (the figures do not matter, only their spread).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

fn attempt(number: u32, unit: &str, count: u64, start: i64, stop: i64, extra: Value) -> Value {
    let mut a = json!({
        "number": number, "instanceType": unit, "count": count, "startedAt": start,
        "runningAt": start + 30_000, "stoppedAt": stop, "preempted": false, "statusReason": null
    });
    for (k, v) in extra.as_object().expect("an object") {
        a[k] = v.clone();
    }
    a
}

fn job(i: u64, rng: &mut Lcg) -> ArchivedJob {
    let share = rng.next(SHARES);
    let unit = if rng.next(2) == 0 {
        "ml.g5.xlarge"
    } else {
        "ml.p4d.24xlarge"
    };
    let count = 1 + rng.next(4);
    let created = SINCE + rng.next(90 * DAY as u64) as i64;
    let start = created + rng.next(3_600_000) as i64;
    let run = 600_000 + rng.next(6 * 3_600_000) as i64;
    let attempts = if rng.next(5) == 0 {
        let cut = start + run / 2;
        vec![
            attempt(
                1,
                unit,
                count,
                start,
                cut + 60_000,
                json!({
                "preempted": true, "stopAt": cut, "checkpointAt": cut - 300_000,
                "preemptedFor": [format!("s{}", (share + 1) % SHARES), "x"],
                "steps": {"first": 0, "last": 500, "checkpoint": 450}}),
            ),
            attempt(
                2,
                unit,
                count,
                cut + 600_000,
                cut + 600_000 + run,
                json!({
                "steps": {"first": 450, "last": 1000}}),
            ),
        ]
    } else {
        vec![attempt(1, unit, count, start, start + run, json!({}))]
    };
    let stopped = attempts.last().and_then(|a| a["stoppedAt"].as_i64());
    serde_json::from_value(json!({
        "jobId": format!("job-{i:08}"), "jobName": "bench", "jobQueue": "q",
        "quotaShareName": format!("s{share}"), "status": "SUCCEEDED", "statusReason": null,
        "schedulingPriority": 0, "createdAt": created, "stoppedAt": stopped,
        "attempts": attempts, "preemptedCount": attempts.len() - 1,
        "tags": {}, "principal": format!("user{}", rng.next(50))
    }))
    .expect("an archived job")
}

fn history() -> ShareHistory {
    (0..SHARES)
        .map(|s| {
            let epoch = ShareEpoch {
                from: SINCE - DAY,
                limits: [("ml.g5.xlarge".into(), 16), ("ml.p4d.24xlarge".into(), 16)].into(),
                lends: true,
            };
            (("q".to_string(), format!("s{s}")), vec![epoch])
        })
        .collect()
}

/// The archive, written once for every sample.
fn archive() -> &'static (tempfile::TempDir, Archive) {
    ARCHIVE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let archive = Archive::new(dir.path());
        let mut rng = Lcg(19);
        let mut batch = Vec::with_capacity(10_000);
        for i in 0..jobs() {
            batch.push(job(i, &mut rng));
            if batch.len() == 10_000 {
                archive.append(&batch).expect("archived");
                batch.clear();
            }
        }
        archive.append(&batch).expect("archived");
        let audit: Vec<ArchivedAudit> = (0..10_000u64)
            .map(|seq| ArchivedAudit {
                seq,
                entry: AuditEntry {
                    at: SINCE + seq as i64 * 60_000,
                    actor: "lead".into(),
                    action: "updateservicejob".into(),
                    summary: String::new(),
                    details: format!(r#"{{"jobId":"job-{seq:08}","schedulingPriority":5}}"#),
                    tags: None,
                },
            })
            .collect();
        archive.append_audit(&audit).expect("archived");
        (dir, archive)
    })
}

#[divan::bench(sample_count = 3, sample_size = 1)]
fn review(bencher: divan::Bencher) {
    let (_, archive) = archive();
    let params = ReviewParams {
        since: SINCE,
        until: UNTIL,
        share: None,
        gpus: BTreeMap::from([("ml.g5.xlarge".into(), 1), ("ml.p4d.24xlarge".into(), 8)]),
    };
    bencher.bench(|| {
        let facts = ReviewFacts {
            history: history(),
            now: UNTIL,
            ..ReviewFacts::default()
        };
        let r = review_with_archive(archive, facts, &params).expect("a review");
        assert_eq!(r.groups.len(), SHARES as usize);
        r
    });
}

/// Reading the archive alone: the part of `review` that parses the JSON lines.
#[divan::bench(sample_count = 3, sample_size = 1)]
fn read_archive(bencher: divan::Bencher) {
    let (_, archive) = archive();
    bencher.bench(|| archive.read(SINCE, i64::MAX).expect("read").len());
}
