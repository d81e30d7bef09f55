//! `qm report review` against figures computed by hand.
//!
//! The facts are written out as the archive keeps them (minutes after T0 = Monday
//! 2026-11-02T00:00Z; the data's time is 10:00; the window is that day). Queue `jq`, instance
//! type `u` (4 GPUs): share A entitled to 2, LEND, `qm:max-priority` 10; share B entitled to 2,
//! LEND_AND_BORROW, default class `batch` (max-priority 3). Queue `jq2`: share C entitled to 1,
//! RESERVE.
//!
//! * b1 (B, bob) starts at 0 on 4 (2 borrowed), checkpoints at step 100, reaches step 110; A's
//!   a1 arrives at 60 while A lends, reclaims: b1 stops at 60, gone at 66; a1 runs 66–126 and
//!   succeeds (own only: 3,960 s; owner delay 360 s). b1 runs again 126–240 from step 100 and
//!   succeeds (borrowed: 14,400 s). Its reclaim cost 66 min re-queued = 1.1 h, and 10 steps
//!   at 4.4 instance-hours / 110 steps = 0.4 instance-hours redone: 0.1 h on its 4 instances,
//!   1.6 GPU-hours.
//! * b2 (B) borrows 2 from 280 on; A's a2, submitted at 300 while A lends, is still waiting.
//! * c1 (C, alice, no class) is preempted three times: in-share at 10, a drill at 30, a
//!   reclaim at 50 that exhausts its retries (FAILED at 52). Neither attempt after a preemption
//!   reported steps: `unknown`, redone from checkpoint times: 11 min and 6 min on 1 instance =
//!   0.283333 instance-hours, 1.133333 GPU-hours.
//! * Own against borrowed instance-hours that day: own 2.2 + 2.0 + 3.8 + 10.666667 (b2 to
//!   10:00) + 0.566667 (c1's 34 min) = 19.233333; borrowed 2.2 + 3.8 + 10.666667 = 16.666667.
//! * Audit: alice raises a2 to 50 (above A's 10), carol sets b2 to 2 (within `batch`'s 3), dave
//!   changes a job the review has no record of; carol terminates c1 (alice's), bob his own b1;
//!   admin updates quota share A one second after b1's reclaim was decided (a limit change that
//!   preempted), creates a queue, runs `qm apply`; one clipped entry cannot be read.
//! * dave's job in share D runs after the window: no group of D.
//!
//! The test checks those figures in code, then compares the table and the JSON with the golden
//! files under `tests/golden/review/` (bless an intended change of the rendering with
//! `QM_BLESS=1 cargo test -p qm-cli --test review`), and renders the HTML page.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::collections::BTreeMap;
use std::path::Path;

use qm_api::qm::AuditEntry;
use qm_api::review::ReviewReport;
use qm_cli::client::review::{review_html, review_table};
use qm_server::archive::ArchivedJob;
use qm_server::review::{review, ReviewFacts, ReviewJob, ReviewParams, ShareRules};
use qm_server::usage::ShareEpoch;
use serde_json::{json, Value};

const MIN: i64 = 60_000;
/// 2026-11-02T00:00:00Z, a Monday.
const T0: i64 = 20_759 * 86_400_000;

fn t(minutes: i64) -> i64 {
    T0 + minutes * MIN
}

/// An attempt: `number`, `count` instances from `start` to `stop` (minutes), and `extra`
/// fields (preemption, checkpoint, steps) as the archive writes them.
fn attempt(number: u32, count: u32, start: i64, stop: Option<i64>, extra: Value) -> Value {
    let mut a = json!({
        "number": number, "instanceType": "u", "count": count,
        "startedAt": t(start), "runningAt": t(start),
        "stoppedAt": stop.map(t), "preempted": false, "statusReason": null
    });
    for (k, v) in extra.as_object().unwrap() {
        a[k] = v.clone();
    }
    a
}

