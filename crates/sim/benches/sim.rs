//! Simulator speed: the Philly trace (82,247 jobs) under its lend-and-borrow policy and its two
//! baselines, and a million synthetic jobs. Run with `cargo bench -p qm-sim --bench sim`.
//! The Philly cases need `../shared/traces` next to the repository; they are skipped without it.

use std::path::{Path, PathBuf};

use qm_core::{ShareSpec, Strategy};
use qm_sim::*;

fn main() {
    divan::main();
}

fn traces() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces/philly_vc");
    p.join("jobs.csv").exists().then_some(p)
}

/// The cluster of examples/philly/lend-and-borrow.yaml, built from vc_capacity.csv.
fn philly_cluster(dir: &Path) -> Cluster {
    let text = std::fs::read_to_string(dir.join("vc_capacity.csv")).unwrap();
    let mut shares = Vec::new();
    let mut total = 0;
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let limit = (f[2].parse::<f64>().unwrap() * 0.2).round() as u32;
        total += limit;
        let mut s = ShareSpec::new(f[0]);
        s.limits.insert("gpu".into(), limit);
        s.strategy = Strategy::LendAndBorrow;
        shares.push(s);
    }
    let mut other = ShareSpec::new("other");
    other.limits.insert("gpu".into(), 8);
    other.strategy = Strategy::LendAndBorrow;
    shares.push(other);
    Cluster {
        environment: [("gpu".to_string(), total + 8)].into(),
        shares,
        tenants: [("*".to_string(), "other".to_string())].into(),
        ..Default::default()
    }
}

#[divan::bench(args = ["lend-and-borrow", "strict", "pooled"], sample_count = 3)]
fn philly(bencher: divan::Bencher, variant: &str) {
    let Some(dir) = traces() else {
        eprintln!("skipped: ../shared/traces not found");
        return;
    };
    let jobs = read_workload(&dir.join("jobs.csv")).unwrap();
    let reference = philly_cluster(&dir);
    let (cluster, fifo) = match variant {
        "strict" => (reference.strict(), false),
        "pooled" => (reference.pooled(), true),
        _ => (reference.clone(), false),
    };
    let opts = SimOptions {
        ignore_priorities: fifo,
        ..SimOptions::default()
    };
    bencher.bench(|| {
        run_variant(
            variant,
            &cluster,
            &reference,
            &jobs,
            &opts,
            &mut |_, _, _| {},
        )
        .unwrap()
    });
}

#[divan::bench(sample_count = 3)]
fn generate_1m(bencher: divan::Bencher) {
    let opts = generate::GenerateOptions {
        jobs: 1_000_000,
        ..generate::GenerateOptions::default()
    };
    bencher.bench(|| generate::generate(&opts).unwrap());
}

/// A million synthetic jobs (8 tenants, offered load 0.8 of 512 GPUs) under lend-and-borrow.
#[divan::bench(sample_count = 2)]
fn synthetic_1m(bencher: divan::Bencher) {
    let jobs = generate::generate(&generate::GenerateOptions {
        jobs: 1_000_000,
        ..generate::GenerateOptions::default()
    })
    .unwrap();
    let shares = (0..8)
        .map(|i| {
            let mut s = ShareSpec::new(format!("t{i:02}"));
            s.limits.insert("gpu".into(), 64);
            s.strategy = Strategy::LendAndBorrow;
            s
        })
        .collect();
    let cluster = Cluster {
        environment: [("gpu".to_string(), 512)].into(),
        shares,
        tenants: Default::default(),
        ..Default::default()
    };
    let opts = SimOptions::default();
    bencher.bench(|| {
        run_variant(
            "lend-and-borrow",
            &cluster,
            &cluster,
            &jobs,
            &opts,
            &mut |_, _, _| {},
        )
        .unwrap()
    });
}
