//! The batch script of one attempt and the `sbatch` arguments that submit it.
//!
//! One file, written to the attempt's directory on the shared file system, plays two roles.
//! Run by `sbatch` (no argument) it is the batch step: it works out `SM_HOSTS` from the
//! allocation and starts itself once per node with `srun --ntasks-per-node=1`. Run by `srun`
//! (argument `task`) it is one host: it sets that host's variables, sends its output to the
//! host's log files and `exec`s the entrypoint. The entrypoint therefore runs as a step task,
//! which is what `scancel --signal=TERM` reaches (the batch shell is not signalled and keeps
//! waiting, so the grace period is the job's own).

use std::fmt::Write as _;
use std::path::Path;

use super::SlurmInstance;
use crate::environment::valid_var;
use crate::layout::{log_file_name, JobLayout, LogStream};
use crate::LaunchSpec;

/// Wraps `s` in single quotes for bash.
pub(crate) fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The file name of an attempt's start failure on host `i` (1-based): written by the script
/// when the entrypoint cannot be executed, read back into a `ClientError` reason.
pub(crate) fn start_error_file(host: u32) -> String {
    format!("start-error-{host}")
}

/// The batch script of `spec`. `vars` are the variables common to every host (the payload's
/// `Environment` first, the executor's after, so the executor's win); `gpus` is the number
/// of GPUs per instance.
pub(crate) fn batch_script(
    spec: &LaunchSpec,
    layout: &JobLayout,
    script_path: &Path,
    vars: &[(String, String)],
    gpus: u32,
) -> String {
    let mut s = String::new();
    let attempt_dir = layout.attempt_dir.to_string_lossy();
    batch_step(&mut s, spec, script_path);
    let _ = writeln!(s, "# Task: one per node.");
    // Private names: the payload's Environment, exported below, must not change them.
    let _ = writeln!(s, "__qm_i=$((SLURM_NODEID + 1))");
    let out1 = log_file_name(LogStream::Stdout, 1);
    let err1 = log_file_name(LogStream::Stderr, 1);
    let out_n = log_file_name(LogStream::Stdout, 2).replace('2', "$__qm_i");
    let err_n = log_file_name(LogStream::Stderr, 2).replace('2', "$__qm_i");
    let _ = writeln!(
        s,
        "if [ \"$__qm_i\" -eq 1 ]; then __qm_out={out1}; __qm_err={err1}; else __qm_out={out_n}; __qm_err={err_n}; fi"
    );
    let _ = writeln!(
        s,
        "exec >>{}/\"$__qm_out\" 2>>{}/\"$__qm_err\"",
        quote(&attempt_dir),
        quote(&attempt_dir)
    );
    export_vars(&mut s, vars, gpus);
    let _ = writeln!(s, "cd {} || exit 1", quote(&layout.work.to_string_lossy()));
    let argv: Vec<String> = spec
        .entrypoint
        .iter()
        .chain(spec.arguments.iter())
        .map(|a| quote(a))
        .collect();
    let program = argv.first().cloned().unwrap_or_else(|| "''".into());
    let _ = writeln!(s, "if ! command -v -- {program} >/dev/null 2>&1; then");
    let _ = writeln!(
        s,
        "  echo \"not found or not executable on $SLURMD_NODENAME\" >{}/{}",
        quote(&attempt_dir),
        start_error_file(1).replace('1', "$__qm_i")
    );
    let _ = writeln!(s, "  exit 127");
    let _ = writeln!(s, "fi");
    opt_ml(&mut s, &layout.job.to_string_lossy(), &argv.join(" "));
    let _ = writeln!(s, "exec {}", argv.join(" "));
    s
}

