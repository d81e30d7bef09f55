//! What the local machine offers: instance types, how many instances of each, and which GPUs
//! each instance hands to its process. Attempts take and give back whole instances, so a GPU is
//! never shared by two running attempts. A reload resizes the pools: new instances are
//! appended (ids of the others never change), and a removed instance that runs an attempt is
//! *retired*: it counts no more, and goes when that attempt gives it back.

use qm_core::AttemptId;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::ExecError;

/// A group of identical local instances; also the server's `[[executor.pool]]` table, read
/// as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSpec {
    /// The capacity unit, e.g. `ml.g5.xlarge`.
    pub instance_type: String,
    /// How many instances of that type.
    pub count: u32,
    /// GPUs each instance gets (0: the process runs on the CPU).
    #[serde(default)]
    pub gpus_per_instance: u32,
    /// Memory each instance gets, in GiB (default: the machine's memory, less a reserve for
    /// the server, divided among the instances that do not say; `cgroup::share`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_gib: Option<f64>,
    /// CPUs each instance gets (default: the machine's CPUs divided likewise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<f64>,
    /// Processes and threads each instance may have at once (default 16384).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pids: Option<u64>,
}

impl PoolSpec {
    /// `count` instances of `instance_type` with `gpus_per_instance` GPUs each, sized by
    /// default.
    pub fn new(instance_type: impl Into<String>, count: u32, gpus_per_instance: u32) -> Self {
        Self {
            instance_type: instance_type.into(),
            count,
            gpus_per_instance,
            memory_gib: None,
            vcpus: None,
            max_pids: None,
        }
    }
}

/// One GPU as `nvidia-smi` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// The index `CUDA_VISIBLE_DEVICES` uses.
    pub index: u32,
    /// The product name, e.g. `NVIDIA A10G`.
    pub name: String,
}

/// Runs `nvidia-smi --query-gpu=index,name --format=csv,noheader`; empty when absent or failing.
pub fn detect_gpus() -> Vec<GpuInfo> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=index,name", "--format=csv,noheader"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => parse_gpu_csv(&String::from_utf8_lossy(&out.stdout)),
        _ => Vec::new(),
    }
}

/// Parses `index, name` lines; lines that do not parse are skipped rather than failing the
/// whole detection, since a partial inventory is still usable.
pub(crate) fn parse_gpu_csv(text: &str) -> Vec<GpuInfo> {
    text.lines()
        .filter_map(|line| {
            let (index, name) = line.split_once(',')?;
            Some(GpuInfo {
                index: index.trim().parse().ok()?,
                name: name.trim().to_string(),
            })
        })
        .collect()
}

/// The SageMaker instance type whose GPU matches `gpu_name` (ml.g5.xlarge when unknown).
pub fn instance_type_for_gpu(gpu_name: &str) -> &'static str {
    // Compare whole tokens: "L4" must not match "L40" or "L40S".
    let upper = gpu_name.to_ascii_uppercase();
    let tokens: Vec<&str> = upper.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let has = |t: &str| tokens.contains(&t);
    if has("A10G") {
        "ml.g5.xlarge"
    } else if has("L40S") {
        "ml.g6e.xlarge"
    } else if has("L4") {
        "ml.g6.xlarge"
    } else if has("T4") {
        "ml.g4dn.xlarge"
    } else if has("V100") {
        "ml.p3.2xlarge"
    } else {
        "ml.g5.xlarge"
    }
}

/// The pool when no config is given: one instance per detected GPU (type chosen from the GPU
/// name by [`instance_type_for_gpu`]), else 4 simulated ml.g5.xlarge with 0 GPUs (processes on
/// the CPU).
///
/// Consecutive GPUs of one type share a pool, and pools follow the GPUs' order, so the default
/// `gpu_indices` (0..total, in pool order) gives each instance the GPU it was made for when
/// `nvidia-smi` numbers its GPUs 0..n. Pass `gpu_indices` explicitly when it does not.
pub fn default_pools(gpus: &[GpuInfo]) -> Vec<PoolSpec> {
    if gpus.is_empty() {
        return vec![PoolSpec::new("ml.g5.xlarge", 4, 0)];
    }
    let mut pools: Vec<PoolSpec> = Vec::new();
    for gpu in gpus {
        let instance_type = instance_type_for_gpu(&gpu.name);
        match pools.last_mut() {
            Some(last) if last.instance_type == instance_type => last.count += 1,
            _ => pools.push(PoolSpec::new(instance_type, 1, 1)),
        }
    }
    pools
}

