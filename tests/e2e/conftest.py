"""Fixtures of the end-to-end tests.

* `server`: one `qm serve` per test module (tests use unique queue names and clean up their
  jobs, so they do not interfere); a module that needs a fresh server per test overrides it
  with a function-scoped fixture built by `start_server`.
* `batch`: a boto3 Batch client for `server`, signing as its admin (the key pair the server
  wrote to `<data-dir>/credentials`); `raw_batch`: the same without botocore's
  parameter validation, so invalid requests reach the server.
* `jobs`: submits a test's jobs and terminates the unfinished ones at teardown.

Every server started here is stopped, and its leftover job processes killed, at teardown.
"""

from __future__ import annotations

import subprocess

import pytest

from qm_e2e import Jobs, Server, ServerError, config_toml, qm_bin

_servers: list[Server] = []


def _check_binary() -> None:
    path = qm_bin()
    if not path.exists():
        pytest.exit(
            f"qm binary not found at {path}: build it with `cargo build -p qm-cli --bin qm` "
            "(scripts/e2e does) or set QM_BIN", returncode=1)
    try:
        r = subprocess.run([str(path), "serve", "--help"], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.exit(f"`{path} serve --help` could not run: {e!r}", returncode=1)
    if r.returncode != 0:
        pytest.exit(f"`{path} serve --help` failed (exit {r.returncode}); the server is not "
                    f"built into this binary yet:\n{r.stdout}{r.stderr}", returncode=1)


@pytest.fixture(scope="session")
def qm_binary():
    _check_binary()
    yield qm_bin()
    for s in _servers:
        s.close()


@pytest.fixture(scope="session")
def start_server(qm_binary, tmp_path_factory):
    """Factory: `start_server(config=None, name="qm", env=None, args=())` starts a server in a
    fresh directory, with `env` added to its environment and `args` to its command line;
    `config` is the TOML text or a function of that directory returning it (for configurations
    that name paths in it). Callers close the server (the session closes any that are left)."""

    def start(config=None, name: str = "qm", env: dict | None = None, args=()) -> Server:
        workdir = tmp_path_factory.mktemp(name)
        if callable(config):
            config = config(workdir)
        s = Server(workdir, config or config_toml(), name=name, env=env, args=args)
        _servers.append(s)
        try:
            s.start()
        except ServerError:
            s.close()
            raise
        return s

    return start


@pytest.fixture(scope="module")
def server(start_server, request):
    s = start_server(name=request.module.__name__.split(".")[-1])
    yield s
    s.close()


@pytest.fixture
def batch(server):
    return server.client()


@pytest.fixture
def raw_batch(server):
    return server.client(validate=False)


@pytest.fixture
def jobs(batch, server, tmp_path):
    j = Jobs(batch, server, tmp_path)
    yield j
    j.cleanup()
