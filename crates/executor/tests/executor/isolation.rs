//! Attempts under uids of their own (the server is root): a job cannot read the server's
//! files or another job's directory, nor signal the server or another job.

use qm_executor::AttemptId;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

use qm_executor::{Exit, JobUids};

use crate::world::{sh, World};

const UIDS: JobUids = JobUids {
    first: 0x7000_0000 + 4000,
    last: 0x7000_0000 + 4009,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_job_reaches_only_its_own_directories_and_processes() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: isolation needs the test to run as root");
        return;
    }
    let mut w = World::with(|cfg| cfg.isolation = Some(UIDS));
    let data = w.dir.path().to_path_buf();
    let db = data.join("qm.sqlite3");
    fs::write(&db, "the server's database").unwrap();
    fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();

    w.exec
        .start(sh(
            1,
            "other",
            "echo mine > $SM_OUTPUT_DIR/secret; sleep 60",
        ))
        .unwrap();
    let (pids, _, _) = w.running(1).await;
    let probe = format!(
        "id -u; \
         grep -q 'CapEff:.0000000000000000' /proc/self/status || echo HAS-CAPABILITIES; \
         grep -q 'CapPrm:.0000000000000000' /proc/self/status || echo HAS-CAPABILITIES; \
         [ \"$(id -G)\" = \"$(id -u)\" ] || echo HAS-GROUPS; \
         cat {db} && echo READ-DB; \
         ls {data} && echo LISTED-DATA; \
         cat {data}/jobs/other/output/secret && echo READ-OTHER; \
         kill -0 {other} && echo SIGNALLED-OTHER; \
         kill -0 $PPID && echo SIGNALLED-SERVER; \
         echo written > $SM_OUTPUT_DIR/mine && echo WROTE-OWN; \
         echo HOME=$HOME",
        db = db.display(),
        data = data.display(),
        other = pids[0],
    );
    w.exec.start(sh(2, "probe", &probe)).unwrap();
    assert_eq!(w.exited(2).await, Exit::Succeeded);
    let job = w.exec.job_dir("probe");
    let out = fs::read_to_string(job.join("attempts/1/stdout.log")).unwrap();
    let uid: u32 = out.lines().next().unwrap().parse().unwrap();
    assert!(UIDS.contains(uid), "runs as {uid}:\n{out}");
    for refused in [
        "HAS-CAPABILITIES",
        "HAS-GROUPS",
        "READ-DB",
        "LISTED-DATA",
        "READ-OTHER",
        "SIGNALLED-OTHER",
        "SIGNALLED-SERVER",
    ] {
        assert!(!out.contains(refused), "{refused}:\n{out}");
    }
    assert!(out.contains("WROTE-OWN"), "{out}");
    assert!(
        out.contains(&format!("HOME={}", job.join("work").display())),
        "{out}"
    );

    // The job directory is root's, traversable only; what the job writes is its uid's.
    let meta = fs::metadata(&job).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o711));
    let work = fs::metadata(job.join("work")).unwrap();
    assert_eq!((work.uid(), work.mode() & 0o777), (uid, 0o700));
    assert_eq!(fs::metadata(job.join("attempts")).unwrap().uid(), 0);
    w.exec.stop(AttemptId(1));
    w.exited(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_left_by_an_attempt_does_not_lead_the_next_one_outside_its_directory() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: isolation needs the test to run as root");
        return;
    }
    let mut w = World::with(|cfg| cfg.isolation = Some(UIDS));
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().display();
    // The first attempt points its output and a checkpoint path at a root-owned directory.
    let script =
        format!("rm -rf $SM_OUTPUT_DIR && ln -s {target} $SM_OUTPUT_DIR; ln -s {target} ckpt");
    w.exec.start(sh(1, "linker", &script)).unwrap();
    assert_eq!(w.exited(1).await, Exit::Succeeded);
    let mut again = sh(
        2,
        "linker",
        "echo ok > $SM_OUTPUT_DIR/x; echo $SM_CHECKPOINT_DIR",
    );
    again.attempt_number = 2;
    again.checkpoint_path = Some("ckpt/sub".into());
    w.exec.start(again).unwrap();
    assert_eq!(w.exited(2).await, Exit::Succeeded);
    assert_eq!(
        fs::read_dir(outside.path()).unwrap().count(),
        0,
        "something was made outside"
    );
    let job = w.exec.job_dir("linker");
    assert!(fs::symlink_metadata(job.join("output")).unwrap().is_dir());
    let out = fs::read_to_string(job.join("attempts/2/stdout.log")).unwrap();
    assert_eq!(
        out.trim(),
        job.join("checkpoints").display().to_string(),
        "falls back"
    );
}