/// The script's batch step: the hosts of the allocation as `SM_HOSTS`, then the script
/// again as one task per node.
fn batch_step(s: &mut String, spec: &LaunchSpec, script_path: &Path) {
    let _ = writeln!(s, "#!/bin/bash");
    let _ = writeln!(
        s,
        "# Written by Quartermaster: job {} attempt {} (qm attempt {}). Do not edit; it is\n# rewritten for every attempt.",
        spec.job_id, spec.attempt_number, spec.attempt
    );
    let _ = writeln!(s, "set -u");
    let _ = writeln!(s, "if [ \"${{1:-}}\" != task ]; then");
    let _ = writeln!(
        s,
        "  # Batch step: SM_HOSTS from the allocation, then one task per node."
    );
    let _ = writeln!(s, "  hosts=''");
    let _ = writeln!(
        s,
        "  for h in $(scontrol show hostnames \"$SLURM_JOB_NODELIST\"); do hosts=\"$hosts${{hosts:+,}}\\\"$h\\\"\"; done"
    );
    let _ = writeln!(s, "  export SM_HOSTS=\"[$hosts]\"");
    let _ = writeln!(
        s,
        "  echo \"qm: Slurm job $SLURM_JOB_ID runs attempt {} of job {} on $SLURM_JOB_NODELIST\"",
        spec.attempt_number, spec.job_id
    );
    let _ = writeln!(
        s,
        "  exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/bash {} task",
        quote(&script_path.to_string_lossy())
    );
    let _ = writeln!(s, "fi");
}

/// The exports of a task: `vars` (a name a shell cannot export is skipped, saying so) and
/// the host and GPU variables.
fn export_vars(s: &mut String, vars: &[(String, String)], gpus: u32) {
    for (k, v) in vars {
        if valid_var(k) && !k.starts_with("__qm_") {
            let _ = writeln!(s, "export {k}={}", quote(v));
        } else {
            let _ = writeln!(
                s,
                "echo {} >&2",
                quote(&format!(
                    "qm: environment variable name {k:?} cannot be exported by a shell; skipped"
                ))
            );
        }
    }
    let _ = writeln!(s, "export SM_CURRENT_HOST=\"$SLURMD_NODENAME\"");
    let _ = writeln!(s, "export SM_NUM_GPUS={gpus}");
    if gpus == 0 {
        let _ = writeln!(s, "export CUDA_VISIBLE_DEVICES=''");
    }
}

/// Lines that give the task its job directory at `/opt/ml` where the node allows it: a mount
/// namespace of its own (`unshare`; a user namespace too when the task is not root) in which
/// the job directory is bound there, then the entrypoint (`argv`, quoted). Where `/opt/ml` is
/// missing on the node the task runs without it; where the namespace or the bind is refused
/// too, saying so on its stderr (scripts then find their directories through the `SM_*`
/// variables).
fn opt_ml(s: &mut String, job_dir: &str, argv: &str) {
    let job = quote(job_dir);
    let _ = writeln!(
        s,
        "if [ -d /opt/ml ] && command -v unshare >/dev/null 2>&1; then"
    );
    let _ = writeln!(s, "  if [ \"$(id -u)\" -eq 0 ]; then __qm_ns='--mount'; else __qm_ns='--map-current-user --mount'; fi");
    let _ = writeln!(
        s,
        "  if unshare $__qm_ns --propagation private -- /bin/true 2>/dev/null; then"
    );
    let _ = writeln!(
        s,
        "    exec unshare $__qm_ns --propagation private -- /bin/bash -c 'mount --bind -- \"$1\" /opt/ml || echo \"qm: no /opt/ml on $SLURMD_NODENAME: the bind was refused\" >&2; shift; exec \"$@\"' qm-opt-ml {job} {argv}"
    );
    let _ = writeln!(s, "  fi");
    let _ = writeln!(
        s,
        "  echo \"qm: no /opt/ml on $SLURMD_NODENAME: no mount namespace may be made here\" >&2"
    );
    let _ = writeln!(s, "fi");
}