/// One local instance: its type and the GPUs its process sees.
#[derive(Debug, Clone)]
struct Instance {
    instance_type: String,
    gpus: Vec<u32>,
    /// Out of the pools (a reload removed it, or an adopted attempt runs on GPUs no instance
    /// of the pools has): never free again, gone once given back.
    retired: bool,
    /// Retired and given back: nothing runs on it.
    gone: bool,
}

/// All instances, and which are free. Instance ids are indices into `instances`.
#[derive(Debug, Clone)]
pub(crate) struct Inventory {
    instances: Vec<Instance>,
    /// Free instance ids per type; the lowest ids go first, so GPU assignment is predictable.
    free: BTreeMap<String, BTreeSet<usize>>,
}

impl Inventory {
    /// Lays out the instances of `pools` in order, handing each its GPUs from `gpu_indices`
    /// (or 0..total) in order.
    pub(crate) fn build(
        pools: &[PoolSpec],
        gpu_indices: Option<&[u32]>,
    ) -> Result<Self, ExecError> {
        let needed: usize = pools
            .iter()
            .map(|p| p.count as usize * p.gpus_per_instance as usize)
            .sum();
        let gpus: Vec<u32> = match gpu_indices {
            Some(list) => {
                let mut seen = BTreeSet::new();
                if let Some(dup) = list.iter().find(|g| !seen.insert(**g)) {
                    return Err(ExecError::DuplicateGpu(*dup));
                }
                list.to_vec()
            }
            None => (0..needed as u32).collect(),
        };
        if gpus.len() < needed {
            return Err(ExecError::NotEnoughGpus {
                needed,
                available: gpus.len(),
            });
        }
        let mut next_gpu = gpus.iter().copied();
        let mut inventory = Inventory {
            instances: Vec::new(),
            free: BTreeMap::new(),
        };
        for pool in pools {
            for _ in 0..pool.count {
                let gpus = next_gpu
                    .by_ref()
                    .take(pool.gpus_per_instance as usize)
                    .collect();
                inventory.push(&pool.instance_type, gpus);
            }
        }
        Ok(inventory)
    }

    fn push(&mut self, instance_type: &str, gpus: Vec<u32>) -> usize {
        let id = self.instances.len();
        self.instances.push(Instance {
            instance_type: instance_type.to_string(),
            gpus,
            retired: false,
            gone: false,
        });
        self.free
            .entry(instance_type.to_string())
            .or_default()
            .insert(id);
        id
    }

    /// Resizes the pools to `pools` (a reload): per type, instances are added (with the lowest
    /// GPUs of `gpu_indices`, else of 0.., that no instance uses) or retired (free ones
    /// first, the highest ids first); a type whose GPUs per instance changed has all its
    /// instances retired and laid out anew. Nothing changes on error.
    pub(crate) fn resize(
        &mut self,
        pools: &[PoolSpec],
        gpu_indices: Option<&[u32]>,
    ) -> Result<(), ExecError> {
        let mut next = self.clone();
        let mut want: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
        for p in pools {
            let e = want
                .entry(&p.instance_type)
                .or_insert((0, p.gpus_per_instance));
            e.0 += p.count;
        }
        let types: BTreeSet<String> = next
            .free
            .keys()
            .cloned()
            .chain(want.keys().map(|t| t.to_string()))
            .collect();
        // Every retirement first: GPUs a shrunk type gives up go to a grown one.
        for t in &types {
            let (count, per) = want.get(t.as_str()).copied().unwrap_or((0, 0));
            let current = next.in_pool(t);
            if current
                .first()
                .is_some_and(|&id| next.instances[id].gpus.len() != per as usize)
            {
                next.retire(t, current.len());
            }
            let have = next.in_pool(t).len() as u32;
            if count < have {
                next.retire(t, (have - count) as usize);
            }
        }
        for t in &types {
            let (count, per) = want.get(t.as_str()).copied().unwrap_or((0, 0));
            let have = next.in_pool(t).len() as u32;
            for _ in have..count {
                let gpus = next.unused_gpus(per as usize, gpu_indices)?;
                next.push(t, gpus);
            }
        }
        *self = next;
        Ok(())
    }

