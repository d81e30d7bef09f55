//! Synthetic workloads for `qm workload generate`: as many jobs and tenants as asked, at a
//! chosen offered load, shaped like the Philly GPU cluster (Microsoft, 2017) as its published
//! statistics describe it. `docs/workload-generator.md` has the model, each parameter's source
//! (file, row, column) and how to cite the traces.
//!
//! The model, in the order [`generate`] draws it:
//!
//! 1. **Size**: a GPU count from the Philly mix, then a duration from a log-normal whose median
//!    grows with the GPU count (`g^β`), truncated at the longest Philly job. The mix, the
//!    log-normal and `β` together reproduce Acme's Philly median and mean run time, mean GPUs and
//!    GPU-seconds per job.
//! 2. **Span**: the arrival window is as long as makes the file's offered load exactly `load`
//!    (its GPU-seconds over `capacity_gpus × span`), not only in expectation: with durations
//!    this heavy-tailed, a window set from the expected work would miss by several per cent at
//!    200k jobs and by far more at 1k.
//! 3. **Arrivals**: a Markov-modulated Poisson process. The rate is piecewise constant per
//!    hour: a steady base plus a log-normal burst level driven by two hourly AR(1) chains (one
//!    of days, one of hours), fitted to Philly's hourly arrival counts. Given the rate path, the
//!    `jobs` arrivals are the order statistics of that Poisson process conditioned on its count.
//! 4. **Tenants**: Zipf shares fitted to Philly's virtual clusters, exact up to rounding (every
//!    tenant gets at least one job), dealt to the jobs in random order.
//!
//! Determinism: the same options give the same jobs on every platform. Randomness comes from
//! xoshiro256** seeded through SplitMix64, one stream per step so that changing one step does
//! not move the others. Only IEEE-754 basic arithmetic and `sqrt` (both exactly rounded) touch
//! the draws; `ln` and `exp` are implemented here (after fdlibm), because `f64::ln`/`f64::exp`
//! call the platform's libm, whose last bits differ between platforms, and a one-ulp difference
//! in a cumulative arrival time can move a submit second.

use crate::error::SimError;
use crate::workload::WorkloadJob;

/// What to generate. The defaults are those of `qm workload generate`.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    /// Number of jobs, `1..=`[`MAX_JOBS`].
    pub jobs: usize,
    /// Number of tenants `t00`, `t01`, ..., `1..=`[`MAX_TENANTS`] and at most `jobs`.
    pub tenants: usize,
    /// Seed of every random draw.
    pub seed: u64,
    /// Offered load relative to `capacity_gpus`, in `(0, 10]`: the GPU-seconds the jobs ask
    /// for per second of the arrival window, over `capacity_gpus` (0.8 = 80 % busy if nothing
    /// waited).
    pub load: f64,
    /// GPUs the load is relative to; also caps a job's GPU count.
    pub capacity_gpus: u32,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            jobs: 10_000,
            tenants: 8,
            seed: 0,
            load: 0.8,
            capacity_gpus: 512,
        }
    }
}

/// The most jobs one call generates (a few GB of jobs in memory).
pub const MAX_JOBS: usize = 10_000_000;
/// The most tenants one call generates.
pub const MAX_TENANTS: usize = 1_000;
/// The highest offered load accepted (ten times the capacity).
pub const MAX_LOAD: f64 = 10.0;
/// The longest arrival window accepted: 1,000 years of 365.25 days, in seconds.
pub const MAX_SPAN_S: f64 = 1_000.0 * 365.25 * 86_400.0;

