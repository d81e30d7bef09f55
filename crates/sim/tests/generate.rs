//! `qm workload generate`'s model: determinism, calibration against the published Philly
//! statistics (docs/workload-generator.md), and the options it refuses.

// A test tells one story from start to end; the length rule is for the product's code.
#![allow(clippy::too_many_lines)]

use std::sync::OnceLock;

use qm_sim::generate::{generate, GenerateOptions, GPU_CLASSES};
use qm_sim::{write_workload, WorkloadJob};

/// 200,000 jobs with the default options, generated once for the statistical tests.
fn big() -> &'static [WorkloadJob] {
    static JOBS: OnceLock<Vec<WorkloadJob>> = OnceLock::new();
    JOBS.get_or_init(|| {
        generate(&GenerateOptions {
            jobs: 200_000,
            ..GenerateOptions::default()
        })
        .unwrap()
    })
}

fn opts(jobs: usize, seed: u64) -> GenerateOptions {
    GenerateOptions {
        jobs,
        seed,
        ..GenerateOptions::default()
    }
}

fn csv_bytes(jobs: &[WorkloadJob]) -> Vec<u8> {
    let mut out = Vec::new();
    write_workload(&mut out, jobs).unwrap();
    out
}

/// Offered load over the window the jobs arrive in: GPU-seconds over capacity × span, the
/// span measured to the last arrival (the true window ends a little later).
fn offered_load(jobs: &[WorkloadJob], capacity_gpus: u32) -> f64 {
    let work: f64 = jobs
        .iter()
        .map(|j| f64::from(j.gpus) * j.duration_s as f64)
        .sum();
    let span = jobs.last().unwrap().submit_time_s as f64 + 1.0;
    work / (f64::from(capacity_gpus) * span)
}

#[test]
fn the_same_seed_gives_identical_jobs_and_another_seed_different_ones() {
    let a = generate(&opts(5_000, 7)).unwrap();
    let b = generate(&opts(5_000, 7)).unwrap();
    assert_eq!(a, b);
    assert_eq!(csv_bytes(&a), csv_bytes(&b));
    let c = generate(&opts(5_000, 8)).unwrap();
    assert_ne!(a, c);
    let moved = |f: fn(&WorkloadJob) -> u64| a.iter().zip(&c).filter(|(x, y)| f(x) != f(y)).count();
    assert!(
        moved(|j| j.duration_s) > 4_000,
        "durations barely changed with the seed"
    );
    assert!(
        moved(|j| j.submit_time_s) > 4_000,
        "arrivals barely changed with the seed"
    );
}

/// Pinned output: a change here means every generated workload changed. It must not differ
/// between platforms (the generator avoids the platform's libm); when the model is changed on
/// purpose, update the hash and say so in the change.
#[test]
fn a_pinned_workload_is_the_same_on_every_platform() {
    let bytes = csv_bytes(&generate(&opts(2_000, 42)).unwrap());
    // FNV-1a, 64 bits.
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    assert_eq!(
        hash,
        3_048_048_247_018_332_924,
        "first lines:\n{}",
        String::from_utf8_lossy(&bytes[..300])
    );
}

/// Tolerances are about four standard errors of each statistic at 200k jobs (durations have
/// a coefficient of variation of 6.4, GPU-seconds per job of 17), except the load, which the
/// generator sets exactly.
#[test]
fn two_hundred_thousand_jobs_land_near_the_published_philly_statistics() {
    let jobs = big();
    let n = jobs.len() as f64;
    let mut durations: Vec<u64> = jobs.iter().map(|j| j.duration_s).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2] as f64;
    let mean = durations.iter().sum::<u64>() as f64 / n;
    let mean_gpus = jobs.iter().map(|j| f64::from(j.gpus)).sum::<f64>() / n;
    let gpu_s = jobs
        .iter()
        .map(|j| f64::from(j.gpus) * j.duration_s as f64)
        .sum::<f64>()
        / n;
    let load = offered_load(jobs, 512);
    let near = |got: f64, want: f64, tol: f64| (got / want - 1.0).abs() <= tol;
    // Acme's Philly row: med_run_time_gpu, avg_run_time_gpu, avg_gpu_num, GPU time / jobs.
    assert!(
        near(median, 874.0, 0.03),
        "median duration {median} s, want 874 s ± 3 %"
    );
    assert!(
        near(mean, 18_006.055, 0.06),
        "mean duration {mean} s, want 18,006 s ± 6 %"
    );
    assert!(
        near(mean_gpus, 1.928, 0.02),
        "mean GPUs {mean_gpus}, want 1.928 ± 2 %"
    );
    assert!(
        near(gpu_s, 61_038.97, 0.15),
        "GPU-s per job {gpu_s}, want 61,039 ± 15 %"
    );
    assert!(near(load, 0.8, 0.01), "offered load {load}, want 0.8 ± 1 %");
    assert!(
        *durations.last().unwrap() <= 4_240_676,
        "longer than Philly's longest job"
    );
    assert!(durations[0] >= 1);
    let median_gpus = {
        let mut g: Vec<u32> = jobs.iter().map(|j| j.gpus).collect();
        g.sort_unstable();
        g[g.len() / 2]
    };
    assert_eq!(median_gpus, 1, "Acme's med_gpu_num");
}

#[test]
fn the_offered_load_is_the_one_asked_for() {
    for (load, capacity) in [(0.3, 64), (2.0, 64), (0.8, 2_048), (10.0, 1)] {
        let jobs = generate(&GenerateOptions {
            jobs: 20_000,
            load,
            capacity_gpus: capacity,
            ..GenerateOptions::default()
        })
        .unwrap();
        let got = offered_load(&jobs, capacity);
        assert!(
            (got / load - 1.0).abs() < 0.01,
            "--load {load} --capacity {capacity}: {got}"
        );
    }
}