/// The `sbatch` arguments of `spec`, ending with the script's path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sbatch_args(
    spec: &LaunchSpec,
    instance: &SlurmInstance,
    layout: &JobLayout,
    script_path: &Path,
    name: &str,
    comment: &str,
    account: Option<&str>,
    extra: &[String],
) -> Vec<String> {
    let attempt_dir = layout.attempt_dir.to_string_lossy();
    let mut args = vec![
        "--parsable".to_string(),
        format!("--job-name={name}"),
        format!("--comment={comment}"),
        format!("--nodes={}", spec.count),
        "--ntasks-per-node=1".into(),
        "--exclusive".into(),
        // Quartermaster decides where a job runs again, and a lost node must not cost a retry.
        "--no-requeue".into(),
        "--open-mode=append".into(),
        // `%` is a Slurm filename pattern; a literal one in the path is written `%%`.
        format!("--output={}/slurm-%j.out", attempt_dir.replace('%', "%%")),
        format!("--chdir={}", layout.work.to_string_lossy()),
    ];
    if let Some(p) = &instance.partition {
        args.push(format!("--partition={p}"));
    }
    if let Some(f) = &instance.feature {
        args.push(format!("--constraint={f}"));
    }
    if instance.gpus_per_instance > 0 {
        args.push(format!("--gres=gpu:{}", instance.gpus_per_instance));
    }
    if let Some(a) = account {
        args.push(format!("--account={a}"));
    }
    args.extend(extra.iter().cloned());
    args.push(script_path.to_string_lossy().into_owned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_core::AttemptId;
    use std::path::PathBuf;

    fn spec() -> LaunchSpec {
        let mut s = LaunchSpec::new(
            AttemptId(7),
            "job-1",
            "ml.g5.xlarge",
            vec!["python3".into(), "it's.py".into()],
        );
        s.count = 2;
        s.arguments = vec!["--x".into()];
        s
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn the_script_runs_one_task_per_node_and_quotes_everything() {
        let layout = JobLayout::new(Path::new("/shared/qm"), "job-1", 3);
        let path = layout.attempt_dir.join("slurm.sh");
        let vars = vec![
            ("FOO".to_string(), "a b'c".to_string()),
            ("bad name".to_string(), "x".to_string()),
        ];
        let s = batch_script(&spec(), &layout, &path, &vars, 1);
        assert!(s.contains("exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 /bin/bash '/shared/qm/jobs/job-1/attempts/3/slurm.sh' task"), "{s}");
        assert!(s.contains(r"export FOO='a b'\''c'"), "{s}");
        assert!(!s.contains("export bad name"), "{s}");
        assert!(s.contains(r"exec 'python3' 'it'\''s.py' '--x'"), "{s}");
        assert!(s.contains("__qm_out=stdout-algo-$__qm_i.log"), "{s}");
        assert!(s.contains("export SM_CURRENT_HOST=\"$SLURMD_NODENAME\""));
        assert!(
            !s.contains("CUDA_VISIBLE_DEVICES=''"),
            "Slurm sets it from the gres"
        );
    }

    #[test]
    fn sbatch_asks_for_exclusive_nodes_gpus_and_no_requeue() {
        let layout = JobLayout::new(Path::new("/s"), "job-1", 1);
        let inst = SlurmInstance {
            instance_type: "ml.g5.xlarge".into(),
            partition: Some("gpu".into()),
            feature: Some("a10g".into()),
            gpus_per_instance: 4,
        };
        let args = sbatch_args(
            &spec(),
            &inst,
            &layout,
            &PathBuf::from("/s/x.sh"),
            "qm-n-1",
            "qm/t/job-1/1/7",
            Some("ml"),
            &["--qos=normal".into()],
        );
        for want in [
            "--nodes=2",
            "--exclusive",
            "--no-requeue",
            "--partition=gpu",
            "--constraint=a10g",
            "--gres=gpu:4",
            "--account=ml",
            "--comment=qm/t/job-1/1/7",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} in {args:?}");
        }
        assert_eq!(args[args.len() - 2], "--qos=normal");
        assert_eq!(args.last().unwrap(), "/s/x.sh");
    }
}
