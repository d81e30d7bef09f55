//! The podman runtime: each host's process is `podman run` of the job's `TrainingImage` (or the
//! local image `[executor.images]` maps it to), with the job's directory mounted at `/opt/ml`,
//! its GPUs passed through by CDI (`nvidia.com/gpu=<index>`), and the job's uid when attempts
//! run apart from the server. `podman run` stays in the foreground and forwards signals to the
//! container, so the supervisor's SIGTERM, grace and SIGKILL work on it as on a host process;
//! a SIGKILL of `podman run` does not reach the container, so the supervisor then removes it
//! by name (`remove`). Images are never pulled (`--pull never`): a site maps its users' ECR
//! URIs to images it has.

use qm_core::AttemptId;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio::process::Command;

/// `[executor] runtime = "podman"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Podman {
    /// The podman program.
    pub program: PathBuf,
    /// Arguments before `run` (e.g. `--runtime runc`).
    pub global_args: Vec<String>,
    /// Extra arguments of `run`, before the image.
    pub run_args: Vec<String>,
    /// `TrainingImage` patterns (`*` matches any run of characters) to local images; the
    /// longest matching pattern wins, an image no pattern matches is used as it is.
    pub images: BTreeMap<String, String>,
}

/// How attempts' processes are run.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Runtime {
    /// `ContainerEntrypoint` on the host (default).
    #[default]
    Host,
    /// `TrainingImage` under podman.
    Podman(Podman),
}

impl Runtime {
    /// Whether a job without `ContainerEntrypoint` (the image's own entrypoint) can run.
    pub fn runs_images(&self) -> bool {
        matches!(self, Runtime::Podman(_))
    }
}

/// Whether `image` reads as an image reference (`registry/name:tag` or `@digest`): letters,
/// digits and `._/:@-`, starting with a letter or digit, at most 255 characters. Anything else
/// (an option-like `--volume=/:/host`, spaces, control characters) is refused at submit.
pub fn valid_image(image: &str) -> bool {
    image.len() <= 255
        && image.starts_with(|c: char| c.is_ascii_alphanumeric())
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | ':' | '@' | '-'))
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = text.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

impl Podman {
    /// The local image for `TrainingImage`.
    pub fn image_for(&self, training_image: &str) -> String {
        self.images
            .iter()
            .filter(|(pattern, _)| glob(pattern, training_image))
            .max_by_key(|(pattern, _)| pattern.len())
            .map_or_else(|| training_image.to_string(), |(_, image)| image.clone())
    }
}

/// The label of every container of the executor with data directory `data_dir`.
pub(crate) fn label(data_dir: &Path) -> String {
    format!("qm.data_dir={}", data_dir.display())
}

/// The container's name: unique per attempt and host, so a stray one can be found and removed.
pub(crate) fn name(job_id: &str, attempt: AttemptId, host: u32) -> String {
    format!("qm-{job_id}-{attempt}-algo-{host}")
}

/// What one host's container gets.
pub(crate) struct Run<'a> {
    pub(crate) podman: &'a Podman,
    pub(crate) name: String,
    pub(crate) image: String,
    /// `ContainerEntrypoint`; empty: the image's own, with `train` (SageMaker's convention).
    pub(crate) entrypoint: &'a [String],
    pub(crate) arguments: &'a [String],
    pub(crate) job_dir: &'a Path,
    /// This host's config directory, at `/opt/ml/input/config` (hosts 2 and up).
    pub(crate) config_dir: Option<&'a Path>,
    pub(crate) gpus: &'a [u32],
    pub(crate) uid: Option<u32>,
    /// The container's variables (`--env-file`: never on a command line, never in podman's
    /// own environment).
    pub(crate) env_file: PathBuf,
    /// Marks the container as this executor's.
    pub(crate) label: String,
    /// What the container may use (`--memory`, no swap beyond it, `--cpus`, `--pids-limit`),
    /// when attempts are confined.
    pub(crate) share: Option<crate::cgroup::Share>,
}

