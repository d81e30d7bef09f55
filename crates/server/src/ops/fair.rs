//! Fair sharing of idle capacity and groups of shares (issue 21), as the AWS API carries them:
//! the scheduling policy's tags `qm:idle-assignment` and `qm:fair-reclaim` hold for every job
//! queue using the policy, a share's tags `qm:weight` and `qm:group` give its weight and its
//! group, and `PUT /qm/v1/queues/{queue}/groups` defines the groups' limits and weights.
//!
//! The core's queue spec is derived from those records whenever one of them changes
//! ([`State::sync_fair_rules`]), never stored on its own: the records are what the log and
//! the snapshots keep, so a replay derives the same spec again.

use qm_api::qm::{GroupDef, GroupFairness, QueueFairness, QueueGroups, ShareFairness};
use qm_api::*;
use qm_core::{GroupSpec, Input, QueueSpec, MAX_SHARES_PER_QUEUE};

use crate::reply::{reply, Reply};
use crate::state::{QueueRec, State};

impl State {
    /// [`State::policy_tags_of`] for a queue by name.
    pub(crate) fn policy_tags_of_queue(
        &self,
        queue: &str,
    ) -> std::collections::BTreeMap<String, String> {
        self.queues
            .get(queue)
            .map(|q| self.policy_tags_of(q))
            .unwrap_or_default()
    }

    /// The tags of the scheduling policy a queue uses (empty when it has none).
    fn policy_tags_of(&self, q: &QueueRec) -> std::collections::BTreeMap<String, String> {
        self.arns
            .scheduling_policy_arn("schedulingPolicyArn", &q.policy_arn)
            .ok()
            .and_then(|name| self.policies.get(&name))
            .map(|p| p.tags.clone())
            .unwrap_or_default()
    }

    /// The groups of a queue as the core takes them: the defined ones in the order defined,
    /// then those only the shares' `qm:group` tags name (weight 1, no limits) in name order;
    /// members are the shares tagged with the group, in name order. A group without members
    /// changes nothing the core decides and is left out, so that the core's bound on groups
    /// (then one per share at most) can never refuse what the records hold.
    fn group_specs(q: &QueueRec) -> Vec<GroupSpec> {
        let shares: Vec<(&str, &std::collections::BTreeMap<String, String>)> = q
            .shares
            .values()
            .map(|s| (s.name.as_str(), &s.tags))
            .collect();
        Self::group_specs_from(&q.groups, &shares)
    }

    /// [`State::group_specs`] from group definitions and the shares' names and tags (in name
    /// order): what a what-if builds from the configuration it is asked about.
    pub(crate) fn group_specs_from(
        defs: &[GroupDef],
        shares: &[(&str, &std::collections::BTreeMap<String, String>)],
    ) -> Vec<GroupSpec> {
        let members = |group: &str| -> Vec<String> {
            shares
                .iter()
                .filter(|(_, tags)| validate::group(tags) == Some(group))
                .map(|(name, _)| name.to_string())
                .collect()
        };
        let mut out: Vec<GroupSpec> = defs
            .iter()
            .map(|g| GroupSpec {
                name: g.name.clone(),
                shares: members(&g.name),
                limits: g
                    .limits
                    .iter()
                    .map(|(u, n)| (u.clone(), u32::try_from(*n).unwrap_or(u32::MAX)))
                    .collect(),
                weight: g
                    .weight
                    .and_then(|w| u32::try_from(w).ok())
                    .unwrap_or(1)
                    .max(1),
            })
            .collect();
        let tagged: std::collections::BTreeSet<&str> = shares
            .iter()
            .filter_map(|(_, tags)| validate::group(tags))
            .collect();
        for name in tagged {
            if !out.iter().any(|g| g.name == name) {
                out.push(GroupSpec {
                    name: name.to_string(),
                    shares: members(name),
                    limits: Default::default(),
                    weight: 1,
                });
            }
        }
        out.retain(|g| !g.shares.is_empty());
        out
    }

    /// The defined groups that no share's `qm:group` names.
    fn defined_but_empty(q: &QueueRec) -> Vec<GroupDef> {
        q.groups
            .iter()
            .filter(|g| {
                !q.shares
                    .values()
                    .any(|s| validate::group(&s.tags) == Some(g.name.as_str()))
            })
            .cloned()
            .collect()
    }

    /// The spec the core's queue should have: its environment as the core has it, and the
    /// rules for idle capacity that the records say.
    fn fair_spec(&self, queue: &str) -> Option<QueueSpec> {
        let q = self.queues.get(queue)?;
        let mut spec = self
            .core
            .queue_spec(queue)
            .unwrap_or_else(|| QueueSpec::new(queue, Default::default()));
        let (mode, reclaim) = validate::idle_rules(&self.policy_tags_of(q));
        spec.idle_assignment = mode;
        spec.fair_reclaim = reclaim;
        spec.groups = Self::group_specs(q);
        Some(spec)
    }

    /// Gives the core's queue the rules its records say, when they differ: after a change to
    /// its policy's tags, its shares' tags or its group definitions.
    pub(crate) fn sync_fair_rules(&mut self, queue: &str) -> Result<(), ApiError> {
        let Some(want) = self.fair_spec(queue) else {
            return Ok(());
        };
        if self.core.queue_spec(queue).as_ref() == Some(&want) {
            return Ok(());
        }
        self.core_apply(Input::PutQueue(want))
    }

