//! The recent past the dashboard draws and `/metrics` exports: per queue, each share's own and
//! borrowed instances, the queue's depth and its preemptions, sampled every
//! `[scheduler] history_sample_seconds` (10 s) into a ring held in memory for 24 hours.
//!
//! Why a ring and not the usage accounting (`usage.rs`): the accounting is durable and exact
//! but rebuilt from job records and the archive for every report (seconds of work for a week
//! of jobs) and knows nothing of queue depth; the dashboard's day and week charts keep reading
//! it. The ring answers "what happened in the last hour" cheaply and is lost at a restart.
//!
//! Sampling stays off the scheduling hot path: a task of its own asks the driver for one
//! [`Sample`] per interval (one read among the requests, the cost of `GET /qm/v1/usage`), and
//! the ring lives behind its own lock outside the driver. The task holds only a weak handle on
//! the driver's inbox, so that it never keeps a stopping server alive.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use qm_api::qm::{History, HistoryWindow, ShareHistory};

use crate::driver::Envelope;
use crate::facts::{QueueSample, Sample};
use crate::request::{Answer, Query, Request};

/// How long the ring remembers.
pub const KEEP_MS: i64 = 24 * 3_600_000;
/// Most samples kept: a day at the default 10 s (a shorter interval keeps less than a day).
pub const MAX_SAMPLES: usize = 8640;
/// Most points one answer has; samples are averaged into points of equal length.
pub const MAX_POINTS: i64 = 360;

/// The samples of the last day, oldest first, bounded in time and in count.
#[derive(Debug)]
pub struct Ring {
    samples: VecDeque<Sample>,
    max: usize,
    interval_ms: u64,
}

impl Ring {
    /// An empty ring for samples taken every `interval`.
    pub fn new(interval: Duration) -> Self {
        Self::with_capacity(interval, MAX_SAMPLES)
    }

    /// An empty ring keeping at most `max` samples.
    pub fn with_capacity(interval: Duration, max: usize) -> Self {
        Ring {
            samples: VecDeque::new(),
            max: max.max(1),
            interval_ms: interval.as_millis().max(1) as u64,
        }
    }