impl Run<'_> {
    /// The `podman run` command (program, arguments) of this container.
    pub(crate) fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new(&self.podman.program);
        c.args(&self.podman.global_args);
        c.args([
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "host",
            "--name",
            &self.name,
        ]);
        c.args(["--label", &self.label]);
        c.args(limits());
        if let Some(share) = self.share {
            let memory = format!("{}b", share.memory_bytes);
            c.args(["--memory", &memory, "--memory-swap", &memory]);
            let cpus = format!("{}.{:03}", share.cpu_millis / 1000, share.cpu_millis % 1000);
            c.args(["--cpus", &cpus, "--pids-limit", &share.pids.to_string()]);
        }
        c.arg("--volume")
            .arg(format!("{}:/opt/ml", self.job_dir.display()));
        if let Some(config) = self.config_dir {
            c.arg("--volume")
                .arg(format!("{}:/opt/ml/input/config", config.display()));
        }
        for gpu in self.gpus {
            c.arg("--device").arg(format!("nvidia.com/gpu={gpu}"));
        }
        if let Some(uid) = self.uid {
            c.arg("--user").arg(format!("{uid}:{uid}"));
        }
        c.arg("--env-file").arg(&self.env_file);
        // A setuid program in the image gives the job nothing.
        c.args(["--security-opt", "no-new-privileges"]);
        if let Some((program, rest)) = self.entrypoint.split_first() {
            c.arg("--entrypoint").arg(program);
            // `--`: an image named like an option is an image, never an option.
            c.args(&self.podman.run_args)
                .arg("--")
                .arg(&self.image)
                .args(rest);
            c.args(self.arguments);
        } else {
            c.args(&self.podman.run_args).arg("--").arg(&self.image);
            if self.arguments.is_empty() {
                c.arg("train");
            } else {
                c.args(self.arguments);
            }
        }
        c
    }
}

/// Writes the variables of host `host` to `attempt_dir/env-algo-<host>` (the server's, 0600),
/// one `NAME=value` a line, as `podman run --env-file` reads them. A variable that cannot be
/// written so (a name that is not one, a value with a line break, which would start a line of
/// its own) is left out and logged.
pub(crate) fn write_env_file(
    attempt_dir: &Path,
    host: u32,
    env: &[(String, String)],
) -> std::io::Result<PathBuf> {
    let path = attempt_dir.join(format!("env-algo-{host}"));
    let mut text = String::new();
    for (k, v) in env {
        let name_ok = crate::environment::valid_var(k);
        if !name_ok || v.contains(['\n', '\r']) {
            tracing::warn!(variable = %k, "a variable podman's --env-file cannot carry (not a name, or a line break in its value): left out");
            continue;
        }
        text.push_str(k);
        text.push('=');
        text.push_str(v);
        text.push('\n');
    }
    crate::layout::write_private(&path, text.as_bytes())?;
    Ok(path)
}

/// `--ulimit`s within the server's own hard limits: podman's defaults try to raise them, which
/// an unprivileged or confined server is refused.
fn limits() -> Vec<String> {
    use rustix::process::{getrlimit, Resource};
    let mut out = Vec::new();
    for (name, resource, cap) in [
        ("nofile", Resource::Nofile, None),
        // Beyond pid_max the kernel refuses it in some sandboxes, and it means nothing more.
        (
            "nproc",
            Resource::Nproc,
            std::fs::read_to_string("/proc/sys/kernel/pid_max")
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok()),
        ),
    ] {
        let l = getrlimit(resource);
        let hard = match (l.maximum, cap) {
            (Some(h), Some(c)) => h.min(c),
            (Some(h), None) => h,
            (None, Some(c)) => c,
            (None, None) => continue,
        };
        let soft = l.current.map_or(hard, |s| s.min(hard));
        out.push("--ulimit".into());
        out.push(format!("{name}={soft}:{hard}"));
    }
    out
}