fn job(id: &str, queue: &str, share: &str, who: &str, created: i64, rest: Value) -> ReviewJob {
    let mut j = json!({
        "jobId": id, "jobName": id, "jobQueue": queue, "quotaShareName": share,
        "status": "RUNNING", "statusReason": null, "schedulingPriority": 0,
        "createdAt": t(created), "stoppedAt": null, "attempts": [], "preemptedCount": 0,
        "tags": {}, "principal": who
    });
    for (k, v) in rest.as_object().unwrap() {
        j[k] = v.clone();
    }
    let record: ArchivedJob = serde_json::from_value(j).expect("an archived job");
    ReviewJob {
        record,
        unit: Some("u".into()),
    }
}

fn jobs() -> Vec<ReviewJob> {
    let urgent = json!({"qm:class": "urgent"});
    vec![
        job(
            "b1",
            "jq",
            "B",
            "bob",
            0,
            json!({
            "status": "SUCCEEDED", "stoppedAt": t(240), "preemptedCount": 1,
            "attempts": [
                attempt(1, 4, 0, Some(66), json!({
                    "preempted": true, "stopAt": t(60), "checkpointAt": t(30),
                    "preemptedFor": ["A", "a1"],
                    "steps": {"first": 0, "last": 110, "checkpoint": 100}})),
                attempt(2, 4, 126, Some(240), json!({"steps": {"first": 100, "last": 300}})),
            ]}),
        ),
        job(
            "a1",
            "jq",
            "A",
            "alice",
            60,
            json!({
            "status": "SUCCEEDED", "stoppedAt": t(126), "tags": urgent,
            "attempts": [attempt(1, 2, 66, Some(126), json!({}))]}),
        ),
        job(
            "b2",
            "jq",
            "B",
            "bob",
            280,
            json!({
            "attempts": [attempt(1, 4, 280, None, json!({}))]}),
        ),
        job(
            "a2",
            "jq",
            "A",
            "alice",
            300,
            json!({"status": "RUNNABLE", "tags": urgent}),
        ),
        // After the window: its group has nothing to show and is left out.
        job(
            "late",
            "jq2",
            "D",
            "dave",
            1500,
            json!({
            "status": "SUCCEEDED", "stoppedAt": t(1600),
            "attempts": [attempt(1, 1, 1500, Some(1600), json!({}))]}),
        ),
        job(
            "c1",
            "jq2",
            "C",
            "alice",
            0,
            json!({
            "status": "FAILED", "stoppedAt": t(52), "preemptedCount": 3,
            "statusReason": "Preempted: capacity reclaimed by quota share D; preemption retries exhausted",
            "attempts": [
                attempt(1, 1, 0, Some(11), json!({
                    "preempted": true, "stopAt": t(10), "preemptedFor": ["C", "x"]})),
                attempt(2, 1, 20, Some(31), json!({
                    "preempted": true, "stopAt": t(30), "checkpointAt": t(25)})),
                attempt(3, 1, 40, Some(52), json!({
                    "preempted": true, "stopAt": t(50), "preemptedFor": ["D", "d1"]})),
            ]}),
        ),
    ]
}

fn entry(at: i64, actor: &str, action: &str, details: &str) -> AuditEntry {
    AuditEntry {
        at,
        actor: actor.into(),
        action: action.into(),
        summary: details.chars().take(40).collect(),
        details: details.into(),
        tags: None,
    }
}

fn audit() -> Vec<AuditEntry> {
    vec![
        entry(t(-1440), "admin", "updatequotashare", "{}"),
        entry(
            t(310),
            "alice",
            "updateservicejob",
            r#"{"jobId":"a2","schedulingPriority":50}"#,
        ),
        entry(
            t(300),
            "carol",
            "updateservicejob",
            r#"{"jobId":"b2","schedulingPriority":2}"#,
        ),
        entry(
            t(5),
            "dave",
            "updateservicejob",
            r#"{"jobId":"gone","schedulingPriority":1}"#,
        ),
        entry(
            t(45),
            "carol",
            "terminateservicejobs",
            r#"{"jobs":["c1","zzz"],"reason":"x"}"#,
        ),
        entry(
            t(241),
            "bob",
            "terminateservicejob",
            r#"{"jobId":"b1","reason":"x"}"#,
        ),
        entry(
            t(60) + 1000,
            "admin",
            "updatequotashare",
            r#"{"quotaShareName":"A"}"#,
        ),
        entry(
            t(200),
            "admin",
            "createjobqueue",
            r#"{"jobQueueName":"jq3"}"#,
        ),
        entry(t(210), "admin", "apply", "plan"),
        entry(
            t(211),
            "alice",
            "updateservicejob",
            r#"{"jobId":"a2","sched"#,
        ),
    ]
}

