//! `qm simulate` and `qm workload generate` through the real binary: the outputs exist, the
//! same inputs give a byte-identical metrics.json, and bad inputs fail with a useful message.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::path::Path;
use std::process::Command;

fn qm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qm"))
        .args(args)
        .output()
        .expect("qm runs")
}

fn write_policy(dir: &Path) -> String {
    let path = dir.join("lend-and-borrow.yaml");
    std::fs::write(
        &path,
        "environment: {gpu: 32}\n\
         shares:\n\
         \x20 - {name: t00, limits: {gpu: 12}, strategy: LEND_AND_BORROW}\n\
         \x20 - {name: t01, limits: {gpu: 8}, strategy: LEND_AND_BORROW, borrow_limit: 100}\n\
         \x20 - {name: t02, limits: {gpu: 8}, strategy: LEND}\n\
         \x20 - {name: t03, limits: {gpu: 4}, strategy: RESERVE}\n",
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn the_same_workload_policies_and_seed_give_a_byte_identical_metrics_json() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("w.csv").display().to_string();
    let out = qm(&[
        "workload",
        "generate",
        "--jobs",
        "600",
        "--tenants",
        "4",
        "--seed",
        "7",
        "--load",
        "1.2",
        "--capacity",
        "32",
        "--out",
        &workload,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy = write_policy(dir.path());
    let run = |out_dir: &str| {
        let o = qm(&[
            "simulate",
            "--workload",
            &workload,
            "--policy",
            &policy,
            "--baseline",
            "strict",
            "--baseline",
            "pooled",
            "--baseline",
            "pooled-backfill",
            "--seed",
            "3",
            "--out",
            out_dir,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let a = dir.path().join("a").display().to_string();
    let b = dir.path().join("b").display().to_string();
    let table = run(&a);
    run(&b);
    let ma = std::fs::read(Path::new(&a).join("metrics.json")).unwrap();
    let mb = std::fs::read(Path::new(&b).join("metrics.json")).unwrap();
    assert_eq!(ma, mb, "metrics.json differs between two identical runs");
    let ra = std::fs::read(Path::new(&a).join("report.html")).unwrap();
    assert_eq!(
        ra,
        std::fs::read(Path::new(&b).join("report.html")).unwrap()
    );

    // The documented shape: variants[] with name, overall and shares[] (with name).
    let m: serde_json::Value = serde_json::from_slice(&ma).unwrap();
    let variants = m["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["lend-and-borrow", "strict", "pooled", "pooled-backfill"]
    );
    // The Slurm-like pool never preempts, and every job that fits completes.
    assert_eq!(variants[3]["overall"]["preemptions"], 0);
    assert_eq!(variants[3]["overall"]["completed"], 600);
    for v in variants {
        for stats in std::iter::once(&v["overall"]).chain(v["shares"].as_array().unwrap()) {
            for key in [
                "jobs",
                "completed",
                "never_started",
                "jct_s",
                "queue_delay_s",
                "reclaim_delay_s",
                "preemptions",
                "lost_gpu_hours",
                "restart_overhead_gpu_hours",
                "borrowed_gpu_hours",
                "utilization",
            ] {
                assert!(!stats[key].is_null(), "{key} missing in {stats}");
            }
            for d in ["jct_s", "queue_delay_s", "reclaim_delay_s"] {
                for p in ["p50", "p95", "p99", "mean"] {
                    assert!(stats[d][p].is_number(), "{d}.{p}");
                }
            }
        }
        assert_eq!(v["shares"].as_array().unwrap().len(), 4);
        assert_eq!(v["overall"]["jobs"], 600);
    }
    assert!(
        table.contains("lend-and-borrow") && table.contains("queue delay p95"),
        "{table}"
    );
    // A different seed moves the checkpoint phases, and with them the work lost.
    let c = dir.path().join("c").display().to_string();
    let o = qm(&[
        "simulate",
        "--workload",
        &workload,
        "--policy",
        &policy,
        "--seed",
        "4",
        "--out",
        &c,
    ]);
    assert!(o.status.success());
    let mc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(Path::new(&c).join("metrics.json")).unwrap())
            .unwrap();
    assert_eq!(mc["seed"], 4);
}

#[test]
fn a_scenario_file_can_be_simulated_as_a_cluster_file() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("w.csv");
    std::fs::write(
        &workload,
        "job_id,tenant,submit_time_s,duration_s,gpus,status\n\
         a,QS1,0,100,1,UNKNOWN\nb,QS1,0,100,1,UNKNOWN\nc,QS2,50,10,1,UNKNOWN\n",
    )
    .unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/aws-demo.yaml");
    let out = dir.path().join("out");
    let o = qm(&[
        "simulate",
        "--workload",
        workload.to_str().unwrap(),
        "--policy",
        scenario.to_str().unwrap(),
        "--instance-type",
        "ml.g5.xlarge",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    // b borrows QS2's idle instance; c reclaims it at t=50.
    assert_eq!(m["variants"][0]["overall"]["preemptions"], 1);
    assert_eq!(m["variants"][0]["overall"]["completed"], 3);
}

/// Cluster files that differ only in `idle_assignment`, `fair_reclaim`, weights or groups are
/// variants like any others: they run side by side, share by share, each with its fairness
/// figure, and the table prints it.
#[test]
fn variants_that_differ_only_in_fair_sharing_keys_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("w.csv");
    // A's burst comes first; B's the same second.
    let mut csv = String::from("job_id,tenant,submit_time_s,duration_s,gpus,status\n");
    for tenant in ["A", "B"] {
        for i in 0..12 {
            csv += &format!("{tenant}{i},{tenant},0,1000,1,UNKNOWN\n");
        }
    }
    std::fs::write(&workload, csv).unwrap();
    let shares = "environment: {gpu: 8}\n\
                  shares:\n\
                  \x20 - {name: L, limits: {gpu: 6}, strategy: LEND}\n\
                  \x20 - {name: A, limits: {gpu: 1}, strategy: LEND_AND_BORROW}\n\
                  \x20 - {name: B, limits: {gpu: 1}, strategy: LEND_AND_BORROW, weight: 2}\n";
    let files = [
        ("fifo", String::new()),
        ("fair", "idle_assignment: FAIR_SHARE\n".to_string()),
        (
            "fair-reclaim",
            "idle_assignment: FAIR_SHARE\nfair_reclaim: true\n".to_string(),
        ),
        (
            "grouped",
            "groups:\n  - {name: g, shares: [L, B]}\n".to_string(),
        ),
    ];
    let mut args = vec!["simulate".to_string(), "--workload".into()];
    args.push(workload.display().to_string());
    for (name, head) in &files {
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, format!("{head}{shares}")).unwrap();
        args.push("--policy".into());
        args.push(path.display().to_string());
    }
    let out = dir.path().join("out");
    args.push("--out".into());
    args.push(out.display().to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = qm(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("Jain index run (contended)"), "{table}");
    assert!(table.contains("slowdown mean"), "{table}");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metrics.json")).unwrap()).unwrap();
    let variants = m["variants"].as_array().unwrap();
    let names: Vec<&str> = variants
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fifo", "fair", "fair-reclaim", "grouped"]);
    for v in variants {
        let shares: Vec<&str> = v["shares"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap())
            .collect();
        assert_eq!(shares, ["L", "A", "B"]);
        for key in ["jain", "jain_contended", "contended_hours"] {
            assert!(v["fairness"][key].is_number(), "{key} in {v}");
        }
        assert!(v["overall"]["slowdown"]["mean"].is_number());
    }
    // FIFO lends L's idle GPUs to A, which came first; FAIR_SHARE splits them by weight.
    let jain = |i: usize| variants[i]["fairness"]["jain"].as_f64().unwrap();
    assert!(jain(1) > jain(0), "{} vs {}", jain(1), jain(0));
    let b_wait = |i: usize| {
        variants[i]["shares"][2]["queue_delay_s"]["mean"]
            .as_f64()
            .unwrap()
    };
    assert!(b_wait(1) < b_wait(0) && b_wait(3) < b_wait(0));
}

#[test]
fn bad_inputs_fail_with_messages_that_say_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let policy = write_policy(dir.path());
    let workload = dir.path().join("w.csv");
    std::fs::write(
        &workload,
        "job_id,tenant,submit_time_s,duration_s,gpus,status\na,stranger,0,100,1,UNKNOWN\n",
    )
    .unwrap();
    let o = qm(&[
        "simulate",
        "--workload",
        workload.to_str().unwrap(),
        "--policy",
        &policy,
        "--out",
        dir.path().join("o").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stranger") && err.contains("tenants"), "{err}");
    let o = qm(&[
        "workload",
        "generate",
        "--jobs",
        "0",
        "--out",
        "/tmp/never.csv",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--jobs"));
}
