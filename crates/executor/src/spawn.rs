//! How a host's process is spawned apart from its supervisor: in its control group, in its
//! `/opt/ml` mount namespace, as its uid.
//!
//! `Command::uid` (or a pre_exec hook) would make std fork rather than posix_spawn. Instead a
//! thread of its own enters the namespace (per thread, while still root), takes the job's
//! identity with per-thread syscalls (the supervisor's other threads stay root) and spawns
//! with posix_spawn; the child inherits the thread's groups, namespace and credentials. The
//! thread sets all three uids, so it and the job keep no capability and no way back to root.
//!
//! Under cgroup v1 that thread moves into the host's control group first, and the kernel's
//! first move waits for an RCU grace period (5 to 11 ms here). A [`Spawner`] makes that move
//! while the attempt is prepared and its server makes the start durable, so that the launch
//! does not wait for it.

use std::io;
use std::process::{Child, Command};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

use crate::cgroup::Group;
use crate::{isolation, namespace};

/// The spawn itself, run on the spawning thread.
type Work = Box<dyn FnOnce() -> io::Result<Child> + Send>;

/// A thread that entered a host's cgroup v1 groups ahead of its spawn, and waits for it.
/// Dropped unused (the attempt stopped before it started), it ends.
#[derive(Debug)]
pub(crate) struct Spawner {
    work: SyncSender<Work>,
    /// What the work returned; `None` when none came.
    thread: JoinHandle<Option<io::Result<Child>>>,
}

impl Spawner {
    /// Starts the thread, which enters `group` at once; `None` where the group's interface
    /// moves processes rather than threads (v2: the child moves itself, [`Group::enrol`]).
    pub fn start(group: &Group) -> Option<Spawner> {
        let enter = group.thread_entry()?;
        let (work_tx, work_rx) = sync_channel::<Work>(1);
        let started = std::thread::Builder::new()
            .name("qm-spawn".into())
            .spawn(move || {
                let entered = enter();
                let work = work_rx.recv().ok()?;
                Some(entered.and_then(|()| work()))
            });
        match started {
            Ok(thread) => Some(Spawner {
                work: work_tx,
                thread,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start a spawning thread ahead; it starts at the spawn");
                None
            }
        }
    }

    /// Runs `work` on the thread; what it returned.
    fn run(self, work: Work) -> io::Result<Child> {
        let gone = || io::Error::other("the spawning thread is gone");
        self.work.send(work).map_err(|_| gone())?;
        self.thread
            .join()
            .ok()
            .flatten()
            .unwrap_or_else(|| Err(gone()))
    }
}

/// Spawns `command` in `cgroup` (through `spawner` where it entered the group already), in a
/// mount namespace with `binds` and/or as `uid` (its group `uid`, no supplementary groups).
pub(crate) fn spawn_apart(
    mut command: Command,
    uid: Option<u32>,
    binds: Option<namespace::Binds>,
    cgroup: Option<&Group>,
    spawner: Option<Spawner>,
) -> io::Result<Child> {
    let apart = move |command: &mut Command| -> io::Result<Child> {
        if let Some(binds) = &binds {
            namespace::enter(binds)?;
        }
        // Inherited by the job: a setuid program it runs (or one it made a namespace trust)
        // gives it nothing.
        nix::sys::prctl::set_no_new_privs().map_err(io::Error::from)?;
        if let Some(uid) = uid {
            isolation::become_job(uid)?;
        }
        command.spawn()
    };
    if let Some(spawner) = spawner {
        return spawner.run(Box::new(move || apart(&mut command)));
    }
    std::thread::scope(|scope| {
        let spawner = scope.spawn(move || {
            if let Some(cgroup) = cgroup {
                // First, while the thread is still root: v1 moves this thread into the group.
                cgroup.enrol(&mut command)?;
            }
            apart(&mut command)
        });
        spawner
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the spawning thread panicked")))
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::cgroup::{Hierarchy, V1Dirs};

    /// A fake v1 tree with the group `g` (plain `tasks` files, which keep every value written).
    fn fake_v1(root: &Path) -> Hierarchy {
        let dir = |c: &str| {
            let d = root.join(c).join("qm-k");
            std::fs::create_dir_all(d.join("g")).unwrap();
            std::fs::write(d.join("g/tasks"), "").unwrap();
            d
        };
        Hierarchy::V1 {
            dirs: V1Dirs {
                memory: dir("memory"),
                pids: dir("pids"),
                cpu: dir("cpu"),
                devices: dir("devices"),
                freezer: dir("freezer"),
                cpuacct: None,
            },
        }
    }

    fn tasks(root: &Path, controller: &str) -> String {
        std::fs::read_to_string(root.join(controller).join("qm-k/g/tasks")).unwrap()
    }

    #[test]
    fn a_v1_spawner_enters_the_group_before_the_spawn_which_moves_nothing_more() {
        let root = tempfile::tempdir().unwrap();
        let group = Group::named(&fake_v1(root.path()), "g");
        let spawner = Spawner::start(&group).expect("v1 has spawners");
        // It enters at once, on its own thread, before any work is given to it.
        let entered = (0..200).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(5));
            !tasks(root.path(), "freezer").is_empty()
        });
        assert!(entered, "the spawner did not enter ahead");
        let tid = tasks(root.path(), "memory");
        let mine = rustix::thread::gettid().as_raw_nonzero().to_string();
        assert_ne!(tid.trim(), mine, "the caller's thread must not enter");
        let mut child = spawn_apart(
            Command::new("true"),
            None,
            None,
            Some(&group),
            Some(spawner),
        )
        .expect("spawned through the spawner");
        assert!(child.wait().unwrap().success());
        for c in ["memory", "pids", "cpu", "devices", "freezer"] {
            assert_eq!(
                tasks(root.path(), c),
                tid,
                "{c}: entered once, by the spawner"
            );
        }
    }

    #[test]
    fn without_a_spawner_the_spawning_thread_enters_at_the_spawn() {
        let root = tempfile::tempdir().unwrap();
        let group = Group::named(&fake_v1(root.path()), "g");
        let mut child = spawn_apart(Command::new("true"), None, None, Some(&group), None).unwrap();
        assert!(child.wait().unwrap().success());
        assert_eq!(tasks(root.path(), "pids").lines().count(), 1);
    }

    #[test]
    fn a_v2_group_has_no_spawner_its_child_moves_itself() {
        let root = tempfile::tempdir().unwrap();
        let h = Hierarchy::V2 {
            dir: root.path().join("qm-k"),
        };
        assert!(Spawner::start(&Group::named(&h, "g")).is_none());
    }
}
