//! The facts the state hands to the modules that compute from it: usage accounting
//! (`usage.rs`), the workload export (`workload.rs`), the policy review (`review.rs`) and the
//! dashboard's history (`history.rs`). They are plain data, answered by the driver
//! (`request::Answer`) and computed from afterwards, so this module imports nothing above the
//! archive's records: the state names them without depending on the computations.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::archive::ArchivedJob;
use crate::command::AuditEntry;

/// A share's entitlement from `from` (epoch ms) until its next epoch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareEpoch {
    /// When this configuration took effect.
    pub from: i64,
    /// Entitled instances per instance type (empty once the share is deleted).
    pub limits: BTreeMap<String, u32>,
    /// Whether its idle entitlement is lent (LEND, LEND_AND_BORROW).
    pub lends: bool,
}

/// Entitlement history: per (queue, share), epochs in time order.
pub type ShareHistory = BTreeMap<(String, String), Vec<ShareEpoch>>;

/// One job, as accounting sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageJob {
    /// Job id.
    pub id: String,
    /// Queue.
    pub queue: String,
    /// Share.
    pub share: String,
    /// Who submitted it (`None` for jobs from before principals were recorded).
    pub principal: Option<String>,
    /// Submitted (epoch ms).
    pub created_at: i64,
    /// Every attempt that got capacity, in start order.
    pub attempts: Vec<UsageAttempt>,
}

/// One attempt's capacity interval and how it ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageAttempt {
    /// Instance type.
    pub instance_type: String,
    /// Instances held.
    pub count: u32,
    /// Capacity granted (epoch ms).
    pub started_at: i64,
    /// Processes started.
    pub running_at: Option<i64>,
    /// Processes gone, capacity released; `None` while it holds capacity.
    pub stopped_at: Option<i64>,
    /// When the core decided to stop it.
    pub stop_at: Option<i64>,
    /// Last checkpoint reported during it.
    pub checkpoint_at: Option<i64>,
    /// Ended by a preemption.
    pub preempted: bool,
    /// The (share, job id) it was preempted for, when known.
    pub preempted_for: Option<(String, String)>,
    /// What it used, once it ended, where the executor counted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<qm_executor::Usage>,
}

/// The state's part of a usage report.
#[derive(Clone, Debug)]
pub struct UsageFacts {
    /// Jobs still in the state.
    pub jobs: Vec<UsageJob>,
    /// Entitlements over time.
    pub history: ShareHistory,
    /// The state's time.
    pub now: i64,
}

/// One share at one instant (all instance types together): 32 bytes, its name shared with the
/// samples before it ([`Ring::push`](crate::history::Ring::push)), so that a day of 20
/// shares stays near 6 MB.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShareSample {
    /// The share.
    pub share: Arc<str>,
    /// Instances held within its entitlement.
    pub own: u32,
    /// Instances held above it.
    pub borrowed: u32,
    /// Its attempts preempted since the server started (a counter).
    pub preemptions: u64,
}

/// One queue at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueSample {
    /// The queue.
    pub queue: Arc<str>,
    /// Its RUNNABLE jobs.
    pub runnable: u32,
    /// Its shares, in name order.
    pub shares: Vec<ShareSample>,
}

/// Every queue at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When (epoch ms).
    pub at: i64,
    /// Queues in name order.
    pub queues: Vec<QueueSample>,
}

/// What each queue's classes are, to give a job the contract of the class it ran in: its
/// `qm:class` tag, else its share's default class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassBook {
    /// Queue -> class name -> interruptible.
    pub defined: BTreeMap<String, BTreeMap<String, bool>>,
    /// (queue, share) -> the share's default class.
    pub defaults: BTreeMap<(String, String), String>,
}

/// The state's part of an export.
#[derive(Clone, Debug, Default)]
pub struct WorkloadFacts {
    /// Finished jobs still in the state, submitted in the window.
    pub jobs: Vec<ArchivedJob>,
    /// Jobs in the state submitted in the window that have not finished.
    pub unfinished: u64,
    /// The classes as the queues define them now.
    pub classes: ClassBook,
}

impl ClassBook {
    /// The contract of the class of a job of `queue` and `share` tagged `class`: `None`
    /// without a class (or one its queue no longer defines), which is interruptible.
    pub fn interruptible(&self, queue: &str, share: &str, class: Option<&str>) -> Option<bool> {
        let defined = self.defined.get(queue)?;
        let name = match class {
            Some(c) => c,
            None => self.defaults.get(&(queue.to_string(), share.to_string()))?,
        };
        defined.get(name).copied()
    }
}

/// One job as the review sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ReviewJob {
    /// Its record, with the attempt that holds capacity now, if any.
    pub record: ArchivedJob,
    /// Its instance type (the payload's), for a job that has not started yet.
    pub unit: Option<String>,
}

/// What the review needs of a share's configuration now (classes and priority ceilings are
/// not kept over time: the review reads them as they are).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShareRules {
    /// `qm:default-class`.
    pub default_class: Option<String>,
    /// `qm:max-priority`: the highest priority submitters may give.
    pub max_priority: Option<i32>,
    /// The queue's classes' `max-priority`, by class name.
    pub class_max_priority: BTreeMap<String, i32>,
}

/// Everything the review is computed from.
#[derive(Clone, Debug, Default)]
pub struct ReviewFacts {
    /// Jobs, unique by id.
    pub jobs: Vec<ReviewJob>,
    /// Entitlements over time.
    pub history: ShareHistory,
    /// Audit entries (any order; those outside the window are ignored).
    pub audit: Vec<AuditEntry>,
    /// Per (queue, share).
    pub shares: BTreeMap<(String, String), ShareRules>,
    /// The time of the data.
    pub now: i64,
}