/// Generates a workload: jobs sorted by `submit_time_s`, ids `syn-000000`, ..., tenants
/// `t00`, ..., status `UNKNOWN`, no priority.
///
/// Errors with [`SimError::Options`] when an option is out of range, naming the CLI flag.
pub fn generate(opts: &GenerateOptions) -> Result<Vec<WorkloadJob>, SimError> {
    validate(opts)?;
    let n = opts.jobs;

    // 1. Sizes: GPU count and duration, drawn together (longer jobs on more GPUs).
    let model = SizeModel::calibrated(opts.capacity_gpus);
    let mut rng = Rng::stream(opts.seed, Stream::Sizes);
    let sizes: Vec<(u32, u64)> = (0..n).map(|_| model.draw(&mut rng)).collect();

    // 2. Span: as long as makes the offered load exactly `load`. The work fits u64: at most
    //    MAX_JOBS × 128 GPUs × MAX_DURATION_S ≈ 5.4e15 GPU-seconds.
    let work_gpu_s: u64 = sizes.iter().map(|&(g, d)| u64::from(g) * d).sum();
    let span_s = work_gpu_s as f64 / (f64::from(opts.capacity_gpus) * opts.load);
    if span_s > MAX_SPAN_S {
        return Err(SimError::Options(format!(
            "--load {} on --capacity {} spreads {} jobs over {:.0} years (at most {:.0}); \
             raise --load or --capacity, or lower --jobs",
            opts.load,
            opts.capacity_gpus,
            n,
            span_s / (365.25 * 86_400.0),
            MAX_SPAN_S / (365.25 * 86_400.0),
        )));
    }

    // 3. Arrivals: bursty, sorted, inside [0, span_s).
    let submit_s = arrival_times(
        n,
        span_s,
        Rng::stream(opts.seed, Stream::ArrivalRate),
        Rng::stream(opts.seed, Stream::ArrivalSpacings),
    );

    // 4. Tenants: skewed shares, random order.
    let tenant_of = tenant_labels(
        n,
        opts.tenants,
        &mut Rng::stream(opts.seed, Stream::Tenants),
    );
    let width = (opts.tenants - 1).to_string().len().max(2);
    let names: Vec<String> = (0..opts.tenants).map(|k| format!("t{k:0width$}")).collect();

    Ok(sizes
        .into_iter()
        .zip(submit_s)
        .zip(tenant_of)
        .enumerate()
        .map(
            |(i, (((gpus, duration_s), submit_time_s), tenant))| WorkloadJob {
                job_id: format!("syn-{i:06}"),
                tenant: names[tenant as usize].clone(),
                submit_time_s,
                duration_s,
                gpus,
                status: "UNKNOWN".into(),
                priority: None,
                instance_type: None,
                checkpoint_interval_s: None,
                ..WorkloadJob::default()
            },
        )
        .collect())
}

