//! Spawning an attempt's processes, one per host, in two steps: each is *armed* (its command
//! built, the log files its preparation opened duplicated and, where it runs apart from the
//! supervisor, a thread of its own put into the host's control group, mount namespace and
//! uid) while the server makes the
//! attempt's start durable, and *fired* at the go, which then costs one posix_spawn per
//! host. On the path from a reclaim to the owner's job running, the set-up (a thread, six
//! control group writes, a namespace, a bind mount, the uid) was half a millisecond or more
//! after the go.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::cgroup::Group;
use crate::container::Runtime;
use crate::layout::{log_file_name, JobLayout, LogStream};
use crate::supervisor::attempt::Prepared;
use crate::supervisor::Settings;
use crate::{environment, outcome, LaunchSpec};
use crate::{isolation, namespace};

/// One host's process, set up to be spawned.
enum Armed {
    /// Spawned by the supervisor's own thread, as it is.
    Direct(Command),
    /// Spawned by a thread of its own, set up and waiting for `fire`, which answers on
    /// `spawned` as soon as the process is spawned (not when the thread has ended: its exit is
    /// not on the path to the job running). Dropped unfired, the thread ends and spawns
    /// nothing.
    Apart {
        // Dropped before `thread`: an unfired thread then ends, and is joined.
        fire: std::sync::mpsc::SyncSender<()>,
        spawned: std::sync::mpsc::Receiver<std::io::Result<(Child, Option<File>)>>,
        thread: Spawner,
    },
}

/// The thread of a host armed apart, joined when dropped. Under cgroup v1 it sits in the
/// host's control group, listed there under the supervisor's pid, until it has ended: gone
/// before the attempt's end is reported, it is never found there by the supervisor of the
/// instance's next attempt (which kills what it finds in the group it takes).
pub(super) struct Spawner(Option<std::thread::JoinHandle<()>>);

impl Drop for Spawner {
    fn drop(&mut self) {
        if let Some(thread) = self.0.take() {
            let _ = thread.join();
        }
    }
}

impl Armed {
    /// Spawns the process (for a thread whose set-up failed: that failure), with the mount
    /// namespace it runs in when it has one of its own, and the thread that spawned it.
    fn fire(self) -> (std::io::Result<(Child, Option<File>)>, Option<Spawner>) {
        match self {
            Armed::Direct(mut command) => (command.spawn().map(|child| (child, None)), None),
            Armed::Apart {
                fire,
                spawned,
                thread,
            } => {
                // A thread whose set-up failed has answered with that failure already.
                let _ = fire.send(());
                let answer = spawned
                    .recv()
                    .unwrap_or_else(|_| Err(std::io::Error::other("the spawning thread panicked")));
                (answer, Some(thread))
            }
        }
    }
}

/// The hosts' processes, armed in host order (each with what stopped it, if it could not be).
pub(super) struct ArmedHosts(Vec<std::io::Result<Armed>>);

/// The pids of the first hosts' processes, with the reason the next host could not be
/// spawned if one could not.
pub(super) struct Spawned {
    pub(super) children: Vec<u32>,
    pub(super) spawn_failure: Option<String>,
    /// The mount namespaces the processes run in, held open by the supervisor: see
    /// [`Namespaces`].
    pub(super) namespaces: Namespaces,
    /// The threads that spawned them, to be dropped (joined) before the attempt's end is
    /// reported: see [`Spawner`].
    pub(super) spawners: Vec<Spawner>,
}

/// The mount namespaces of an attempt's processes, held open until its end is reported.
///
/// A mount namespace goes when its last user does, and its mounts with it; the kernel then
/// waits out an RCU grace period (`synchronize_rcu_expedited` in `namespace_unlock`), which
/// on a busy 2-core VM is a millisecond or more. Were the job's last process the last user,
/// that wait would come between its SIGTERM and its exit, on the path from a reclaim to the
/// owner's job running. Held here, the namespaces go when these files are dropped, after
/// the end is reported, on a thread that may wait ([`Namespaces::release`]).
#[derive(Default)]
pub(crate) struct Namespaces(Vec<File>);

impl Namespaces {
    /// Lets the namespaces go, off the caller's thread.
    pub(crate) fn release(self) {
        if !self.0.is_empty() {
            tokio::task::spawn_blocking(move || drop(self));
        }
    }
}

