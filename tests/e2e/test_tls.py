"""HTTPS: `qm serve --tls-cert --tls-key` with a certificate from a test CA made here with
openssl; boto3 trusts it with `verify=<the CA>` and refuses the server without it."""

from __future__ import annotations

import configparser
import http.client
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import ssl

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import SSLError

from qm_e2e import REGION, config_toml, free_port, qm_bin


def _openssl(*args: str, cwd) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"openssl {' '.join(args)} failed:\n{r.stderr}"


@pytest.fixture
def test_ca(tmp_path):
    """A CA and a server certificate for localhost and 127.0.0.1 that it signed."""
    if not shutil.which("openssl"):
        pytest.skip("openssl is needed to make the test CA")
    d = tmp_path / "tls"
    d.mkdir()
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.pem", "-days", "2", "-subj", "/CN=qm e2e test CA", cwd=d)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "srv.csr",
             "-subj", "/CN=localhost", cwd=d)
    (d / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "cert.pem", "-days", "2", "-extfile", "ext", cwd=d)
    return d


def test_boto3_reaches_an_https_server_through_a_test_ca_and_is_refused_without_it(tmp_path, test_ca):
    port = free_port()
    data = tmp_path / "data"
    (tmp_path / "config.toml").write_text(config_toml() + "[limits]\nheader_timeout_seconds = 2\n")
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen(
        [str(qm_bin()), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data),
         "--config", str(tmp_path / "config.toml"),
         "--tls-cert", str(test_ca / "cert.pem"), "--tls-key", str(test_ca / "key.pem")],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        url = f"https://127.0.0.1:{port}"
        trusted = ssl.create_default_context(cafile=str(test_ca / "ca.pem"))
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2, context=trusted) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, "the HTTPS server did not come up"
            time.sleep(0.2)
        assert f"listening on {url}" in (tmp_path / "server.log").read_text()

        profile = configparser.ConfigParser()
        profile.read(data / "credentials")
        keys = dict(aws_access_key_id=profile["qm-admin"]["aws_access_key_id"],
                    aws_secret_access_key=profile["qm-admin"]["aws_secret_access_key"])
        quick = Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5,
                       read_timeout=30)
        batch = boto3.client("batch", region_name=REGION, endpoint_url=url,
                             verify=str(test_ca / "ca.pem"), config=quick, **keys)
        arn = batch.create_scheduling_policy(
            name="tls-sp", quotaSharePolicy={"idleResourceAssignmentStrategy": "FIFO"})["arn"]
        arns = [p["arn"] for p in batch.list_scheduling_policies()["schedulingPolicies"]]
        assert arns == [arn]

        # Without the CA the certificate is not trusted: the client refuses the server.
        untrusting = boto3.client("batch", region_name=REGION, endpoint_url=url, config=quick,
                                  **keys)
        with pytest.raises(SSLError):
            untrusting.list_scheduling_policies()
        # qm trusts the CA of AWS_CA_BUNDLE, as the AWS CLI does, and nothing else.
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(AWS_SHARED_CREDENTIALS_FILE=str(data / "credentials"), AWS_PROFILE="qm-admin",
                   QM_ENDPOINT=url)
        r = subprocess.run([str(qm_bin()), "whoami"], capture_output=True, text=True, timeout=60,
                           env=dict(env, AWS_CA_BUNDLE=str(test_ca / "ca.pem")))
        assert r.returncode == 0 and "qm-admin" in r.stdout, r.stdout + r.stderr
        r = subprocess.run([str(qm_bin()), "whoami"], capture_output=True, text=True, timeout=60,
                           env=env)
        assert r.returncode != 0, r.stdout
        # A client that offers HTTP/2 settles on HTTP/1.1, where the header timeout holds.
        offering = ssl.create_default_context(cafile=str(test_ca / "ca.pem"))
        offering.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with offering.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                assert tls.selected_alpn_protocol() == "http/1.1"
        # A TLS client that sends nothing once its handshake is done is cut off too.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with trusted.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.settimeout(6)
                try:
                    assert tls.recv(1) == b"", "the server sent something to a silent client"
                except (ConnectionResetError, ssl.SSLError):
                    pass
        # Plain HTTP on the TLS port gets no HTTP answer (a TLS alert at most).
        with pytest.raises((urllib.error.URLError, OSError, http.client.HTTPException)):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)
        log.close()
    assert proc.returncode == 0, (tmp_path / "server.log").read_text()


def test_a_certificate_without_its_key_is_refused_naming_the_flag(tmp_path, test_ca):
    r = subprocess.run(
        [str(qm_bin()), "serve", "--listen", f"127.0.0.1:{free_port()}",
         "--data-dir", str(tmp_path / "data"), "--tls-cert", str(test_ca / "cert.pem")],
        capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "tls.key" in r.stderr and "--tls-key" in r.stderr, r.stderr