    /// The ids of the type's instances in the pools (not retired), in order.
    fn in_pool(&self, instance_type: &str) -> Vec<usize> {
        (0..self.instances.len())
            .filter(|&id| {
                let i = &self.instances[id];
                i.instance_type == instance_type && !i.retired
            })
            .collect()
    }

    /// Retires `n` instances of the type: free ones first, the highest ids first.
    fn retire(&mut self, instance_type: &str, n: usize) {
        let mut ids = self.in_pool(instance_type);
        let free = self.free.entry(instance_type.to_string()).or_default();
        // Held ones last: sorted by (free, id), taken from the end.
        ids.sort_by_key(|id| (free.contains(id), *id));
        for id in ids.into_iter().rev().take(n) {
            let instance = &mut self.instances[id];
            instance.retired = true;
            if free.remove(&id) {
                instance.gone = true;
            }
        }
    }

    /// `n` GPUs no instance uses, the lowest first.
    fn unused_gpus(&self, n: usize, gpu_indices: Option<&[u32]>) -> Result<Vec<u32>, ExecError> {
        let used: BTreeSet<u32> = self
            .instances
            .iter()
            .filter(|i| !i.gone)
            .flat_map(|i| i.gpus.iter().copied())
            .collect();
        let candidates: Box<dyn Iterator<Item = u32>> = match gpu_indices {
            Some(list) => Box::new(list.iter().copied()),
            None => Box::new(0..),
        };
        let gpus: Vec<u32> = candidates.filter(|g| !used.contains(g)).take(n).collect();
        if gpus.len() < n {
            return Err(ExecError::NotEnoughGpus {
                needed: used.len() + n,
                available: gpu_indices.map_or(usize::MAX, <[u32]>::len),
            });
        }
        Ok(gpus)
    }

    /// Instances per type in the pools, free or not (retired ones count no more, nor do free
    /// ones whose GPUs a retired instance still holds: they cannot be handed out yet).
    pub(crate) fn capacity(&self) -> BTreeMap<String, u32> {
        let busy = self.retired_gpus();
        let mut capacity: BTreeMap<String, u32> =
            self.free.keys().map(|t| (t.clone(), 0)).collect();
        for (id, instance) in self.instances.iter().enumerate() {
            let blocked = self.is_free(id) && instance.gpus.iter().any(|g| busy.contains(g));
            if !instance.retired && !blocked {
                *capacity.entry(instance.instance_type.clone()).or_default() += 1;
            }
        }
        capacity
    }

    /// GPUs held by retired instances that still run an attempt.
    fn retired_gpus(&self) -> BTreeSet<u32> {
        self.instances
            .iter()
            .filter(|i| i.retired && !i.gone)
            .flat_map(|i| i.gpus.iter().copied())
            .collect()
    }

    /// Whether any of `ids` is retired: giving them back may change the capacity.
    pub(crate) fn any_retired(&self, ids: &[usize]) -> bool {
        ids.iter().any(|&id| self.instances[id].retired)
    }

    fn is_free(&self, id: usize) -> bool {
        self.free
            .get(&self.instances[id].instance_type)
            .is_some_and(|f| f.contains(&id))
    }