/// Arms one process per host, each in its control group if it has one.
pub(super) fn arm_all(
    spec: &LaunchSpec,
    prepared: &Prepared,
    hosts: &[Vec<u32>],
    uid: Option<u32>,
    settings: &Settings,
    cgroups: &[Group],
) -> ArmedHosts {
    let armed = hosts.iter().enumerate().map(|(host, gpus)| {
        let placed = Placed {
            host,
            gpus,
            uid,
            cgroup: cgroups.get(host),
        };
        arm_host(spec, prepared, &placed, settings)
    });
    ArmedHosts(armed.collect())
}

impl ArmedHosts {
    /// Spawns the hosts' processes in order, up to the first that fails (the ones after it
    /// are dropped unspawned).
    pub(super) fn fire(self, program: &str) -> Spawned {
        let mut children = Vec::with_capacity(self.0.len());
        let mut spawn_failure = None;
        let mut namespaces = Namespaces::default();
        let mut spawners = Vec::with_capacity(self.0.len());
        for armed in self.0 {
            let fired = armed.map(Armed::fire).and_then(|(answer, spawner)| {
                spawners.extend(spawner);
                answer
            });
            match fired {
                // Reaped by the supervisor's waitpid(-1), never through the handle.
                Ok((child, namespace)) => {
                    children.push(child.id());
                    namespaces.0.extend(namespace);
                }
                Err(e) => {
                    spawn_failure = Some(outcome::spawn_reason(program, e));
                    break;
                }
            }
        }
        Spawned {
            children,
            spawn_failure,
            namespaces,
            spawners,
        }
    }
}

/// Where one host's process goes.
struct Placed<'a> {
    /// 0-based.
    host: usize,
    gpus: &'a [u32],
    uid: Option<u32>,
    cgroup: Option<&'a Group>,
}

/// Sets up the process of a host, to be spawned in its own process group (and control
/// group), logging to its files in the attempt directory (made by `prepare`, appended to).
fn arm_host(
    spec: &LaunchSpec,
    prepared: &Prepared,
    placed: &Placed<'_>,
    settings: &Settings,
) -> std::io::Result<Armed> {
    let layout = &prepared.layout;
    let Placed {
        gpus, uid, cgroup, ..
    } = *placed;
    let host = placed.host as u32 + 1;
    let open_log = |stream| -> std::io::Result<File> {
        let path = layout.attempt_dir.join(log_file_name(stream, host));
        prepared.log(placed.host, stream).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("cannot open log '{}': {e}", path.display()),
            )
        })
    };
    let mut env: Vec<(String, String)> = prepared.env.clone();
    env.extend(
        environment::per_host(spec, layout, host, gpus)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v)),
    );
    let mut command = match &settings.runtime {
        Runtime::Host => host_command(spec, layout, &env),
        Runtime::Podman(podman) => {
            let run = Container {
                podman,
                host,
                gpus,
                uid,
                data_dir: &settings.data_dir,
                share: settings.confinement.as_ref().map(|c| c.share),
            };
            container_command(spec, layout, &run, &mut env)?
        }
    };
    use std::os::unix::process::CommandExt;
    command
        .stdin(Stdio::null())
        .stdout(open_log(LogStream::Stdout)?)
        .stderr(open_log(LogStream::Stderr)?)
        .process_group(0);
    let binds = settings.opt_ml.then(|| namespace::Binds {
        job: layout.job.clone(),
        config: (host > 1).then(|| crate::input::config_dir(layout, host)),
    });
    match (&settings.runtime, uid, binds, cgroup) {
        (Runtime::Host, None, None, None) | (Runtime::Podman(_), _, _, None) => {
            Ok(Armed::Direct(command))
        }
        // podman runs as the server; the container's processes run in podman's own group,
        // limited by `podman run`'s flags.
        (Runtime::Podman(_), _, _, cgroup) => arm_apart(command, None, None, cgroup),
        (Runtime::Host, uid, binds, cgroup) => arm_apart(command, uid, binds, cgroup),
    }
}

/// `ContainerEntrypoint` + `ContainerArguments` in the job's `work/`, with the supervisor's
/// environment (the server's) less its own settings and credentials (the marker, QM_DATA_DIR,
/// is set again in `env`), then `env`.
fn host_command(spec: &LaunchSpec, layout: &JobLayout, env: &[(String, String)]) -> Command {
    let mut command = Command::new(&spec.entrypoint[0]);
    command
        .args(&spec.entrypoint[1..])
        .args(&spec.arguments)
        .current_dir(&layout.work);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("QM_") || k.starts_with("AWS_") {
            command.env_remove(&key);
        }
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    command
}

