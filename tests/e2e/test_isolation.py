"""A job cannot hurt the server or other jobs (issue 13): a job that kills its server is
queued again for free only `[executor] max_lost_attempts` times in a row; the next lost
attempt FAILS it, and the other jobs run."""

import time

import pytest

from qm_e2e import ServerError, ShareSpec, config_toml, make_queue, wait_status

MAX_LOST = 2


@pytest.fixture
def server(start_server):
    """A server of its own: the hostile job kills it."""
    config = config_toml().replace('kind = "local"\n', f'kind = "local"\nmax_lost_attempts = {MAX_LOST}\n')
    s = start_server(config=config, name="isolation")
    yield s
    s.close()


def test_a_job_that_kills_its_server_ends_failed_after_max_lost_attempts_and_others_run(
        server, jobs, tmp_path):
    batch = server.client()
    jobs.batch = batch
    q = make_queue(batch, "hostile", [ShareSpec("H", "RESERVE", 1), ShareSpec("O", "RESERVE", 1)],
                   env_max=2)
    progress = tmp_path / "killer.progress"
    killer = jobs.submit(q, "H", "killer", "kill_parent.py", env={"PROGRESS_FILE": str(progress)})
    # The server dies under the job; each restart finds the attempt lost. At most
    # MAX_LOST + 1 restarts later the job is FAILED and the server stays up.
    restarts = 0
    while True:
        deadline = time.monotonic() + 60
        while server.proc.poll() is None and time.monotonic() < deadline:
            status = batch.describe_service_job(jobId=killer)["status"]
            if status == "FAILED":
                break
            time.sleep(0.2)
        if server.proc.poll() is None:
            break
        assert restarts <= MAX_LOST, f"the server died {restarts + 1} times:\n{server.log_tail()}"
        restarts += 1
        try:
            server.restart()
        except ServerError:
            # Killed again before it answered /healthz: the job started at once.
            assert server.proc.returncode == -9, server.log_tail()
            continue
        batch = server.client()
        jobs.batch = batch
    job = wait_status(batch, killer, "FAILED")
    assert restarts == MAX_LOST + 1, restarts
    assert f"lost {MAX_LOST + 1} times in a row" in job["statusReason"], job["statusReason"]
    assert f"max_lost_attempts ({MAX_LOST})" in job["statusReason"], job["statusReason"]
    starts = [line for line in progress.read_text().splitlines() if line.startswith("start ")]
    assert len(starts) == MAX_LOST + 1, progress.read_text()
    # Everything else runs: another share's job succeeds on the same server.
    other = jobs.submit(q, "O", "other", "exit_code.py", env={"EXIT_CODES": "0"})
    wait_status(batch, other, "SUCCEEDED")
    assert server.proc.poll() is None