    /// [`State::sync_fair_rules`] for every queue that uses scheduling policy `policy`.
    pub(crate) fn sync_policy_queues(&mut self, policy: &str) -> Result<(), ApiError> {
        let arn = self.arns.scheduling_policy(policy);
        let queues: Vec<String> = self
            .queues
            .values()
            .filter(|q| q.policy_arn == arn)
            .map(|q| q.name.clone())
            .collect();
        for q in queues {
            self.sync_fair_rules(&q)?;
        }
        Ok(())
    }

    /// `PUT /qm/v1/queues/{queue}/groups`: replaces the queue's group definitions (checked by
    /// the HTTP layer, and again here, since a replayed log must not trust its past).
    pub(crate) fn put_queue_groups(
        &mut self,
        queue: &str,
        groups: &QueueGroups,
    ) -> Result<Reply, ApiError> {
        let name = self.queue_name("jobQueue", queue)?;
        let groups = groups.checked(MAX_SHARES_PER_QUEUE)?;
        self.groups_fit_queue(&name, &groups.groups)?;
        let q = self.queues.get_mut(&name).expect("checked");
        let old = std::mem::replace(&mut q.groups, groups.groups);
        if let Err(e) = self.sync_fair_rules(&name) {
            self.queues.get_mut(&name).expect("checked").groups = old;
            return Err(e);
        }
        self.queue_groups(&name)
    }

    /// Group definitions must name instance types of the queue's environment (a limit on any
    /// other caps nothing, and would look real in `qm shares`), and no group may be named
    /// like one of the queue's shares (`explain` names either).
    pub(crate) fn groups_fit_queue(
        &self,
        queue: &str,
        groups: &[GroupDef],
    ) -> Result<(), ApiError> {
        let env = self
            .core
            .queue_spec(queue)
            .map(|q| q.environment)
            .unwrap_or_default();
        let shares = &self.queues[queue].shares;
        for (i, g) in groups.iter().enumerate() {
            if shares.contains_key(&g.name) {
                return Err(ApiError::client(format!(
                    "groups[{i}].name '{}' is also a quota share of job queue '{queue}': give the group another name",
                    g.name
                )));
            }
            if let Some(unit) = g.limits.keys().find(|u| !env.contains_key(*u)) {
                let shown: String = unit.chars().filter(|c| !c.is_control()).take(64).collect();
                let known: Vec<&str> = env.keys().map(String::as_str).collect();
                return Err(ApiError::client(format!(
                    "groups[{i}].limits: '{shown}' is not an instance type of job queue '{queue}''s service environment ({}): limit one of those",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Every queue's core spec from its records again, once recovery has rebuilt them: a data
    /// dir written before a tag meant something (a policy's `qm:idle-assignment` kept as a
    /// plain tag) gets the rules its records say now, not at the next unrelated change.
    pub(crate) fn sync_all_fair_rules(&mut self) -> Result<(), ApiError> {
        let queues: Vec<String> = self.queues.keys().cloned().collect();
        for q in queues {
            self.sync_fair_rules(&q)?;
        }
        Ok(())
    }

    /// `GET /qm/v1/queues/{queue}/groups`: the definitions, weights filled in.
    pub(crate) fn queue_groups(&self, queue: &str) -> Result<Reply, ApiError> {
        let name = self.queue_name("jobQueue", queue)?;
        let groups = self.queues[&name]
            .groups
            .iter()
            .map(|g| GroupDef {
                weight: Some(g.weight.unwrap_or(1)),
                ..g.clone()
            })
            .collect();
        reply(QueueGroups { groups })
    }

    /// A queue's part of `GET /qm/v1/usage` about fair sharing, from the core's standing.
    pub(crate) fn queue_fairness(&self, q: &QueueRec) -> Option<QueueFairness> {
        let f = self.core.fairness(&q.name)?;
        Some(QueueFairness {
            idle_assignment: f.idle_assignment.as_str().to_string(),
            fair_reclaim: f.fair_reclaim,
            shares: f
                .shares
                .into_iter()
                .filter(|s| q.shares.contains_key(&s.share))
                .map(|s| ShareFairness {
                    quota_share_name: s.share,
                    weight: s.weight,
                    group: s.group,
                    weighted_share: finite(s.weighted_share),
                    dominant: s.dominant,
                    fair_share: s
                        .fair_share
                        .into_iter()
                        .map(|(u, x)| (u, finite(x)))
                        .collect(),
                })
                .collect(),
            groups: f
                .groups
                .into_iter()
                .map(|g| GroupFairness {
                    name: g.spec.name,
                    shares: g.spec.shares,
                    limits: g.spec.limits,
                    weight: g.spec.weight,
                    usage: g.usage,
                    weighted_share: finite(g.weighted_share),
                })
                // Defined groups no share names yet: shown, though the core has no use for them.
                .chain(Self::defined_but_empty(q).into_iter().map(|g| {
                    GroupFairness {
                        name: g.name,
                        shares: Vec::new(),
                        limits: g
                            .limits
                            .iter()
                            .map(|(u, n)| (u.clone(), u32::try_from(*n).unwrap_or(u32::MAX)))
                            .collect(),
                        weight: g.weight.and_then(|w| u32::try_from(w).ok()).unwrap_or(1),
                        usage: Default::default(),
                        weighted_share: 0.0,
                    }
                }))
                .collect(),
        })
    }
}

/// JSON has no infinity: a share that borrows what nobody lends shows as a large number.
fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        f64::MAX
    }
}