    /// Adds a sample, dropping those older than a day before it or beyond the count. A
    /// sample not newer than the last (a clock stepped back) replaces nothing and is dropped:
    /// the series stay in time order.
    pub fn push(&mut self, mut sample: Sample) {
        if self.samples.back().is_some_and(|last| last.at >= sample.at) {
            return;
        }
        self.share_names(&mut sample);
        while self.samples.len() >= self.max
            || self
                .samples
                .front()
                .is_some_and(|s| s.at <= sample.at - KEEP_MS)
        {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }

    /// Points the sample's names at the previous sample's equal ones, so that a name is kept
    /// once however many samples carry it.
    fn share_names(&self, sample: &mut Sample) {
        let Some(last) = self.samples.back() else {
            return;
        };
        for q in &mut sample.queues {
            let Some(lq) = last.queues.iter().find(|l| l.queue == q.queue) else {
                continue;
            };
            q.queue = lq.queue.clone();
            for s in &mut q.shares {
                if let Some(ls) = lq.shares.iter().find(|l| l.share == s.share) {
                    s.share = ls.share.clone();
                }
            }
        }
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The newest sample.
    pub fn latest(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// A queue's series over `window` ending at `now`, averaged into at most [`MAX_POINTS`]
    /// points; points without samples are left out.
    pub fn history(&self, queue: &str, window: HistoryWindow, now: i64) -> History {
        let since = now - window.ms();
        let step = (window.ms() / MAX_POINTS).max(self.interval_ms as i64);
        let mut points: BTreeMap<i64, Point> = BTreeMap::new();
        let mut shares = BTreeSet::new();
        let mut before: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &self.samples {
            let Some(q) = s.queues.iter().find(|q| &*q.queue == queue) else {
                continue;
            };
            let in_window = s.at >= since && s.at <= now;
            let point = in_window.then(|| {
                points
                    .entry(since + (s.at - since) / step * step)
                    .or_default()
            });
            if let Some(p) = point {
                p.add(q, &before);
            }
            for sh in &q.shares {
                if in_window {
                    shares.insert(sh.share.clone());
                }
                before.insert(&*sh.share, sh.preemptions);
            }
        }
        assemble(
            queue,
            since,
            now,
            self.interval_ms,
            step as u64,
            points,
            shares,
        )
    }
}

/// The samples that fall in one point, summed.
#[derive(Default)]
struct Point {
    samples: u32,
    runnable: u64,
    preemptions: u64,
    /// Per share: own, borrowed (summed over the samples) and preemptions.
    shares: BTreeMap<Arc<str>, (u64, u64, u64)>,
}

impl Point {
    /// Adds a queue's sample; `before` holds each share's counter at the sample before.
    fn add(&mut self, q: &QueueSample, before: &BTreeMap<&str, u64>) {
        self.samples += 1;
        self.runnable += u64::from(q.runnable);
        for sh in &q.shares {
            // A share first seen here preempted nothing yet as far as the ring knows.
            let new = before
                .get(&*sh.share)
                .map_or(0, |b| sh.preemptions.saturating_sub(*b));
            let e = self.shares.entry(sh.share.clone()).or_default();
            e.0 += u64::from(sh.own);
            e.1 += u64::from(sh.borrowed);
            e.2 += new;
            self.preemptions += new;
        }
    }
}

fn assemble(
    queue: &str,
    since: i64,
    until: i64,
    interval_ms: u64,
    step_ms: u64,
    points: BTreeMap<i64, Point>,
    shares: BTreeSet<Arc<str>>,
) -> History {
    let avg = |sum: u64, n: u32| (sum as f64 / f64::from(n.max(1)) * 100.0).round() / 100.0;
    let mut out = History {
        job_queue: queue.to_string(),
        since,
        until,
        sample_interval_ms: interval_ms,
        step_ms,
        at: Vec::with_capacity(points.len()),
        queue_depth: Vec::with_capacity(points.len()),
        preemptions: Vec::with_capacity(points.len()),
        shares: shares
            .iter()
            .map(|name| ShareHistory {
                quota_share_name: name.to_string(),
                own_use: Vec::with_capacity(points.len()),
                borrowed: Vec::with_capacity(points.len()),
                preemptions: Vec::with_capacity(points.len()),
            })
            .collect(),
    };
    for (at, p) in points {
        out.at.push(at);
        out.queue_depth.push(avg(p.runnable, p.samples));
        out.preemptions.push(p.preemptions);
        for series in &mut out.shares {
            let (own, borrowed, pre) = p
                .shares
                .get(series.quota_share_name.as_str())
                .copied()
                .unwrap_or_default();
            series.own_use.push(avg(own, p.samples));
            series.borrowed.push(avg(borrowed, p.samples));
            series.preemptions.push(pre);
        }
    }
    out
}

/// Samples the state every `every` into `ring` until the driver's inbox is gone.
pub async fn sample_every(
    requests: tokio::sync::mpsc::WeakSender<Envelope>,
    ring: Arc<Mutex<Ring>>,
    every: Duration,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inbox) = requests.upgrade() else {
            return;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let envelope = Envelope {
            request: Request::Query(Query::Sample),
            reply: tx,
        };
        if inbox.send(envelope).await.is_err() {
            return;
        }
        // Not held while waiting: the server may stop meanwhile.
        drop(inbox);
        match rx.await {
            Ok(Ok(Answer::Sample(s))) => {
                if let Ok(mut r) = ring.lock() {
                    r.push(*s);
                }
            }
            Ok(_) => tracing::warn!("the history sample was not answered with a sample"),
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::ShareSample;

    fn sample(at: i64, own: u32, borrowed: u32, runnable: u32, preemptions: u64) -> Sample {
        Sample {
            at,
            queues: vec![QueueSample {
                queue: "q".into(),
                runnable,
                shares: vec![ShareSample {
                    share: "A".into(),
                    own,
                    borrowed,
                    preemptions,
                }],
            }],
        }
    }

    #[test]
    fn the_ring_keeps_at_most_its_capacity_newest_last() {
        let mut r = Ring::with_capacity(Duration::from_secs(10), 3);
        for i in 0..5 {
            r.push(sample(i * 10_000, i as u32, 0, 0, 0));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.latest().unwrap().at, 40_000);
        let ats: Vec<i64> = r.samples.iter().map(|s| s.at).collect();
        assert_eq!(ats, vec![20_000, 30_000, 40_000]);
        let name = |i: usize| r.samples[i].queues[0].shares[0].share.clone();
        assert!(Arc::ptr_eq(&name(0), &name(2)), "a name is kept once");
    }

    #[test]
    fn the_ring_forgets_what_is_older_than_a_day_and_refuses_samples_out_of_order() {
        let mut r = Ring::new(Duration::from_secs(10));
        r.push(sample(0, 1, 0, 0, 0));
        r.push(sample(1000, 1, 0, 0, 0));
        r.push(sample(500, 9, 0, 0, 0));
        assert_eq!(r.len(), 2, "a sample from the past is dropped");
        r.push(sample(KEEP_MS + 500, 1, 0, 0, 0));
        let ats: Vec<i64> = r.samples.iter().map(|s| s.at).collect();
        assert_eq!(ats, vec![1000, KEEP_MS + 500]);
    }

    #[test]
    fn history_averages_samples_into_points_and_counts_new_preemptions() {
        let mut r = Ring::new(Duration::from_secs(10));
        let now = 10 * 3_600_000;
        let since = now - 3_600_000;
        // Before the window: the counter is at 2 already.
        r.push(sample(since - 10_000, 0, 0, 0, 2));
        r.push(sample(since, 1, 1, 4, 2));
        r.push(sample(since + 3_000, 1, 3, 2, 3));
        r.push(sample(since + 10_000, 2, 0, 0, 5));
        let h = r.history("q", HistoryWindow::Hour, now);
        assert_eq!(h.step_ms, 10_000);
        assert_eq!(h.at, vec![since, since + 10_000]);
        assert_eq!(h.queue_depth, vec![3.0, 0.0]);
        assert_eq!(h.preemptions, vec![1, 2]);
        assert_eq!(h.shares.len(), 1);
        assert_eq!(h.shares[0].own_use, vec![1.0, 2.0]);
        assert_eq!(h.shares[0].borrowed, vec![2.0, 0.0]);
        assert!(r.history("other", HistoryWindow::Day, now).at.is_empty());
    }

    #[test]
    fn a_day_is_cut_into_at_most_max_points() {
        let mut r = Ring::new(Duration::from_secs(10));
        let now = 2 * KEEP_MS;
        for i in 0..MAX_SAMPLES as i64 {
            r.push(sample(now - KEEP_MS + 1 + i * 10_000, 1, 0, 0, 0));
        }
        let h = r.history("q", HistoryWindow::Day, now);
        assert!(h.at.len() as i64 <= MAX_POINTS + 1, "{}", h.at.len());
        assert!(h.at.windows(2).all(|w| w[0] < w[1]), "points in time order");
        assert_eq!(h.step_ms, 240_000);
    }
}