#[test]
fn gpu_counts_come_only_from_the_philly_classes_and_never_exceed_the_capacity() {
    assert!(big().iter().all(|j| GPU_CLASSES.contains(&j.gpus)));
    assert!(
        big().iter().any(|j| j.gpus >= 64),
        "the tail reaches 64 GPUs in 200k jobs"
    );
    for (capacity, largest) in [(12, 8), (4, 4), (1, 1)] {
        let jobs = generate(&GenerateOptions {
            jobs: 20_000,
            capacity_gpus: capacity,
            ..GenerateOptions::default()
        })
        .unwrap();
        assert!(jobs
            .iter()
            .all(|j| GPU_CLASSES.contains(&j.gpus) && j.gpus <= largest));
        assert!(
            jobs.iter().any(|j| j.gpus == largest),
            "capacity {capacity}"
        );
    }
}

#[test]
fn submit_times_are_sorted_and_ids_count_up_in_that_order() {
    let jobs = big();
    assert!(jobs
        .windows(2)
        .all(|w| w[0].submit_time_s <= w[1].submit_time_s));
    assert_eq!(jobs[0].job_id, "syn-000000");
    assert_eq!(jobs[199_999].job_id, "syn-199999");
    assert!(jobs
        .iter()
        .all(|j| j.status == "UNKNOWN" && j.priority.is_none()));
    let one = generate(&GenerateOptions {
        jobs: 1,
        tenants: 1,
        ..GenerateOptions::default()
    })
    .unwrap();
    assert_eq!((one.len(), one[0].tenant.as_str()), (1, "t00"));
}

#[test]
fn every_tenant_appears_and_the_shares_are_skewed() {
    let mut per_tenant = std::collections::BTreeMap::<&str, usize>::new();
    for j in big() {
        *per_tenant.entry(&j.tenant).or_default() += 1;
    }
    let names: Vec<&str> = per_tenant.keys().copied().collect();
    assert_eq!(
        names,
        ["t00", "t01", "t02", "t03", "t04", "t05", "t06", "t07"]
    );
    let counts: Vec<usize> = per_tenant.values().copied().collect();
    assert!(counts.windows(2).all(|w| w[0] > w[1]), "{counts:?}");
    assert!(counts[0] > 100_000 && counts[7] > 2_000, "{counts:?}");

    // As many tenants as jobs: one each; more than 100 tenants: three digits.
    let jobs = generate(&GenerateOptions {
        jobs: 101,
        tenants: 101,
        ..GenerateOptions::default()
    })
    .unwrap();
    let mut names: Vec<&str> = jobs.iter().map(|j| j.tenant.as_str()).collect();
    names.sort_unstable();
    let want: Vec<String> = (0..101).map(|k| format!("t{k:03}")).collect();
    assert_eq!(names, want);
}

/// Philly's hourly arrival counts have a median of 15 against a mean of 42 and an index of
/// dispersion (variance / mean) of 159; a plain Poisson stream would have median ≈ mean and
/// dispersion 1.
#[test]
fn arrivals_come_in_bursts_like_phillys() {
    let jobs = big();
    let hours = jobs.last().unwrap().submit_time_s / 3_600 + 1;
    let mut counts = vec![0u32; hours as usize];
    for j in jobs {
        counts[(j.submit_time_s / 3_600) as usize] += 1;
    }
    let mean = jobs.len() as f64 / hours as f64;
    let var = counts
        .iter()
        .map(|&c| (f64::from(c) - mean).powi(2))
        .sum::<f64>()
        / hours as f64;
    counts.sort_unstable();
    let median = f64::from(counts[counts.len() / 2]);
    assert!(var / mean > 20.0, "index of dispersion {}", var / mean);
    assert!(median < 0.7 * mean, "median hour {median} vs mean {mean}");
}

#[test]
fn nonsense_options_are_refused_naming_the_option_and_the_fix() {
    let d = GenerateOptions::default;
    let cases = [
        ("no jobs", GenerateOptions { jobs: 0, ..d() }, "--jobs"),
        (
            "too many jobs",
            GenerateOptions {
                jobs: 10_000_001,
                ..d()
            },
            "--jobs",
        ),
        (
            "no tenants",
            GenerateOptions { tenants: 0, ..d() },
            "--tenants",
        ),
        (
            "more tenants than jobs",
            GenerateOptions {
                jobs: 5,
                tenants: 6,
                ..d()
            },
            "--tenants",
        ),
        ("zero load", GenerateOptions { load: 0.0, ..d() }, "--load"),
        (
            "negative load",
            GenerateOptions { load: -0.5, ..d() },
            "--load",
        ),
        (
            "load above ten",
            GenerateOptions { load: 10.5, ..d() },
            "--load",
        ),
        (
            "NaN load",
            GenerateOptions {
                load: f64::NAN,
                ..d()
            },
            "--load",
        ),
        (
            "no capacity",
            GenerateOptions {
                capacity_gpus: 0,
                ..d()
            },
            "--capacity",
        ),
        (
            "a span of millennia",
            GenerateOptions {
                load: 1e-9,
                capacity_gpus: 1,
                ..d()
            },
            "--load",
        ),
    ];
    for (name, o, flag) in cases {
        let e = generate(&o).expect_err(name);
        let msg = e.to_string();
        assert!(matches!(e, qm_sim::SimError::Options(_)), "{name}: {e:?}");
        assert!(msg.contains(flag), "{name}: {msg}");
        assert!(
            ["e.g.", "raise", "lower"]
                .iter()
                .any(|fix| msg.contains(fix)),
            "{name} does not say what to do: {msg}"
        );
    }
}