/// Where one host's container runs.
struct Container<'a> {
    podman: &'a crate::container::Podman,
    host: u32,
    gpus: &'a [u32],
    uid: Option<u32>,
    data_dir: &'a Path,
    share: Option<crate::cgroup::Share>,
}

/// What of the server's environment podman (root) gets: where to find itself and its
/// settings, nothing of the job's (an `LD_PRELOAD` or `PATH` of the payload would run the
/// job's code as root).
const PODMAN_ENV: [&str; 5] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "XDG_RUNTIME_DIR",
    "CONTAINERS_CONF",
];

/// `podman run` of the job's image. The variables' paths are the container's (`/opt/ml/...`),
/// `CUDA_VISIBLE_DEVICES` counts the GPUs it was given from 0, and the podman process runs as
/// the server (root), the container's process as `uid`.
fn container_command(
    spec: &LaunchSpec,
    layout: &JobLayout,
    c: &Container<'_>,
    env: &mut [(String, String)],
) -> std::io::Result<Command> {
    let Container {
        podman,
        host,
        gpus,
        uid,
        data_dir,
        share,
    } = *c;
    let job = layout.job.to_string_lossy().into_owned();
    for (k, v) in env.iter_mut() {
        if let Some(rest) = v.strip_prefix(job.as_str()) {
            *v = format!("{}{rest}", namespace::OPT_ML);
        }
        if k == "CUDA_VISIBLE_DEVICES" {
            *v = (0..gpus.len())
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",");
        }
    }
    let image = spec.training_image.as_deref().unwrap_or_default();
    let config = crate::input::config_dir(layout, host);
    let run = crate::container::Run {
        podman,
        name: crate::container::name(&spec.job_id, spec.attempt, host),
        image: podman.image_for(image),
        entrypoint: &spec.entrypoint,
        arguments: &spec.arguments,
        job_dir: &layout.job,
        config_dir: (host > 1).then_some(config.as_path()),
        gpus,
        uid,
        env_file: crate::container::write_env_file(&layout.attempt_dir, host, env)?,
        label: crate::container::label(data_dir),
        share,
    };
    let mut command = run.command();
    command.current_dir(&layout.work).env_clear();
    for key in PODMAN_ENV {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    Ok(command)
}

/// Sets up a thread to spawn `command` in its control group, in a mount namespace with
/// `binds` and/or as `uid` (its group `uid`, no supplementary groups), once fired.
///
/// `Command::uid` (or a pre_exec hook) would make std fork rather than posix_spawn. Instead a
/// thread enters the control group and the namespace (per thread, while still root), takes
/// the job's identity with per-thread syscalls (the supervisor's other threads stay root) and,
/// when fired, spawns with posix_spawn; the child inherits the thread's groups, namespace and
/// credentials. The thread sets all three uids, so it and the job keep no capability and no
/// way back to root.
fn arm_apart(
    mut command: Command,
    uid: Option<u32>,
    binds: Option<namespace::Binds>,
    cgroup: Option<&Group>,
) -> std::io::Result<Armed> {
    let entry = cgroup.map(|g| g.enrol(&mut command)).transpose()?;
    let (fire, fired) = std::sync::mpsc::sync_channel::<()>(1);
    let (answer, spawned) = std::sync::mpsc::sync_channel(1);
    let mut set_up_and_spawn = move || -> std::io::Result<(Child, Option<File>)> {
        // First, while the thread is still root: v1 moves this thread into the group.
        if let Some(entry) = &entry {
            entry.enter()?;
        }
        let namespace = match &binds {
            Some(binds) => {
                namespace::enter(binds)?;
                // Held for speed only: the spawn goes ahead without it.
                File::open("/proc/thread-self/ns/mnt").ok()
            }
            None => None,
        };
        // Inherited by the job: a setuid program it runs (or one it made a namespace trust)
        // gives it nothing.
        nix::sys::prctl::set_no_new_privs().map_err(std::io::Error::from)?;
        if let Some(uid) = uid {
            isolation::become_job(uid)?;
        }
        // An attempt that ends before its go drops the sender: nothing is spawned.
        fired
            .recv()
            .map_err(|_| std::io::Error::other("the attempt ended before its go"))?;
        Ok((command.spawn()?, namespace))
    };
    // Its answer is what `fire` waits for; its end, what dropping the `Spawner` does.
    let thread = std::thread::Builder::new()
        .name("qm-spawn".into())
        .spawn(move || {
            let _ = answer.send(set_up_and_spawn());
        })?;
    Ok(Armed::Apart {
        fire,
        spawned,
        thread: Spawner(Some(thread)),
    })
}