/// Removes the container `name` at once (after its `podman run` was SIGKILLed, or at start-up
/// for one a previous server left). Waits for podman; errors are logged, not returned.
pub(crate) async fn remove(podman: &Podman, name: &str) {
    let out = Command::new(&podman.program)
        .args(&podman.global_args)
        .args(["rm", "--force", "--time", "0", "--ignore", name])
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            tracing::warn!(container = name, stderr = %String::from_utf8_lossy(&o.stderr), "podman rm failed")
        }
        Err(e) => tracing::warn!(container = name, error = %e, "cannot run podman rm"),
    }
}

/// Removes every container labelled `label` whose name starts with none of `keep` (the
/// containers of attempts that supervisors still run).
pub(crate) async fn remove_labelled(podman: &Podman, label: &str, keep: &[String]) {
    let out = Command::new(&podman.program)
        .args(&podman.global_args)
        .args([
            "ps",
            "--all",
            "--quiet",
            "--filter",
            &format!("label={label}"),
            "--format",
            "{{.Names}}",
        ])
        .output()
        .await;
    let Ok(out) = out else { return };
    for name in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .filter(|l| !keep.iter().any(|k| l.starts_with(k.as_str())))
    {
        tracing::warn!(container = name, "removing a container no supervisor holds");
        remove(podman, name).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_names_never_options() {
        assert!(valid_image(
            "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5-gpu-py311"
        ));
        assert!(valid_image("localhost/qm@sha256:abc"));
        for bad in ["--volume=/:/host", "-v", "", "a b", "x\ny"] {
            assert!(!valid_image(bad), "{bad:?}");
        }
    }

    #[test]
    fn patterns_match_with_stars_and_the_longest_pattern_wins() {
        assert!(glob(
            "763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*",
            "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5-gpu-py311"
        ));
        assert!(!glob("a*b", "ab-c"));
        assert!(glob("a*b*c", "a-b-c") && glob("*", "") && glob("x", "x") && !glob("x", "xy"));
        let p = Podman {
            program: "podman".into(),
            global_args: vec![],
            run_args: vec![],
            images: BTreeMap::from([
                ("*".into(), "localhost/default".into()),
                (
                    "*/pytorch-training:*".into(),
                    "localhost/pytorch:2.5".into(),
                ),
            ]),
        };
        assert_eq!(
            p.image_for("1.dkr.ecr.x.amazonaws.com/pytorch-training:2.5"),
            "localhost/pytorch:2.5"
        );
        assert_eq!(p.image_for("other"), "localhost/default");
    }

    #[test]
    fn the_command_mounts_the_job_passes_names_not_values_and_defaults_to_train() {
        let podman = Podman {
            program: "podman".into(),
            global_args: vec!["--runtime".into(), "runc".into()],
            run_args: vec![],
            images: BTreeMap::new(),
        };
        let run = Run {
            podman: &podman,
            name: name("j", AttemptId(7), 2),
            image: "localhost/img".into(),
            entrypoint: &[],
            arguments: &[],
            job_dir: Path::new("/data/jobs/j"),
            config_dir: Some(Path::new("/data/jobs/j/input/config-algo-2")),
            gpus: &[3],
            uid: Some(1000),
            env_file: "/data/jobs/j/attempts/1/env-algo-2".into(),
            label: "qm.data_dir=/data".into(),
            share: Some(crate::cgroup::Share {
                memory_bytes: 1 << 30,
                cpu_millis: 1500,
                pids: 64,
            }),
        };
        let c = run.command();
        let args: Vec<String> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        assert!(
            line.starts_with("--runtime runc run --rm --pull never"),
            "{line}"
        );
        assert!(line.contains("--volume /data/jobs/j:/opt/ml --volume /data/jobs/j/input/config-algo-2:/opt/ml/input/config"), "{line}");
        assert!(
            line.contains("--device nvidia.com/gpu=3 --user 1000:1000 --env-file /data/jobs/j/attempts/1/env-algo-2"),
            "{line}"
        );
        assert!(line.ends_with("-- localhost/img train"), "{line}");
        assert!(line.contains("--name qm-j-7-algo-2"), "{line}");
        assert!(
            line.contains(
                "--memory 1073741824b --memory-swap 1073741824b --cpus 1.500 --pids-limit 64"
            ),
            "{line}"
        );
    }
}