fn validate(o: &GenerateOptions) -> Result<(), SimError> {
    let fail = |m: String| Err(SimError::Options(m));
    if o.jobs == 0 {
        return fail(
            "--jobs must be at least 1; give the number of jobs to generate, e.g. --jobs 10000"
                .into(),
        );
    }
    if o.jobs > MAX_JOBS {
        return fail(format!(
            "--jobs {} is above the limit of {MAX_JOBS}; lower --jobs",
            o.jobs
        ));
    }
    if o.tenants == 0 {
        return fail(
            "--tenants must be at least 1; give the number of teams, e.g. --tenants 8".into(),
        );
    }
    if o.tenants > MAX_TENANTS {
        return fail(format!(
            "--tenants {} is above the limit of {MAX_TENANTS}; lower --tenants",
            o.tenants
        ));
    }
    if o.tenants > o.jobs {
        return fail(format!(
            "--tenants {} is more than --jobs {}: every tenant gets at least one job; \
             lower --tenants or raise --jobs",
            o.tenants, o.jobs
        ));
    }
    // Written so that NaN fails too.
    if !(o.load > 0.0 && o.load <= MAX_LOAD) {
        return fail(format!(
            "--load must be above 0 and at most {MAX_LOAD} (got {}); it is the offered load \
             as a fraction of --capacity, e.g. --load 0.8 for 80 %",
            o.load
        ));
    }
    if o.capacity_gpus == 0 {
        return fail("--capacity must be at least 1 GPU; give the GPUs the load is relative to, e.g. --capacity 512".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Calibration. Each constant names its source; docs/workload-generator.md has the derivations.
// "Acme" = ../shared/traces/summaries/acme_cluster_summary.csv, row `Philly`.
// "jobs.csv" = ../shared/traces/philly_vc/jobs.csv (82,247 jobs).
// ---------------------------------------------------------------------------------------------

/// GPU counts of jobs.csv, column `gpus`, counted once (`cut -d, -f5 | sort -n | uniq -c`).
/// The 12- and 24-GPU jobs are split between the neighbouring powers of two (mean kept);
/// the shape of the multi-GPU part is kept and the 1-GPU share is set so the mean is
/// [`ACME_AVG_GPUS`] (see [`SizeModel::calibrated`]).
const PHILLY_GPU_COUNTS: [(u32, u32); 10] = [
    (1, 76_627),
    (2, 1_818),
    (4, 1_870),
    (8, 1_643),
    (12, 7),
    (16, 199),
    (24, 7),
    (32, 67),
    (64, 6),
    (128, 3),
];
/// The GPU counts a generated job can have, before the capacity cap.
pub const GPU_CLASSES: [u32; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
/// Acme, column `avg_gpu_num`. jobs.csv has 1.30: its source kept 70 % of Philly's jobs and
/// dropped multi-GPU jobs more often (philly_vc/README.md, Caveats), so only its shape is used.
const ACME_AVG_GPUS: f64 = 1.928;
/// Acme, column `max_run_time_gpu`: durations are truncated here.
const MAX_DURATION_S: f64 = 4_240_676.0;
/// Log-normal location (`ln` seconds) of a 1-GPU job: median 725 s.
const DURATION_MU: f64 = 6.585_914_334_038_678;
/// Log-normal shape, the same for every GPU count.
const DURATION_SIGMA: f64 = 2.516_249_328_006_235;
/// A job on `g` GPUs has median `g^β` times a 1-GPU job's.
const DURATION_GPU_EXPONENT: f64 = 0.638_102_734_315_681_1;
// The three above solve, for the truncated mixture over the GPU mix: median 874 s (Acme
// `med_run_time_gpu`), mean 18,006.055 s (`avg_run_time_gpu`), and GPU-seconds per job
// 61,038.97 = (`complete_gpu_time` + `cancel_gpu_time` + `fail_gpu_time`) / `gpu_job_num`.

/// Zipf exponent of the tenants' job shares: maximum-likelihood fit to the job counts of the
/// 11 major virtual clusters of jobs.csv (column `tenant`), 1.648.
const TENANT_ZIPF_EXPONENT: f64 = 1.648;

/// The arrival rate is constant within each step of this many seconds.
const RATE_STEP_S: f64 = 3_600.0;
/// Share of the mean rate that arrives steadily, outside bursts.
const RATE_BASE_SHARE: f64 = 0.15;
/// Variance of the log burst level (slow + fast chain).
const RATE_LOG_VAR: f64 = 2.5;
/// Share of [`RATE_LOG_VAR`] in the slow chain.
const RATE_SLOW_VAR_SHARE: f64 = 0.4;
/// Hour-to-hour correlation of the slow chain (memory of about 3 days).
const RATE_SLOW_CORR: f64 = 0.985;
/// Hour-to-hour correlation of the fast chain (memory of about 1.5 hours).
const RATE_FAST_CORR: f64 = 0.5;
// The five above were fitted by simulation to jobs.csv's hourly arrival counts over
// 2017-10-03..2017-12-15 (the window of philly_vc/README.md): quantiles p10..p99 of 7, 9, 15,
// 29, 105, 394 jobs an hour (mean 42) and lag 1..48 h autocorrelations of ln(1 + count).

// ---------------------------------------------------------------------------------------------
// 1. Sizes
// ---------------------------------------------------------------------------------------------

/// The joint GPU-count/duration distribution for one capacity.
struct SizeModel {
    /// Cumulative probabilities over [`GPU_CLASSES`].
    cumulative: [f64; 8],
    /// Log-normal location per class.
    mu: [f64; 8],
    /// GPU count per class after the capacity cap.
    gpus: [u32; 8],
}

impl SizeModel {
    fn calibrated(capacity_gpus: u32) -> SizeModel {
        let p = gpu_class_probabilities();
        let mut cumulative = [0.0; 8];
        let mut acc = 0.0;
        for (c, pi) in cumulative.iter_mut().zip(p) {
            acc += pi;
            *c = acc;
        }
        cumulative[7] = 1.0;
        // The largest allowed count within the capacity (a power of two).
        let cap = 1u32 << (31 - capacity_gpus.leading_zeros());
        SizeModel {
            cumulative,
            mu: GPU_CLASSES.map(|g| DURATION_MU + DURATION_GPU_EXPONENT * ln(f64::from(g))),
            gpus: GPU_CLASSES.map(|g| g.min(cap)),
        }
    }

    /// A job's GPU count and duration in whole seconds (at least 1). A job capped by the
    /// capacity keeps the duration of its class.
    fn draw(&self, rng: &mut Rng) -> (u32, u64) {
        let u = rng.uniform();
        let class = self.cumulative.iter().position(|&c| u < c).unwrap_or(7);
        // Truncation by rejection: at most 1.3 % of the 128-GPU draws, 0.03 % of 1-GPU ones.
        let duration = loop {
            let d = exp(self.mu[class] + DURATION_SIGMA * rng.normal());
            if d <= MAX_DURATION_S {
                break d;
            }
        };
        (self.gpus[class], (duration.round() as u64).max(1))
    }
}

/// Probabilities over [`GPU_CLASSES`]: the jobs.csv mix, folded to powers of two, with the
/// 1-GPU share set so the mean is [`ACME_AVG_GPUS`].
fn gpu_class_probabilities() -> [f64; 8] {
    let mut counts = [0.0f64; 8];
    for (g, c) in PHILLY_GPU_COUNTS {
        let c = f64::from(c);
        match GPU_CLASSES.iter().position(|&k| k == g) {
            Some(i) => counts[i] += c,
            None => {
                // Between two powers of two: split so the GPU total is unchanged.
                let hi = GPU_CLASSES.iter().position(|&k| k > g).expect("within 128");
                let (lo_g, hi_g) = (f64::from(GPU_CLASSES[hi - 1]), f64::from(GPU_CLASSES[hi]));
                let up = (f64::from(g) - lo_g) / (hi_g - lo_g);
                counts[hi - 1] += c * (1.0 - up);
                counts[hi] += c * up;
            }
        }
    }
    let multi: f64 = counts[1..].iter().sum();
    let multi_mean = GPU_CLASSES[1..]
        .iter()
        .zip(&counts[1..])
        .map(|(&g, c)| f64::from(g) * c)
        .sum::<f64>()
        / multi;
    // p1 + (1 - p1) multi_mean = ACME_AVG_GPUS
    let p1 = (multi_mean - ACME_AVG_GPUS) / (multi_mean - 1.0);
    let mut p = [0.0; 8];
    p[0] = p1;
    for i in 1..8 {
        p[i] = (1.0 - p1) * counts[i] / multi;
    }
    p
}

// ---------------------------------------------------------------------------------------------
// 3. Arrivals
// ---------------------------------------------------------------------------------------------

/// The hourly rate multiplier (mean 1): a steady base plus a log-normal burst level whose log
/// is the sum of a slow and a fast stationary AR(1) chain.
#[derive(Clone)]
struct RatePath {
    rng: Rng,
    slow: f64,
    fast: f64,
    slow_sd: f64,
    fast_sd: f64,
}

impl RatePath {
    fn new(mut rng: Rng) -> RatePath {
        let slow_sd = (RATE_LOG_VAR * RATE_SLOW_VAR_SHARE).sqrt();
        let fast_sd = (RATE_LOG_VAR * (1.0 - RATE_SLOW_VAR_SHARE)).sqrt();
        // Started in the stationary distribution.
        let slow = slow_sd * rng.normal();
        let fast = fast_sd * rng.normal();
        RatePath {
            rng,
            slow,
            fast,
            slow_sd,
            fast_sd,
        }
    }

    /// This step's multiplier; then moves the chains on one step.
    fn next_step(&mut self) -> f64 {
        let m = RATE_BASE_SHARE
            + (1.0 - RATE_BASE_SHARE) * exp(self.slow + self.fast - RATE_LOG_VAR / 2.0);
        let innovation = |corr: f64, sd: f64, z: f64| sd * (1.0 - corr * corr).sqrt() * z;
        let (zs, zf) = (self.rng.normal(), self.rng.normal());
        self.slow = RATE_SLOW_CORR * self.slow + innovation(RATE_SLOW_CORR, self.slow_sd, zs);
        self.fast = RATE_FAST_CORR * self.fast + innovation(RATE_FAST_CORR, self.fast_sd, zf);
        m
    }
}

/// `n` sorted arrival seconds in `[0, span_s)`: a Poisson process with the rate of a
/// [`RatePath`], conditioned on `n` arrivals in the window. Given the path, those arrivals are
/// `n` sorted uniform draws of the cumulative rate (made from exponential spacings, so already
/// sorted), mapped back to time. The path is generated twice from the same state, once to
/// total it and once to map, so no per-hour table is kept.
fn arrival_times(n: usize, span_s: f64, rng_rate: Rng, mut rng_spacings: Rng) -> Vec<u64> {
    let steps = (span_s / RATE_STEP_S).ceil().max(1.0) as u64;
    let step_len = |h: u64| RATE_STEP_S.min(span_s - h as f64 * RATE_STEP_S);
    let path = RatePath::new(rng_rate);

    // Pass 1: the total of rate × time over the window.
    let mut total_path = path.clone();
    let total: f64 = (0..steps)
        .map(|h| total_path.next_step() * step_len(h))
        .sum();

    // Sorted uniforms on [0, total): cumulative spacings over their (n+1)-th sum.
    let mut targets: Vec<f64> = Vec::with_capacity(n);
    let mut acc = 0.0;
    for _ in 0..n {
        acc += rng_spacings.exponential();
        targets.push(acc);
    }
    let scale = total / (acc + rng_spacings.exponential());

    // Pass 2: walk the same path, mapping each target to its time.
    let mut path = path;
    let mut h = 0u64;
    let mut rate = path.next_step();
    let mut before = 0.0; // cumulative rate × time at the start of step h
    targets
        .into_iter()
        .map(|t| {
            let target = t * scale;
            while h + 1 < steps && before + rate * step_len(h) <= target {
                before += rate * step_len(h);
                h += 1;
                rate = path.next_step();
            }
            let start = h as f64 * RATE_STEP_S;
            let s = (start + (target - before) / rate).clamp(start, start + step_len(h));
            // floor, and never at or past span_s: the window is half open.
            (s as u64).min((span_s.ceil() as u64).saturating_sub(1))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 4. Tenants
// ---------------------------------------------------------------------------------------------

/// Jobs per tenant: one each, then the rest by largest remainder of the Zipf shares.
fn tenant_counts(n: usize, k: usize) -> Vec<usize> {
    let weights: Vec<f64> = (1..=k)
        .map(|r| exp(-TENANT_ZIPF_EXPONENT * ln(r as f64)))
        .collect();
    let sum: f64 = weights.iter().sum();
    let rest = n - k;
    let quotas: Vec<f64> = weights.iter().map(|w| rest as f64 * w / sum).collect();
    let mut counts: Vec<usize> = quotas.iter().map(|q| 1 + *q as usize).collect();
    let mut left = n - counts.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..k).collect();
    // Largest remainder first; ties to the earlier tenant.
    order.sort_by(|&a, &b| {
        let (ra, rb) = (quotas[a] - quotas[a].floor(), quotas[b] - quotas[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        counts[i] += 1;
        left -= 1;
    }
    counts
}

/// Each job's tenant index: the [`tenant_counts`] multiset, shuffled (Fisher–Yates).
fn tenant_labels(n: usize, k: usize, rng: &mut Rng) -> Vec<u32> {
    let mut labels: Vec<u32> = Vec::with_capacity(n);
    for (t, c) in tenant_counts(n, k).into_iter().enumerate() {
        labels.extend(std::iter::repeat_n(t as u32, c));
    }
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        labels.swap(i, j);
    }
    labels
}

// ---------------------------------------------------------------------------------------------
// Randomness and the functions it goes through; all platform-independent.
// ---------------------------------------------------------------------------------------------

/// One independent random stream per generation step.
#[derive(Clone, Copy)]
enum Stream {
    Sizes = 1,
    ArrivalRate = 2,
    ArrivalSpacings = 3,
    Tenants = 4,
}

/// xoshiro256** (Blackman and Vigna), seeded through SplitMix64 as its authors recommend.
#[derive(Clone)]
struct Rng {
    s: [u64; 4],
}

/// SplitMix64's output function: a bijection of u64 with good avalanche.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    fn stream(seed: u64, stream: Stream) -> Rng {
        Rng::from_splitmix(mix64(seed) ^ (stream as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn from_splitmix(mut state: u64) -> Rng {
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            mix64(state)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform on the open interval (0, 1): a multiple of 2^-52 plus 2^-53, exact in f64.
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 12) as f64 + 0.5) * (1.0 / (1u64 << 52) as f64)
    }

    fn normal(&mut self) -> f64 {
        normal_quantile(self.uniform())
    }

    /// Exponential with mean 1.
    fn exponential(&mut self) -> f64 {
        -ln(self.uniform())
    }

    /// Uniform integer in `0..n` (`n > 0`), unbiased (Lemire's multiply-and-reject).
    fn below(&mut self, n: u64) -> u64 {
        let mut m = u128::from(self.next_u64()) * u128::from(n);
        if (m as u64) < n {
            let threshold = n.wrapping_neg() % n;
            while (m as u64) < threshold {
                m = u128::from(self.next_u64()) * u128::from(n);
            }
        }
        (m >> 64) as u64
    }
}

// These coefficients and those of the next two functions keep their published digits (more
// than f64 holds) so they can be checked against the sources.
/// AS 241's coefficients: numerator and denominator of the rational approximation near the
/// median (`A`, `B`), in the tails up to `r = 5` (`C`, `D`), and beyond (`E`, `F`).
#[allow(clippy::excessive_precision)]
mod as241 {
    pub(super) const A: [f64; 8] = [
        3.387_132_872_796_366_608,
        1.331_416_678_917_843_774_5e2,
        1.971_590_950_306_551_442_7e3,
        1.373_169_376_550_946_112_5e4,
        4.592_195_393_154_987_145_7e4,
        6.726_577_092_700_870_085_3e4,
        3.343_057_558_358_812_810_5e4,
        2.509_080_928_730_122_672_7e3,
    ];
    pub(super) const B: [f64; 7] = [
        4.231_333_070_160_091_125_2e1,
        6.871_870_074_920_579_083e2,
        5.394_196_021_424_751_107_7e3,
        2.121_379_430_158_659_586_7e4,
        3.930_789_580_009_271_061e4,
        2.872_908_573_572_194_267_4e4,
        5.226_495_278_852_854_561e3,
    ];
    pub(super) const C: [f64; 8] = [
        1.423_437_110_749_683_577_34,
        4.630_337_846_156_545_295_9,
        5.769_497_221_460_691_405_5,
        3.647_848_324_763_204_605_04,
        1.270_458_252_452_368_382_58,
        2.417_807_251_774_506_117_7e-1,
        2.272_384_498_926_918_458_33e-2,
        7.745_450_142_783_414_076_4e-4,
    ];
    pub(super) const D: [f64; 7] = [
        2.053_191_626_637_758_821_87,
        1.676_384_830_183_803_849_4,
        6.897_673_349_851_000_045_5e-1,
        1.481_039_764_274_800_745_9e-1,
        1.519_866_656_361_645_719_66e-2,
        5.475_938_084_995_344_946e-4,
        1.050_750_071_644_416_843_24e-9,
    ];
    pub(super) const E: [f64; 8] = [
        6.657_904_643_501_103_777_2,
        5.463_784_911_164_114_369_9,
        1.784_826_539_917_291_335_8,
        2.965_605_718_285_048_912_3e-1,
        2.653_218_952_657_612_309_3e-2,
        1.242_660_947_388_078_438_6e-3,
        2.711_555_568_743_487_578_15e-5,
        2.010_334_399_292_288_132_65e-7,
    ];
    pub(super) const F: [f64; 7] = [
        5.998_322_065_558_879_376_9e-1,
        1.369_298_809_227_358_053_1e-1,
        1.487_536_129_085_061_485_25e-2,
        7.868_691_311_456_132_591e-4,
        1.846_318_317_510_054_681_8e-5,
        1.421_511_758_316_445_888_7e-7,
        2.044_263_103_389_939_785_64e-15,
    ];
}

/// The standard normal quantile, Wichura's algorithm AS 241 (PPND16, Applied Statistics 37(3),
/// 1988): rational approximations accurate to about 1e-16, for `p` in (0, 1).
fn normal_quantile(p: f64) -> f64 {
    fn rational(x: f64, num: &[f64; 8], den: &[f64; 7]) -> f64 {
        let n = num.iter().rev().fold(0.0, |acc, &c| acc * x + c);
        let d = den.iter().rev().fold(0.0, |acc, &c| acc * x + c) * x + 1.0;
        n / d
    }
    debug_assert!(p > 0.0 && p < 1.0, "normal_quantile({p})");
    let q = p - 0.5;
    if q.abs() <= 0.425 {
        return q * rational(0.180_625 - q * q, &as241::A, &as241::B);
    }
    let r = (-ln(if q < 0.0 { p } else { 1.0 - p })).sqrt();
    let z = if r <= 5.0 {
        rational(r - 1.6, &as241::C, &as241::D)
    } else {
        rational(r - 5.0, &as241::E, &as241::F)
    };
    if q < 0.0 {
        -z
    } else {
        z
    }
}

// The next two functions follow fdlibm's e_log.c and e_exp.c (the algorithms and constants;
// the code is written anew for the ranges used here). Their notice:
//   Copyright (C) 1993, 2004 by Sun Microsystems, Inc. All rights reserved.
//   Developed at SunSoft, a Sun Microsystems, Inc. business.
//   Permission to use, copy, modify, and distribute this software is freely granted,
//   provided that this notice is preserved.
// Both are within 1 ulp of the exact result (fdlibm's error analysis).

#[allow(clippy::excessive_precision)]
const LN2_HI: f64 = 6.931_471_803_691_238_164_90e-1; // 0x3fe62e42_fee00000
#[allow(clippy::excessive_precision)]
const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10; // 0x3dea39ef_35793c76

/// Natural logarithm of a positive, normal, finite `x`.
#[allow(clippy::excessive_precision)]
fn ln(x: f64) -> f64 {
    const LG: [f64; 7] = [
        6.666_666_666_666_735_130e-1,
        3.999_999_999_940_941_908e-1,
        2.857_142_874_366_239_149e-1,
        2.222_219_843_214_978_396e-1,
        1.818_357_216_161_805_012e-1,
        1.531_383_769_920_937_332e-1,
        1.479_819_860_511_658_591e-1,
    ];
    debug_assert!(x.is_finite() && x >= f64::MIN_POSITIVE, "ln({x})");
    // x = 2^k * m with m in [sqrt(2)/2, sqrt(2)).
    let bits = x.to_bits();
    let mut k = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m_bits = (bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000; // m in [1, 2)
    if m_bits >= 0x3ff6_a09e_0000_0000 {
        m_bits -= 1 << 52; // halve m (it stays normal)
        k += 1;
    }
    let f = f64::from_bits(m_bits) - 1.0;
    let hfsq = 0.5 * f * f;
    let s = f / (2.0 + f);
    let z = s * s;
    let w = z * z;
    let t1 = w * (LG[1] + w * (LG[3] + w * LG[5]));
    let t2 = z * (LG[0] + w * (LG[2] + w * (LG[4] + w * LG[6])));
    let dk = k as f64;
    s * (hfsq + t1 + t2) + dk * LN2_LO - hfsq + f + dk * LN2_HI
}

/// `e^x` for `x` in [-700, 700] (clamped there: far beyond any value used here).
#[allow(clippy::excessive_precision)]
fn exp(x: f64) -> f64 {
    const P: [f64; 5] = [
        1.666_666_666_666_660_190_37e-1,
        -2.777_777_777_701_559_338_42e-3,
        6.613_756_321_437_934_361_17e-5,
        -1.653_390_220_546_525_153_90e-6,
        4.138_136_797_057_238_460_39e-8,
    ];
    debug_assert!(!x.is_nan(), "exp(NaN)");
    let x = x.clamp(-700.0, 700.0);
    // x = k ln2 + r, |r| <= ln2 / 2, with r = hi - lo carried in two parts.
    let (k, hi, lo) = if x.abs() > 0.5 * std::f64::consts::LN_2 {
        let k = (std::f64::consts::LOG2_E * x + 0.5f64.copysign(x)) as i64; // round to nearest
        let kf = k as f64;
        (k, x - kf * LN2_HI, kf * LN2_LO)
    } else {
        (0, x, 0.0)
    };
    let r = hi - lo;
    let rr = r * r;
    let c = r - rr * (P[0] + rr * (P[1] + rr * (P[2] + rr * (P[3] + rr * P[4]))));
    let y = 1.0 + (r * c / (2.0 - c) - lo + hi);
    // |k| <= 1010 here, so 2^k is a normal f64.
    y * f64::from_bits(((1023 + k) as u64) << 52)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_and_exp_agree_with_the_platform_to_the_last_bits() {
        let mut x = 1e-300;
        while x < 1e300 {
            let (ours, std) = (ln(x), x.ln());
            assert!(
                (ours - std).abs() <= 2.0 * f64::EPSILON * std.abs().max(1e-300),
                "ln({x}): {ours} vs {std}"
            );
            x *= 1.618_033_988_7;
        }
        for i in -69_999..=69_999 {
            let x = f64::from(i) * 0.01 + 0.003;
            let (ours, std) = (exp(x), x.exp());
            assert!(
                (ours - std).abs() <= 2.0 * f64::EPSILON * std,
                "exp({x}): {ours} vs {std}"
            );
        }
        assert_eq!((ln(1.0), exp(0.0)), (0.0, 1.0));
    }

    #[test]
    fn the_normal_quantile_matches_known_values() {
        for (p, z) in [
            (0.5, 0.0),
            (0.975, 1.959_963_984_540_054),
            (0.841_344_746_068_542_9, 1.0),
            (1e-10, -6.361_340_902_404_056),
            (1.0 - 1e-6, 4.753_424_308_822_899),
        ] {
            assert!(
                (normal_quantile(p) - z).abs() < 1e-9,
                "p={p}: {} vs {z}",
                normal_quantile(p)
            );
        }
        assert_eq!(normal_quantile(0.3), -normal_quantile(0.7));
    }

    #[test]
    fn the_gpu_mix_keeps_the_philly_shape_with_acmes_mean() {
        let p = gpu_class_probabilities();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        let mean: f64 = GPU_CLASSES
            .iter()
            .zip(p)
            .map(|(&g, p)| f64::from(g) * p)
            .sum();
        assert!((mean - ACME_AVG_GPUS).abs() < 1e-12, "{mean}");
        assert!(
            p[0] > 0.5,
            "the median job has one GPU, as in Acme's med_gpu_num"
        );
        // 4-GPU and 2-GPU jobs keep jobs.csv's ratio, 1870 / 1818.
        assert!((p[2] / p[1] - 1870.0 / 1818.0).abs() < 1e-12);
    }

    /// The duration model, integrated on a fine quantile grid (no sampling noise), reproduces
    /// Acme's Philly median, mean and GPU-seconds per job.
    #[test]
    fn the_calibrated_durations_reproduce_acmes_philly_statistics() {
        let model = SizeModel::calibrated(512);
        let p = gpu_class_probabilities();
        let grid = 200_000;
        let (mut mean, mut gpu_s, mut below_median) = (0.0, 0.0, 0.0);
        for class in 0..8 {
            let kept: Vec<f64> = (0..grid)
                .map(|i| (i as f64 + 0.5) / grid as f64)
                .map(|u| exp(model.mu[class] + DURATION_SIGMA * normal_quantile(u)))
                .filter(|&d| d <= MAX_DURATION_S)
                .collect();
            let m = kept.iter().sum::<f64>() / kept.len() as f64;
            mean += p[class] * m;
            gpu_s += p[class] * f64::from(GPU_CLASSES[class]) * m;
            below_median +=
                p[class] * kept.iter().filter(|&&d| d <= 874.0).count() as f64 / kept.len() as f64;
        }
        assert!((below_median - 0.5).abs() < 1e-3, "{below_median}");
        assert!((mean / 18_006.055 - 1.0).abs() < 5e-3, "{mean}");
        assert!((gpu_s / 61_038.97 - 1.0).abs() < 5e-3, "{gpu_s}");
    }

    #[test]
    fn tenant_counts_are_zipf_shares_with_at_least_one_job_each() {
        let c = tenant_counts(1_000, 8);
        assert_eq!(c.iter().sum::<usize>(), 1_000);
        assert!(c.windows(2).all(|w| w[0] >= w[1]), "{c:?}");
        assert_eq!(tenant_counts(3, 3), vec![1, 1, 1]);
        // One job, then 1 / H(8, 1.648) of the other 992, go to the first tenant.
        let h: f64 = (1..=8)
            .map(|r| (r as f64).powf(-TENANT_ZIPF_EXPONENT))
            .sum();
        assert!((c[0] as f64 - (1.0 + 992.0 / h)).abs() < 1.0, "{c:?}");
    }

    #[test]
    fn below_is_uniform_enough_and_in_range() {
        let mut rng = Rng::stream(7, Stream::Tenants);
        let mut seen = [0u32; 3];
        for _ in 0..30_000 {
            seen[rng.below(3) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&s| (9_500..10_500).contains(&s)),
            "{seen:?}"
        );
    }
}