    /// Takes `count` free instances of `instance_type`, lowest ids first.
    pub(crate) fn take(
        &mut self,
        attempt: AttemptId,
        instance_type: &str,
        count: u32,
    ) -> Result<Vec<usize>, ExecError> {
        // GPUs an adopted attempt holds outside the pools are not handed out again.
        let busy = self.retired_gpus();
        let instances = &self.instances;
        let free = self
            .free
            .get_mut(instance_type)
            .ok_or_else(|| ExecError::UnknownInstanceType(instance_type.to_string()))?;
        let usable: Vec<usize> = free
            .iter()
            .copied()
            .filter(|&id| instances[id].gpus.iter().all(|g| !busy.contains(g)))
            .collect();
        if usable.len() < count as usize {
            return Err(ExecError::InsufficientInstances {
                attempt,
                instance_type: instance_type.to_string(),
                requested: count,
                free: usable.len() as u32,
            });
        }
        let taken: Vec<usize> = usable.into_iter().take(count as usize).collect();
        for id in &taken {
            free.remove(id);
        }
        Ok(taken)
    }

    /// Holds the instances an adopted attempt runs on, one per host with its GPUs, and
    /// returns their ids here: a free instance of the type with those GPUs (the one of the
    /// recorded id first), else — the pools changed while it ran — a retired instance made
    /// for it, so that its GPUs are not handed out until it ends.
    pub(crate) fn hold_placed(
        &mut self,
        instance_type: &str,
        ids: &[usize],
        hosts: &[Vec<u32>],
    ) -> Vec<usize> {
        let mut held = Vec::with_capacity(ids.len());
        for (k, &recorded) in ids.iter().enumerate() {
            let gpus = hosts.get(k).cloned().unwrap_or_default();
            let instances = &self.instances;
            let free = self.free.entry(instance_type.to_string()).or_default();
            let fits = |id: &usize| instances[*id].gpus == gpus;
            let found = std::iter::once(recorded)
                .filter(|id| free.contains(id))
                .chain(free.iter().copied())
                .find(fits);
            let id = match found {
                Some(id) => {
                    free.remove(&id);
                    id
                }
                None => {
                    let id = self.push(instance_type, gpus);
                    self.free.get_mut(instance_type).map(|f| f.remove(&id));
                    self.instances[id].retired = true;
                    id
                }
            };
            held.push(id);
        }
        held
    }

    /// Returns instances taken by [`Inventory::take`]; retired ones go.
    pub(crate) fn give_back(&mut self, ids: &[usize]) {
        for &id in ids {
            let instance = &mut self.instances[id];
            if instance.retired {
                instance.gone = true;
                continue;
            }
            let newly_free = self
                .free
                .entry(instance.instance_type.clone())
                .or_default()
                .insert(id);
            debug_assert!(newly_free, "instance {id} given back twice");
        }
    }

    /// The GPUs instance `id` hands to its process.
    pub(crate) fn gpus(&self, id: usize) -> &[u32] {
        &self.instances[id].gpus
    }

    /// Free instances of a type.
    pub(crate) fn free(&self, instance_type: &str) -> u32 {
        self.free.get(instance_type).map_or(0, |f| f.len() as u32)
    }

