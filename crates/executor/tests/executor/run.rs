//! Starting attempts: environment, logs, exit reasons, spawn failures, several hosts.

use qm_executor::AttemptId;
use std::collections::BTreeMap;
use std::fs;

use qm_executor::{ExecError, ExecEvent, Exit, LaunchSpec};

use crate::world::{failed, parse_env, pool, sh, until, until_blocking, World};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_sees_its_gpus_hyperparameters_directories_and_the_payload_environment() {
    let mut w = World::with(|cfg| {
        cfg.pools = vec![pool("ml.g5.xlarge", 2, 1)];
        cfg.gpu_indices = Some(vec![5, 7]);
    });
    let mut spec = sh(1, "job-env", "env; pwd");
    spec.count = 2;
    spec.job_name = "train-7".into();
    spec.hyperparameters = BTreeMap::from([
        ("learning-rate".into(), "0.1".into()),
        ("epochs".into(), "3".into()),
    ]);
    // HOME is inherited from the server; the payload wins. SM_CURRENT_HOST is the executor's.
    spec.environment = BTreeMap::from([
        ("HOME".into(), "/payload/home".into()),
        ("MY_SETTING".into(), "on".into()),
        ("SM_CURRENT_HOST".into(), "payload-host".into()),
    ]);
    w.exec.start(spec).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let (pids, gpus, log_dir) = w.running(1).await;
    assert_eq!(pids.len(), 2);
    assert_eq!(gpus, [5, 7]);
    let job = w.exec.job_dir("job-env");
    assert_eq!(log_dir, job.join("attempts/1"));

    let algo1 = fs::read_to_string(log_dir.join("stdout.log")).unwrap();
    let algo2 = fs::read_to_string(log_dir.join("stdout-algo-2.log")).unwrap();
    let (env1, env2) = (parse_env(&algo1), parse_env(&algo2));
    assert_eq!(env1["SM_CURRENT_HOST"], "algo-1");
    assert_eq!(env2["SM_CURRENT_HOST"], "algo-2");
    assert_eq!(env1["CUDA_VISIBLE_DEVICES"], "5");
    assert_eq!(env2["CUDA_VISIBLE_DEVICES"], "7");
    assert_eq!(env1["SM_NUM_GPUS"], "1");
    assert_eq!(env1["SM_HOSTS"], r#"["algo-1","algo-2"]"#);
    assert_eq!(env1["SM_HP_LEARNING_RATE"], "0.1");
    assert_eq!(env1["SM_HP_EPOCHS"], "3");
    let hps: BTreeMap<String, String> = serde_json::from_str(&env1["SM_HPS"]).unwrap();
    assert_eq!(hps["learning-rate"], "0.1");
    assert_eq!(env1["HOME"], "/payload/home");
    assert_eq!(env1["MY_SETTING"], "on");
    assert!(
        !env1["PATH"].is_empty(),
        "the server's environment is inherited"
    );
    assert_eq!(env1["SM_TRAINING_JOB_NAME"], "train-7");
    assert_eq!(env1["QM_JOB_ID"], "job-env");
    assert_eq!(env1["QM_ATTEMPT"], "1");
    for (var, dir) in [
        ("SM_CHECKPOINT_DIR", "checkpoints"),
        ("SM_MODEL_DIR", "model"),
        ("SM_OUTPUT_DIR", "output"),
        ("SM_OUTPUT_DATA_DIR", "output/data"),
    ] {
        assert_eq!(env1[var], job.join(dir).to_str().unwrap(), "{var}");
        assert!(job.join(dir).is_dir(), "{dir} exists");
    }
    assert!(
        algo1
            .lines()
            .any(|l| l == job.join("work").to_str().unwrap()),
        "runs in work/"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_reads_sagemaker_s_config_files_and_its_channel_directories() {
    let store = tempfile::tempdir().unwrap();
    fs::create_dir_all(store.path().join("train/part")).unwrap();
    fs::write(store.path().join("train/part/rows.csv"), "1,2\n").unwrap();
    let root = store.path().to_path_buf();
    let mut w = World::with(|cfg| {
        cfg.pools = vec![pool("ml.g5.xlarge", 2, 0)];
        cfg.storage = Some(std::sync::Arc::new(qm_executor::Storage::new(
            qm_executor::StorageSettings::resolve(
                &qm_executor::StorageConfig {
                    file_roots: vec![root.clone()],
                    ..Default::default()
                },
                &BTreeMap::new(),
            ),
        )));
    });
    let script = "cat \"$SM_INPUT_CONFIG_DIR/hyperparameters.json\" > out-hp.json; \
                  cat \"$SM_INPUT_CONFIG_DIR/inputdataconfig.json\" > out-idc.json; \
                  cat \"$SM_INPUT_CONFIG_DIR/resourceconfig.json\" > out-rc.json; \
                  cat \"$SM_CHANNEL_TRAIN/part/rows.csv\" > out-rows.csv; \
                  test -d \"$SM_CHANNEL_TRAIN\" && echo \"$SM_CHANNELS\" > out-channels; \
                  echo \"$SM_RESOURCE_CONFIG\" > out-rc-$SM_CURRENT_HOST; \
                  echo \"$TRAINING_JOB_NAME\" > out-name";
    let mut spec = sh(1, "job-cfg", script);
    spec.count = 2;
    spec.job_name = "train-cfg".into();
    spec.hyperparameters = BTreeMap::from([("epochs".into(), "3".into())]);
    spec.channels = vec![qm_executor::InputChannel {
        name: "train".into(),
        uri: format!("file://{}", store.path().join("train").display()),
        data_type: "S3Prefix".into(),
        input_mode: "File".into(),
        distribution: "ShardedByS3Key".into(),
        content_type: None,
        compression: None,
        record_wrapper: None,
    }];
    w.exec.start(spec).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let work = w.exec.job_dir("job-cfg").join("work");
    let read = |name: &str| fs::read_to_string(work.join(name)).unwrap();
    let json = |name: &str| -> serde_json::Value { serde_json::from_str(&read(name)).unwrap() };
    assert_eq!(json("out-hp.json"), serde_json::json!({"epochs": "3"}));
    assert_eq!(
        read("out-rows.csv"),
        "1,2\n",
        "the channel was downloaded before the start"
    );
    assert_eq!(
        json("out-idc.json")["train"]["S3DistributionType"],
        "ShardedByS3Key"
    );
    assert_eq!(
        json("out-rc.json")["hosts"],
        serde_json::json!(["algo-1", "algo-2"])
    );
    assert_eq!(read("out-channels").trim(), r#"["train"]"#);
    assert_eq!(json("out-rc-algo-2")["current_host"], "algo-2");
    assert_eq!(read("out-name").trim(), "train-cfg");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_without_gpu_gets_an_empty_cuda_visible_devices() {
    let mut w = World::new();
    w.exec.start(sh(1, "job-cpu", "env")).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let (_, gpus, log_dir) = w.running(1).await;
    assert!(gpus.is_empty());
    let env = parse_env(&fs::read_to_string(log_dir.join("stdout.log")).unwrap());
    assert_eq!(env["CUDA_VISIBLE_DEVICES"], "");
    assert_eq!(env["SM_NUM_GPUS"], "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_and_stderr_are_kept_per_attempt() {
    let mut w = World::new();
    for n in 1..=2u32 {
        let mut spec = sh(
            u64::from(n),
            "job-logs",
            "echo out $QM_ATTEMPT; echo err $QM_ATTEMPT >&2",
        );
        spec.attempt_number = n;
        w.exec.start(spec).unwrap();
        assert_eq!(w.exited(u64::from(n)).await, Exit::Succeeded);
    }
    for n in 1..=2u32 {
        let dir = w.exec.log_dir("job-logs", n);
        assert_eq!(
            fs::read_to_string(dir.join("stdout.log")).unwrap(),
            format!("out {n}\n")
        );
        assert_eq!(
            fs::read_to_string(dir.join("stderr.log")).unwrap(),
            format!("err {n}\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes_and_signals_become_algorithm_error_reasons() {
    let mut w = World::new();
    let cases = [
        ("exit 0", Exit::Succeeded),
        (
            "exit 3",
            failed("Received status from SageMaker: AlgorithmError: process exited with code 3"),
        ),
        (
            "kill -KILL $$",
            failed(
                "Received status from SageMaker: AlgorithmError: process killed by signal SIGKILL",
            ),
        ),
    ];
    for (i, (script, expected)) in cases.into_iter().enumerate() {
        let attempt = i as u64 + 1;
        w.exec
            .start(sh(attempt, &format!("job-exit-{i}"), script))
            .unwrap();
        assert_eq!(w.exited(attempt).await, expected, "{script}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failure_file_explains_a_failure_and_is_cleared_before_the_next_attempt() {
    let mut w = World::new();
    let mut first = sh(
        1,
        "job-fail",
        "printf '  CUDA out of memory  \\nstack...\\n' > \"$SM_OUTPUT_DIR/failure\"; exit 1",
    );
    first.attempt_number = 1;
    w.exec.start(first).unwrap();
    assert_eq!(
        w.exited(1).await,
        failed("Received status from SageMaker: AlgorithmError: CUDA out of memory")
    );

    let mut second = sh(2, "job-fail", "exit 2");
    second.attempt_number = 2;
    w.exec.start(second).unwrap();
    assert_eq!(
        w.exited(2).await,
        failed("Received status from SageMaker: AlgorithmError: process exited with code 2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_cannot_start_fails_retryably_without_running() {
    let mut w = World::new();
    let missing = LaunchSpec::new(
        AttemptId(1),
        "job-missing",
        "ml.g5.xlarge",
        vec!["/nonexistent/train".into()],
    );
    w.exec.start(missing).unwrap();
    let Exit::Failed { reason, retryable } = w.exited(1).await else {
        panic!("succeeded")
    };
    assert!(
        reason.starts_with(
            "Received status from SageMaker: ClientError: cannot start '/nonexistent/train': "
        ),
        "{reason}"
    );
    assert!(retryable);
    assert_eq!(w.events_of(1).len(), 1, "only Exited: {:?}", w.events_of(1));

    let script = w.dir.path().join("not-executable.sh");
    fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    let program = script.to_str().unwrap().to_string();
    w.exec
        .start(LaunchSpec::new(
            AttemptId(2),
            "job-noexec",
            "ml.g5.xlarge",
            vec![program.clone()],
        ))
        .unwrap();
    let Exit::Failed { reason, retryable } = w.exited(2).await else {
        panic!("succeeded")
    };
    assert!(
        reason.contains(&format!("cannot start '{program}'"))
            && reason.contains("ermission denied"),
        "{reason}"
    );
    assert!(retryable);

    w.exec
        .start(LaunchSpec::new(
            AttemptId(3),
            "job-noentry",
            "ml.g5.xlarge",
            vec![],
        ))
        .unwrap();
    let Exit::Failed { reason, retryable } = w.exited(3).await else {
        panic!("succeeded")
    };
    assert!(
        reason.contains("ContainerEntrypoint is missing"),
        "{reason}"
    );
    assert!(!retryable, "a missing entrypoint does not fix itself");
    assert_eq!(w.exec.free("ml.g5.xlarge"), 2, "capacity came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_starts_are_refused_as_errors() {
    let mut w = World::new();
    let mut zero = sh(1, "job", "true");
    zero.count = 0;
    assert!(matches!(
        w.exec.start(zero),
        Err(ExecError::NoInstances(AttemptId(1)))
    ));
    assert!(matches!(
        w.exec.start(sh(2, "../escape", "true")),
        Err(ExecError::InvalidJobId(_))
    ));
    let mut other = sh(3, "job", "true");
    other.instance_type = "ml.p5.48xlarge".into();
    assert!(matches!(
        w.exec.start(other),
        Err(ExecError::UnknownInstanceType(_))
    ));
    w.exec.start(sh(4, "job-a", "sleep 1000")).unwrap();
    assert!(matches!(
        w.exec.start(sh(4, "job-b", "true")),
        Err(ExecError::DuplicateAttempt(AttemptId(4)))
    ));
    w.exec.stop(AttemptId(4));
    // Ending the test (and its runtime) while the attempt is starting could orphan it.
    w.exited(4).await;
}

#[test]
fn start_outside_a_runtime_is_an_error() {
    let w = World::new();
    assert!(matches!(
        w.exec.start(sh(1, "job", "true")),
        Err(ExecError::NoRuntime)
    ));
    assert_eq!(w.exec.running(), 0);
}

/// The end is reported at once and the outcome written meanwhile (the supervisor goes only
/// once it is on disk): it is there soon after the exit, as the job ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_outcome_is_recorded_next_to_the_logs_as_the_end_is_reported() {
    let mut w = World::new();
    w.exec.start(sh(1, "job-ok", "exit 0")).unwrap();
    w.exec.start(sh(2, "job-bad", "exit 4")).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let bad = w.exited(2).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while w.exec.recorded_outcome("job-bad", 1).is_none()
        || w.exec.recorded_outcome("job-ok", 1).is_none()
    {
        assert!(std::time::Instant::now() < deadline, "no outcome file");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(w.exec.recorded_outcome("job-ok", 1), Some(Exit::Succeeded));
    assert_eq!(w.exec.recorded_outcome("job-bad", 1), Some(bad));
    assert_eq!(
        w.exec.recorded_outcome("job-ok", 2),
        None,
        "no such attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_root_each_host_sees_the_job_at_opt_ml_with_its_own_config_and_no_new_privileges() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: /opt/ml needs a mount namespace, which needs root");
        return;
    }
    let mut w = World::with(|cfg| {
        cfg.pools = vec![pool("ml.g5.xlarge", 2, 0)];
        cfg.opt_ml = qm_executor::OptMl::Required;
    });
    assert!(w.exec.opt_ml());
    let script =
        "grep -o '\"current_host\": *\"algo-[0-9]\"' /opt/ml/input/config/resourceconfig.json \
                    > /opt/ml/work/seen-$SM_CURRENT_HOST; \
                  grep NoNewPrivs /proc/self/status >> /opt/ml/work/seen-$SM_CURRENT_HOST";
    let mut spec = sh(1, "job-optml", script);
    spec.count = 2;
    w.exec.start(spec).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let work = w.exec.job_dir("job-optml").join("work");
    for host in ["algo-1", "algo-2"] {
        let seen = fs::read_to_string(work.join(format!("seen-{host}"))).unwrap();
        assert!(seen.contains(&format!("\"{host}\"")), "{host}: {seen}");
        assert!(seen.contains("NoNewPrivs:\t1"), "{host}: {seen}");
    }
    assert!(
        fs::read_dir("/opt/ml").unwrap().next().is_none(),
        "nothing reached the host's /opt/ml"
    );
}

/// The server released the attempt and, in its next batch, stopped it (a job terminated just
/// as it was scheduled): both reach the supervisor together (one write when the server's link
/// finds both queued), or nearly. The stop must not be lost while it waits for the go (it
/// once was, about one time in two, and the job ran on, terminated: `exited` then times out):
/// the attempt ends unstarted, or, when the stop came in a later write and the job was
/// spawned in between, stopped by SIGTERM — never left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_released_and_stopped_at_once_never_runs() {
    let mut w = World::new();
    for attempt in 1..=8 {
        let ran = w.dir.path().join(format!("ran-{attempt}"));
        let spec = sh(
            attempt,
            &format!("job-rs-{attempt}"),
            &format!("touch {}; sleep 600", ran.display()),
        );
        w.exec.ready(spec).unwrap();
        w.exec.release(AttemptId(attempt));
        w.exec.stop(AttemptId(attempt));
        match w.exited(attempt).await {
            Exit::Failed { reason, .. } if reason.contains("stopped before it was started") => {
                assert!(!ran.exists(), "attempt {attempt} ran after its stop")
            }
            Exit::Failed { reason, .. } if reason.contains("SIGTERM") => {}
            other => panic!("attempt {attempt}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_got_ready_takes_its_instance_at_once_and_runs_only_once_released() {
    let mut w = World::new();
    let ran = w.dir.path().join("ran");
    let spec = sh(1, "job-ready", &format!("touch {}", ran.display()));
    w.exec.ready(spec).unwrap();
    assert_eq!(w.exec.free("ml.g5.xlarge"), 1);
    // Time enough for a supervisor to be forked, connected and (were it told) to run it.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(!ran.exists(), "it ran before it was released");
    w.exec.release(AttemptId(1));
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    assert!(ran.exists());
    assert_eq!(w.exec.free("ml.g5.xlarge"), 2);
}

/// A supervisor started and driven over its socket, as a server would: the tests below need
/// to say what no executor would (a go and a stop in one write) or to vanish as a killed
/// server does.
struct Direct {
    supervisor: std::process::Child,
    stream: std::os::unix::net::UnixStream,
    lines: std::io::Lines<std::io::BufReader<std::os::unix::net::UnixStream>>,
}

impl Direct {
    /// Spawns a supervisor on `attempt`'s socket under `data` and launches `script` there,
    /// held for a go when `hold`, for a server whose own data dir is `server_dir` when it is
    /// not `data`; returns once it said hello.
    fn launch(
        data: &std::path::Path,
        attempt: u64,
        script: &str,
        hold: bool,
        orphan_check_ms: u64,
        server_dir: Option<&std::path::Path>,
    ) -> Direct {
        use qm_executor::supervisor::protocol::{Launch, ToSupervisor};
        use qm_executor::supervisor::{socket_path, Placement, Settings, PROTOCOL};
        use std::io::{BufRead, BufReader, Write};
        use std::os::unix::net::{UnixListener, UnixStream};
        let socket = socket_path(data, AttemptId(attempt));
        fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let listener = UnixListener::bind(&socket).unwrap();
        let supervisor = std::process::Command::new(env!("CARGO_BIN_EXE_qm-executor-supervise"))
            .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(
                listener,
            )))
            .spawn()
            .unwrap();
        let spec = sh(attempt, "job-direct", script);
        let launch = Launch {
            placement: Placement {
                job_id: spec.job_id.clone(),
                attempt_number: spec.attempt_number,
                instance_type: spec.instance_type.clone(),
                instances: vec![0],
                hosts: vec![vec![]],
                uid: None,
                groups: Vec::new(),
            },
            spec,
            settings: Settings {
                data_dir: data.to_path_buf(),
                stop_grace_ms: 300,
                isolation: None,
                opt_ml: false,
                runtime: Default::default(),
                storage: None,
                checkpoint_sync_ms: 1000,
                confinement: None,
                orphan_check_ms,
                server_dir: server_dir.map(std::path::Path::to_path_buf),
            },
            hold,
            limits_kept: false,
        };
        let mut stream = UnixStream::connect(&socket).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let hello = ToSupervisor::Hello {
            protocol: PROTOCOL,
            attempt: AttemptId(attempt),
        };
        let first = Direct::line(&hello) + &Direct::line(&ToSupervisor::Launch(Box::new(launch)));
        stream.write_all(first.as_bytes()).unwrap();
        let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
        let answer = lines.next().unwrap().unwrap();
        assert!(answer.contains("\"type\":\"hello\""), "{answer}");
        Direct {
            supervisor,
            stream,
            lines,
        }
    }

    fn line(msg: &qm_executor::supervisor::protocol::ToSupervisor) -> String {
        format!("{}\n", serde_json::to_string(msg).unwrap())
    }

    fn send(&mut self, msgs: &[qm_executor::supervisor::protocol::ToSupervisor]) {
        use std::io::Write;
        let all: String = msgs.iter().map(Direct::line).collect();
        self.stream.write_all(all.as_bytes()).unwrap();
    }

    /// The first status line that contains `what`.
    fn status(&mut self, what: &str) -> String {
        self.lines
            .by_ref()
            .map(Result::unwrap)
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("the supervisor never reported {what}"))
    }

    /// The supervisor's exit status, after at most `within`; it is killed and the test fails
    /// if it is still there. The connection is closed first, as a server that goes closes it.
    fn exits(self, within: std::time::Duration, why: &str) -> std::process::ExitStatus {
        let Direct {
            mut supervisor,
            stream,
            lines,
        } = self;
        drop((stream, lines));
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = supervisor.try_wait().unwrap() {
                return status;
            }
            if std::time::Instant::now() > deadline {
                let _ = supervisor.kill();
                let _ = supervisor.wait();
                panic!("the supervisor did not exit within {within:?} {why}");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A go and a stop in one write, as the server's link sends what it finds queued: the
/// supervisor reads both before its attempt runs again, and carries out the stop before any
/// spawn, every time. Driven over the socket, as a server would.
#[test]
fn a_go_and_a_stop_in_one_write_never_start_the_job() {
    use qm_executor::supervisor::protocol::ToSupervisor;
    for attempt in 1..=5 {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().canonicalize().unwrap();
        let ran = data.join("ran");
        let script = format!("touch {}; sleep 600", ran.display());
        let mut direct = Direct::launch(&data, attempt, &script, true, 60_000, None);
        direct.send(&[ToSupervisor::Go, ToSupervisor::Stop]);
        let exited = direct.status("\"status\":\"exited\"");
        assert!(
            exited.contains("stopped before it was started"),
            "attempt {attempt}: {exited}"
        );
        assert!(!ran.exists(), "attempt {attempt} ran after its stop");
        // Acknowledged, then its server goes: the supervisor exits.
        direct.send(&[ToSupervisor::Ack]);
        let status = direct.exits(std::time::Duration::from_secs(30), "once its server went");
        assert!(status.success(), "attempt {attempt}: {status}");
    }
}

/// The data dir of a running attempt is deleted after its server was killed (a test's
/// cleanup, an admin's `rm -rf`): no server can ever ask for the attempt. Its supervisor
/// stops the job and goes, though the outcome file it would write has nowhere to go; it
/// neither makes the data dir again to write it (it used to) nor waits a day for an
/// acknowledgement. So too where the job directories live apart from the server's data dir
/// (`/var/lib/qm-jobs/<key>`) and only the data dir is removed: its supervisors used to stay.
#[test]
fn a_running_attempt_whose_data_dir_is_deleted_is_stopped_and_its_supervisor_goes() {
    for apart in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().canonicalize().unwrap();
        let server_dir = tempfile::tempdir().unwrap();
        let server = server_dir.path().canonicalize().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let pid_file = elsewhere.path().join("pid");
        let script = format!("echo $$ > {}; exec sleep 600", pid_file.display());
        let mut direct = Direct::launch(
            &work,
            1,
            &script,
            false,
            100,
            apart.then_some(server.as_path()),
        );
        direct.status("\"status\":\"running\"");
        until_blocking(|| fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')));
        let pid: i32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Its data dir is removed, and its server killed (`exits` closes the connection).
        let removed = if apart { &server } else { &work };
        fs::remove_dir_all(removed).unwrap();
        let status = direct.exits(
            std::time::Duration::from_secs(20),
            &format!("once its data dir was deleted (apart: {apart})"),
        );
        assert!(status.success(), "{status}");
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the job (pid {pid}) outlived its supervisor (apart: {apart})"
        );
        assert!(
            !removed.exists(),
            "the supervisor made the removed data dir again to write the outcome in it"
        );
        if apart {
            // The job directories are still there: the outcome says the attempt was lost (no
            // retry used), not how the job answered SIGTERM.
            let outcome = work.join("jobs/job-direct/attempts/1/outcome.json");
            let text = fs::read_to_string(&outcome).unwrap_or_default();
            assert!(
                text.contains("lost") && text.contains("removed"),
                "{}: {text}",
                outcome.display()
            );
        }
    }
}

/// The supervisor's pid the `Running` event of `attempt` named.
async fn supervisor_of(w: &mut World, attempt: u64) -> u32 {
    w.wait_for("Running", |e| match e {
        ExecEvent::Running {
            attempt: a,
            supervisor: Some(s),
            ..
        } if *a == AttemptId(attempt) => Some(s.pid),
        _ => None,
    })
    .await
}

/// The usage the `Exited` event of `attempt` reported.
async fn usage_of(w: &mut World, attempt: u64) -> qm_executor::Usage {
    let usage = w
        .wait_for("Exited", |e| match e {
            ExecEvent::Exited {
                attempt: a, usage, ..
            } if *a == AttemptId(attempt) => Some(*usage),
            _ => None,
        })
        .await;
    w.exec.acknowledge(&[AttemptId(attempt)]);
    usage.expect("a started attempt's usage")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_s_usage_is_its_own_though_its_supervisor_ran_an_earlier_one() {
    let mut w = World::new();
    // About a second of CPU, in a grandchild the shell waits for: counted through it.
    let busy = "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'";
    w.exec.start(sh(1, "job-busy", busy)).unwrap();
    let first = usage_of(&mut w, 1).await;
    assert!(first.cpu_millis >= 100, "{first:?}");
    assert!(first.peak_memory_bytes.is_some_and(|b| b > 0), "{first:?}");
    let supervisor = supervisor_of(&mut w, 1).await;
    // The next attempts go to the free supervisor of the first: each reports only its own.
    for attempt in 2..=3 {
        until("the supervisor waits free", || {
            w.exec.free_supervisors() == 1
        })
        .await;
        w.exec.start(sh(attempt, "job-idle", "true")).unwrap();
        let idle = usage_of(&mut w, attempt).await;
        assert_eq!(supervisor_of(&mut w, attempt).await, supervisor);
        assert!(
            idle.cpu_millis < first.cpu_millis / 4,
            "{idle:?} after {first:?}"
        );
    }
}