fn history() -> qm_server::usage::ShareHistory {
    let epoch = |limit: u32, lends: bool| {
        vec![ShareEpoch {
            from: t(-1440),
            limits: [("u".to_string(), limit)].into(),
            lends,
        }]
    };
    [
        (("jq".into(), "A".into()), epoch(2, true)),
        (("jq".into(), "B".into()), epoch(2, true)),
        (("jq2".into(), "C".into()), epoch(1, false)),
    ]
    .into()
}

fn facts() -> ReviewFacts {
    let classes: BTreeMap<String, i32> = [("batch".to_string(), 3)].into();
    let rules = |default_class: Option<&str>, max_priority: Option<i32>| ShareRules {
        default_class: default_class.map(String::from),
        max_priority,
        class_max_priority: classes.clone(),
    };
    ReviewFacts {
        jobs: jobs(),
        history: history(),
        audit: audit(),
        shares: [
            (("jq".into(), "A".into()), rules(None, Some(10))),
            (("jq".into(), "B".into()), rules(Some("batch"), None)),
            (("jq2".into(), "C".into()), ShareRules::default()),
        ]
        .into(),
        now: t(600),
    }
}

fn params(share: Option<&str>) -> ReviewParams {
    ReviewParams {
        since: T0,
        until: T0 + 1440 * MIN,
        share: share.map(String::from),
        gpus: [("u".to_string(), 4)].into(),
    }
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden/review")
        .join(name);
    if std::env::var_os("QM_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).expect("bless");
        std::fs::write(&path, actual).expect("bless");
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; bless with QM_BLESS=1", path.display()));
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

fn close(a: f64, b: f64) -> bool {
    // Figures are rounded to the microhour, and sums of rounded figures drift by that much.
    (a - b).abs() < 2e-6
}

#[test]
fn the_review_matches_the_figures_computed_by_hand() {
    let r = review(&facts(), &params(None));
    let keys: Vec<(&str, &str, Option<&str>)> = r
        .groups
        .iter()
        .map(|g| {
            (
                g.job_queue.as_str(),
                g.quota_share_name.as_str(),
                g.class.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        [
            ("jq", "A", Some("urgent")),
            ("jq", "B", Some("batch")),
            ("jq2", "C", None)
        ]
    );
    let [a, b, c] = &r.groups[..] else {
        unreachable!()
    };

    // Lending: a1 ran on A's own capacity, b1 borrowed.
    assert_eq!((a.own_only.jobs, a.own_only.p50_seconds), (1, Some(3960.0)));
    assert_eq!(a.borrowed.jobs, 0);
    assert_eq!(
        (b.borrowed.jobs, b.borrowed.p95_seconds),
        (1, Some(14_400.0))
    );
    assert_eq!(b.own_only.jobs, 0);
    let l = &b.reclaim_loss;
    assert_eq!((l.reclaims, l.jobs), (1, 1));
    assert!(
        close(l.requeued_hours, 1.1) && close(l.recomputed_hours, 0.1),
        "{l:?}"
    );
    let d = &a.owner_reclaim_delay;
    assert_eq!(
        (d.count, d.max_seconds, d.still_waiting),
        (1, Some(360.0), 1)
    );
    assert_eq!(
        b.owner_reclaim_delay.count, 0,
        "b1 and b2 were submitted while no one borrowed"
    );
    assert_eq!(r.owner_reclaim_delay_cdf, vec![(360.0, 1.0)]);

    // Recovery.
    assert_eq!((b.recovery.reclaims, b.recovery.resumed), (1, 1));
    assert!(close(b.recovery.recomputed_gpu_hours, 1.6));
    let x = &c.recovery;
    assert_eq!(
        (x.preemptions, x.reclaims, x.in_share, x.drills, x.unknown),
        (3, 1, 1, 1, 2)
    );
    assert_eq!(
        (x.reached_preemption_limit, x.preempted_three_times_or_more),
        (1, 1)
    );
    assert!(close(x.recomputed_gpu_hours, 1.133333), "{x:?}");
    assert_eq!(
        c.reclaim_loss.requeued_hours, 0.0,
        "c1 failed instead of waiting"
    );
    let [week] = &r.weeks[..] else {
        panic!("{:?}", r.weeks)
    };
    assert_eq!((week.preemptions, week.resumed, week.unknown), (4, 1, 2));

    // Own against borrowed.
    let [day] = &r.use_over_time[..] else {
        panic!("{:?}", r.use_over_time)
    };
    assert!(close(day.own_instance_hours, 19.233333), "{day:?}");
    assert!(close(day.borrowed_instance_hours, 16.666667), "{day:?}");
    // The same hours as the usage report's, which counts them its own way.
    let usage_jobs: Vec<_> = jobs().iter().map(|j| j.record.usage()).collect();
    let usage = qm_server::usage::report(
        &usage_jobs,
        &history(),
        &qm_server::usage::UsageParams {
            since: T0,
            until: T0 + 1440 * MIN,
            now: t(600),
            by: qm_api::qm::UsageBy::Share,
            every: None,
            gpus: BTreeMap::new(),
        },
    );
    let within: f64 = usage
        .rows
        .iter()
        .map(|r| r.instance_hours.within_entitlement)
        .sum();
    let borrowed: f64 = usage.rows.iter().map(|r| r.instance_hours.borrowed).sum();
    assert!(close(day.own_instance_hours, within) && close(day.borrowed_instance_hours, borrowed));

    // Stability.
    assert_eq!(
        (
            a.stability.priority_changes,
            a.stability.priority_changes_above_default
        ),
        (1, 1)
    );
    assert_eq!(
        (
            b.stability.priority_changes,
            b.stability.priority_changes_above_default
        ),
        (1, 0)
    );
    assert_eq!(c.stability.terminations_by_others, 1);
    assert_eq!(
        b.stability.terminations_by_others, 0,
        "bob terminated his own job"
    );
    let p = &r.policy;
    assert_eq!(
        (p.policy_edits, p.applies, p.priority_changes_unattributed),
        (2, 1, 1)
    );
    let [change] = &p.limit_changes_that_preempted[..] else {
        panic!("{p:?}")
    };
    assert_eq!(
        (change.action.as_str(), change.preemptions),
        ("updatequotashare", 1)
    );
    assert_eq!(r.notes.len(), 1, "the clipped entry: {:?}", r.notes);

    golden("review.txt", &review_table(&r));
    golden(
        "review.json",
        &(serde_json::to_string_pretty(&r).unwrap() + "\n"),
    );
    let back: ReviewReport = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
    assert_eq!(back, r, "the JSON reads back as the report");
}

#[test]
fn one_share_is_reviewed_with_the_lending_of_all() {
    let r = review(&facts(), &params(Some("A")));
    assert_eq!(r.groups.len(), 1);
    let a = &r.groups[0];
    // A lent to B's b1 when a1 arrived, though B is not in the review.
    assert_eq!(a.owner_reclaim_delay.count, 1);
    assert_eq!(r.policy.priority_changes_unattributed, 0);
    let [day] = &r.use_over_time[..] else {
        panic!()
    };
    assert!(close(day.own_instance_hours, 2.0) && close(day.borrowed_instance_hours, 0.0));
}

#[test]
fn the_html_page_loads_nothing_and_escapes_names() {
    let mut f = facts();
    f.jobs[1]
        .record
        .tags
        .insert("qm:class".into(), "<b>".into());
    let html = review_html(&review(&f, &params(None)));
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.contains("&lt;b&gt;") && !html.contains("<b>"));
    for chart in ["owner-delay", "class=\"plot use\"", "class=\"plot weeks\""] {
        assert!(html.contains(chart), "{chart}");
    }
    assert!(!html.contains("src=") && !html.contains("href="));
}

#[test]
fn a_share_that_does_not_exist_is_said_so() {
    let r = review(&facts(), &params(Some("research")));
    assert!(r.groups.is_empty());
    assert!(
        r.notes.iter().any(|n| n.contains("check --share")),
        "{:?}",
        r.notes
    );
}