    /// Every instance is either free or held, never both; ids are in range. `held` lists the
    /// instances of running attempts.
    pub(crate) fn check_invariants(&self, held: &[usize]) -> Result<(), String> {
        let mut seen = BTreeSet::new();
        for (instance_type, free) in &self.free {
            for &id in free {
                let instance = self
                    .instances
                    .get(id)
                    .ok_or(format!("free id {id} out of range"))?;
                if &instance.instance_type != instance_type {
                    return Err(format!(
                        "instance {id} is free under the wrong type {instance_type}"
                    ));
                }
                seen.insert(id);
            }
        }
        for &id in held {
            if !seen.insert(id) {
                return Err(format!(
                    "instance {id} is both free and held, or held twice"
                ));
            }
        }
        let present = self.instances.iter().filter(|i| !i.gone).count();
        if seen.len() != present {
            return Err(format!(
                "{present} instances but {} free or held",
                seen.len()
            ));
        }
        if let Some(id) = seen.iter().find(|&&id| self.instances[id].gone) {
            return Err(format!("instance {id} is gone but free or held"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(instance_type: &str, count: u32, gpus_per_instance: u32) -> PoolSpec {
        PoolSpec::new(instance_type, count, gpus_per_instance)
    }

    #[test]
    fn nvidia_smi_lines_parse_and_bad_lines_are_skipped() {
        let gpus = parse_gpu_csv("0, NVIDIA A10G\n1, NVIDIA L4\nnot a gpu\n");
        assert_eq!(gpus.len(), 2);
        assert_eq!(
            gpus[1],
            GpuInfo {
                index: 1,
                name: "NVIDIA L4".into()
            }
        );
    }

    #[test]
    fn gpu_names_map_to_instance_types_by_whole_token() {
        for (name, expected) in [
            ("NVIDIA A10G", "ml.g5.xlarge"),
            ("NVIDIA L4", "ml.g6.xlarge"),
            ("NVIDIA L40S", "ml.g6e.xlarge"),
            ("NVIDIA L40", "ml.g5.xlarge"),
            ("Tesla T4", "ml.g4dn.xlarge"),
            ("Tesla V100-SXM2-16GB", "ml.p3.2xlarge"),
            ("NVIDIA H200", "ml.g5.xlarge"),
        ] {
            assert_eq!(instance_type_for_gpu(name), expected, "{name}");
        }
    }

    #[test]
    fn no_gpu_means_four_simulated_cpu_instances() {
        assert_eq!(default_pools(&[]), vec![pool("ml.g5.xlarge", 4, 0)]);
    }

    #[test]
    fn consecutive_gpus_of_one_type_share_a_pool_in_gpu_order() {
        let gpus = parse_gpu_csv("0, NVIDIA A10G\n1, NVIDIA A10G\n2, NVIDIA L4\n3, NVIDIA A10G\n");
        assert_eq!(
            default_pools(&gpus),
            vec![
                pool("ml.g5.xlarge", 2, 1),
                pool("ml.g6.xlarge", 1, 1),
                pool("ml.g5.xlarge", 1, 1)
            ]
        );
    }

    #[test]
    fn gpus_are_handed_out_in_order_and_capacity_merges_pools_of_one_type() {
        let pools = [pool("a", 2, 2), pool("b", 1, 0), pool("a", 1, 1)];
        let inv = Inventory::build(&pools, Some(&[7, 6, 5, 4, 3])).unwrap();
        assert_eq!(inv.gpus(0), [7, 6]);
        assert_eq!(inv.gpus(1), [5, 4]);
        assert!(inv.gpus(2).is_empty());
        assert_eq!(inv.gpus(3), [3]);
        assert_eq!(
            inv.capacity(),
            BTreeMap::from([("a".into(), 3), ("b".into(), 1)])
        );
        inv.check_invariants(&[]).unwrap();
    }

    #[test]
    fn too_few_or_duplicate_gpu_indices_are_refused() {
        let pools = [pool("a", 2, 1)];
        assert!(matches!(
            Inventory::build(&pools, Some(&[0])),
            Err(ExecError::NotEnoughGpus {
                needed: 2,
                available: 1
            })
        ));
        assert!(matches!(
            Inventory::build(&pools, Some(&[1, 1])),
            Err(ExecError::DuplicateGpu(1))
        ));
    }

    #[test]
    fn an_adopted_attempt_holds_the_instance_with_its_gpus_or_one_made_for_it() {
        let mut inv = Inventory::build(&[pool("a", 3, 1)], None).unwrap();
        // Recorded as instance 1 with GPU 1: held as it was.
        assert_eq!(inv.hold_placed("a", &[1], &[vec![1]]), vec![1]);
        // Recorded as instance 0 but on GPU 2 (the pools were laid out differently then).
        assert_eq!(inv.hold_placed("a", &[0], &[vec![2]]), vec![2]);
        assert_eq!(inv.free("a"), 1);
        // On GPU 7, which no instance has: held on a retired instance; GPU 7 never goes out.
        let odd = inv.hold_placed("a", &[0], &[vec![7]]);
        assert_eq!(odd, vec![3]);
        assert_eq!(inv.capacity()["a"], 3, "a retired instance is no capacity");
        inv.check_invariants(&[1, 2, 3]).unwrap();
        inv.give_back(&odd);
        assert_eq!(inv.free("a"), 1, "a retired instance given back goes");
        inv.check_invariants(&[1, 2]).unwrap();
    }

    #[test]
    fn instances_whose_gpus_an_adopted_attempt_holds_are_not_capacity_until_it_ends() {
        // 2 instances of 1 GPU each; an adopted attempt runs on GPUs 0 and 1 as one host (the
        // pools used to be one instance of 2 GPUs).
        let mut inv = Inventory::build(&[pool("a", 2, 1)], None).unwrap();
        let held = inv.hold_placed("a", &[0], &[vec![0, 1]]);
        assert_eq!(inv.capacity()["a"], 0, "both instances' GPUs are in use");
        assert!(inv.take(AttemptId(9), "a", 1).is_err());
        assert!(inv.any_retired(&held));
        inv.give_back(&held);
        assert_eq!(inv.capacity()["a"], 2);
        assert_eq!(inv.take(AttemptId(9), "a", 2).unwrap().len(), 2);
    }

    #[test]
    fn a_reload_grows_pools_with_unused_gpus_and_retires_held_instances_when_given_back() {
        let mut inv = Inventory::build(&[pool("a", 2, 1), pool("b", 1, 1)], None).unwrap();
        let held = inv.take(AttemptId(1), "a", 2).unwrap();
        inv.resize(&[pool("a", 1, 1), pool("b", 2, 1), pool("c", 1, 0)], None)
            .unwrap();
        assert_eq!(
            inv.capacity(),
            BTreeMap::from([("a".into(), 1), ("b".into(), 2), ("c".into(), 1)])
        );
        assert_eq!(
            inv.free("a"),
            0,
            "the other instance still runs its attempt"
        );
        assert_eq!(inv.free("b"), 2);
        let b = inv.take(AttemptId(2), "b", 2).unwrap();
        assert_eq!(inv.gpus(b[1]), &[3], "the lowest GPU no instance uses");
        inv.check_invariants(&[held.clone(), b.clone()].concat())
            .unwrap();
        inv.give_back(&held);
        assert_eq!(
            inv.free("a"),
            1,
            "the retired instance went; the kept one is free"
        );
        // A type shrinks while another grows: the GPU given up goes to the grown one.
        let mut swap =
            Inventory::build(&[pool("a", 2, 1), pool("b", 2, 1)], Some(&[0, 1, 2, 3])).unwrap();
        swap.resize(&[pool("a", 3, 1), pool("b", 1, 1)], Some(&[0, 1, 2, 3]))
            .unwrap();
        let a = swap.take(AttemptId(3), "a", 3).unwrap();
        assert_eq!(a.iter().map(|&id| swap.gpus(id)[0]).max(), Some(3));
        // Not enough GPUs in a fixed list: refused, nothing changed.
        let before = inv.capacity();
        assert!(inv.resize(&[pool("a", 9, 1)], Some(&[0, 1, 2, 3])).is_err());
        assert_eq!(inv.capacity(), before);
    }

    #[test]
    fn taking_beyond_free_instances_fails_and_giving_back_frees_them() {
        let mut inv = Inventory::build(&[pool("a", 2, 0)], None).unwrap();
        let held = inv.take(AttemptId(1), "a", 2).unwrap();
        inv.check_invariants(&held).unwrap();
        assert!(matches!(
            inv.take(AttemptId(2), "a", 1),
            Err(ExecError::InsufficientInstances { free: 0, .. })
        ));
        assert!(matches!(
            inv.take(AttemptId(2), "b", 1),
            Err(ExecError::UnknownInstanceType(_))
        ));
        inv.give_back(&held);
        assert_eq!(inv.free("a"), 2);
        inv.check_invariants(&[]).unwrap();
    }
}
