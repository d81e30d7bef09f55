//! Upgrades: this build adopts the supervisors that earlier releases started. Each protocol
//! version keeps a transcript of what its supervisor says (`tests/fixtures/supervisor-protocol-
//! <n>.jsonl`); a fake supervisor replays it over a real socket, and the executor must adopt it,
//! hold its instance, and take its exit. A release that changes the protocol adds its own
//! transcript and keeps the older ones here.

use qm_executor::AttemptId;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;

use qm_executor::supervisor::{boot_id, Identity, OLDEST_ADOPTED, PROTOCOL, SUPERVISORS_DIR};
use qm_executor::{ExecEvent, Exit, Reconciled, Recorded};

use crate::world::World;

/// The transcript of protocol `version`, for a supervisor that is this test process.
fn transcript(version: u32, dir: &std::path::Path) -> Vec<String> {
    let me = Identity::of(std::process::id(), &boot_id()).unwrap();
    let path = format!(
        "{}/tests/fixtures/supervisor-protocol-{version}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .replace("$BOOT", &me.boot_id)
        .replace("$PID", &me.pid.to_string())
        .replace("$START", &me.start_time.to_string())
        .replace("$DIR", &dir.display().to_string())
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisors_of_every_adopted_protocol_version_are_adopted() {
    const { assert!(OLDEST_ADOPTED <= PROTOCOL) };
    for version in OLDEST_ADOPTED..=PROTOCOL {
        adopt_version(version).await;
    }
}

async fn adopt_version(version: u32) {
    let mut w = World::new();
    let data = w.dir.path().canonicalize().unwrap();
    let lines = transcript(version, &data);
    let socket = data.join(SUPERVISORS_DIR).join("41.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    // The fake supervisor: answers hello with the transcript's, then says it exited once the
    // server holds it, and waits for the acknowledgement.
    let fake = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        let mut hello = String::new();
        reader.read_line(&mut hello).unwrap();
        assert!(hello.contains("\"type\":\"hello\""), "{hello}");
        assert!(hello.contains("\"attempt\":41"), "{hello}");
        writeln!(writer, "{}", lines[0]).unwrap();
        let mut ack = String::new();
        writeln!(writer, "{}", lines[1]).unwrap();
        reader.read_line(&mut ack).unwrap();
        ack
    });
    let recorded = Recorded {
        attempt: AttemptId(41),
        job_id: "job-v1".into(),
        attempt_number: 2,
        pids: vec![std::process::id()],
        supervisor: Some(Identity::of(std::process::id(), &boot_id()).unwrap()),
        stopping: false,
    };
    let out = w.exec.reconcile(vec![recorded]).await;
    assert_eq!(
        out,
        vec![(AttemptId(41), Reconciled::Adopted { running: None })],
        "protocol {version}"
    );
    let outcome = w.exited(41).await;
    assert_eq!(
        outcome,
        Exit::Failed {
            reason: "Received status from SageMaker: AlgorithmError: process exited with code 5"
                .into(),
            retryable: true
        }
    );
    assert!(
        !w.seen
            .iter()
            .any(|e| matches!(e, ExecEvent::Running { .. })),
        "an adopted attempt is not reported running again"
    );
    let ack = tokio::task::spawn_blocking(move || fake.join().unwrap())
        .await
        .unwrap();
    assert_eq!(ack.trim(), r#"{"type":"ack"}"#, "protocol {version}");
    assert_eq!(w.exec.free("ml.g5.xlarge"), 2);
}
