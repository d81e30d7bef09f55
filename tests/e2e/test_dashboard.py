"""The web dashboard (`qm serve` at `/`), driven by headless Chromium against the real server.

The AWS demo's queue is brought to a state with something to see in every panel: QS1 borrows
QS2's idle instance, QS2 reclaims it (a preemption), QS2's job goes away and QS1 borrows again,
and a third QS1 job waits with NOTHING_TO_BORROW. Chromium loads the page, lets its scripts
run, and dumps the DOM, which the test reads through the page's `data-testid` attributes. A
screenshot of each page is kept under `target/e2e-artifacts/` for people to look at.

The server asks who is looking: Chromium signs in the way automation does, with the key pair
in the URL fragment (`#key=...&secret=...&view=...`), which the page trades for a session
cookie and removes. Without keys the page shows its sign-in form and nothing else.

Needs Debian's `chromium` (or `$CHROMIUM`): without it the test is skipped, unless
`QM_REQUIRE_CHROMIUM` is set (CI), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
from html.parser import HTMLParser

import pytest

from qm_e2e import (REPO, UNIT, Jobs, ShareSpec, config_toml, demo_setup, make_queue, send,
                    wait_for, wait_preempted, wait_status)

ARTIFACTS = REPO / "target" / "e2e-artifacts"
# The history is sampled five times a second here (10 s by default), so that a chart has
# points within the test; a long grace keeps a preempted attempt that ignores SIGTERM
# stopping while the page is loaded.
CONFIG = config_toml(grace=10) + "[scheduler]\nhistory_sample_seconds = 0.2\n"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d$")


@pytest.fixture(scope="module")
def server(start_server):
    s = start_server(config=CONFIG, name="test_dashboard")
    yield s
    s.close()
# Virtual time Chromium gives the page before dumping: the first refresh needs well under a
# second; a few more show that the page keeps refreshing without breaking.
BUDGET_MS = 8000


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium")
    if path:
        return path
    message = ("headless Chromium is needed for the dashboard test: `apt-get install -y chromium` "
               "(or set CHROMIUM=/path/to/chromium)")
    if os.environ.get("QM_REQUIRE_CHROMIUM"):
        pytest.fail(f"QM_REQUIRE_CHROMIUM is set but {message}")
    pytest.skip(f"chromium not installed; {message}")


def browse(browser: str, url: str, profile, *, screenshot=None) -> str:
    """Load `url` in headless Chromium and return the DOM after the scripts ran (or, with
    `screenshot`, write a 1280-px-wide screenshot instead)."""
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
           f"--virtual-time-budget={BUDGET_MS}"]
    if screenshot:
        cmd += [f"--screenshot={screenshot}", "--window-size=1280,1600"]
    else:
        cmd += ["--dump-dom"]
    r = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"chromium failed on {url} (exit {r.returncode}):\n{r.stderr[-3000:]}"
    return r.stdout


# -- reading the DOM ----------------------------------------------------------------------


class Node:
    def __init__(self, tag: str, attrs: dict):
        self.tag, self.attrs, self.children = tag, attrs, []

    def text(self) -> str:
        return " ".join("".join(c if isinstance(c, str) else " " + c.text() + " "
                                for c in self.children).split())

    def all(self, testid: str | None = None, **attrs) -> list["Node"]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if ((testid is None or c.attrs.get("data-testid") == testid)
                        and all(c.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())):
                    out.append(c)
                out.extend(c.all(testid, **attrs))
        return out

    def one(self, testid: str, **attrs) -> "Node":
        found = self.all(testid, **attrs)
        assert len(found) == 1, f"expected one [data-testid={testid}] {attrs}, found {len(found)}"
        return found[0]


class Tree(HTMLParser):
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
            "track", "wbr"}

    def __init__(self, html: str):
        super().__init__()
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: (v if v is not None else "") for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].children.append(data)


def page(browser, url, profile) -> Node:
    return Tree(browse(browser, url, profile)).root


def signed_in(server, view: str = "", principal: str | None = None, secret: str | None = None) -> str:
    """The dashboard's URL that signs in as `principal` (default: the admin) and shows `view`
    (a route such as `/queue/NAME`); `secret` replaces the right one."""
    keys = server.keys(principal)
    fragment = {"key": keys.access_key_id, "secret": secret or keys.secret_access_key}
    if view:
        fragment["view"] = view
    return f"{server.url}/#{urllib.parse.urlencode(fragment)}"


def shown(node: Node) -> bool:
    return node.attrs.get("hidden") is None


def share_numbers(dom: Node, share: str) -> dict:
    row = dom.one("share-row", data_share=share)
    return {k: row.one(f"share-{k}").text() for k in ("entitled", "own", "borrowed", "lent", "runnable")}


# -- the test -----------------------------------------------------------------------------


def test_the_dashboard_shows_shares_the_waiting_reason_and_a_preempted_jobs_timeline(
        server, batch, jobs, tmp_path):
    browser = chromium()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    q = demo_setup(batch, "dash")

    # QS1: high on its own instance, med borrowing QS2's, low waiting (QS3 is RESERVE).
    high = jobs.sleeper(q, "QS1", "qs1_job_high", priority=3)
    med = jobs.sleeper(q, "QS1", "qs1_job_med", priority=2)
    low = jobs.sleeper(q, "QS1", "qs1_job_low", priority=1)
    wait_status(batch, high, "RUNNING")
    wait_status(batch, med, "RUNNING")
    jobs.wait_started("qs1_job_med")
    # QS2 reclaims its instance from med...
    qs2 = jobs.sleeper(q, "QS2", "qs2_job_1", priority=1)
    wait_preempted(batch, med)
    wait_status(batch, qs2, "RUNNING")
    wait_for(lambda: "stoppedAt" in batch.describe_service_job(jobId=med)
             ["preemptionSummary"]["recentPreemptedAttempts"][0],
             what="med's preempted attempt to stop")
    # ...and gives it back: med borrows again, low keeps waiting.
    # Markup in a reason must come out as text.
    batch.terminate_service_job(jobId=qs2, reason="<i>done</i> & gone")
    wait_status(batch, qs2, "FAILED")
    wait_status(batch, med, "RUNNING")
    wait_status(batch, low, "RUNNABLE", reason_prefix="NOTHING_TO_BORROW")

    def usage_settled():
        status, _, body = server.signed("GET", "/qm/v1/usage")
        assert status == 200, body
        queues = json.loads(body)["queues"]
        shares = {s["quotaShareName"]: s for s in next(x for x in queues if x["jobQueue"] == q.name)["shares"]}
        return shares if shares["QS1"]["borrowed"] == 1 and shares["QS2"]["stopping"] == 0 else None

    wait_for(usage_settled, what="QS1 to borrow QS2's instance again")

    # The queue page.
    url = signed_in(server, f"/queue/{q.name}")
    shot = ARTIFACTS / "dashboard.png"
    browse(browser, url, tmp_path / "profile-shot", screenshot=shot)
    print(f"\n[e2e] dashboard screenshot: {shot}")
    dump = browse(browser, url, tmp_path / "profile")
    (ARTIFACTS / "dashboard.html").write_text(dump)
    dom = Tree(dump).root

    assert dom.one("error").attrs.get("hidden") is not None, dom.one("error").text()
    assert not shown(dom.one("login")), dom.one("login").text()
    assert dom.one("whoami").text().startswith("qm-admin"), dom.one("whoami").text()
    assert dom.one("last-refresh").text().startswith("Updated"), dom.one("last-refresh").text()
    assert dom.one("queue-select").all(None, value=q.name), "the queue is not in the selector"
    assert share_numbers(dom, "QS1") == {"entitled": "1", "own": "1", "borrowed": "1", "lent": "0", "runnable": "1"}
    assert share_numbers(dom, "QS2") == {"entitled": "1", "own": "0", "borrowed": "0", "lent": "1", "runnable": "0"}
    assert share_numbers(dom, "QS3") == {"entitled": "1", "own": "0", "borrowed": "0", "lent": "0", "runnable": "0"}
    assert "is-borrowing" in dom.one("share-row", data_share="QS1").attrs["class"]
    assert "is-lending" in dom.one("share-row", data_share="QS2").attrs["class"]

    # The history: QS1 borrowed and was preempted once, for QS2, which lent; QS3 lent nothing.
    hist = {r.attrs["data-share"]: r for r in dom.one("history-list").all("history-row")}
    assert set(hist) == {"QS1", "QS2", "QS3"}, set(hist)
    assert hist["QS1"].one("history-borrowed").text() != "0 h"
    assert hist["QS1"].one("history-preempted").text() == "1"
    assert hist["QS2"].one("history-caused").text() == "1"
    assert hist["QS2"].one("history-lent").text() != "0 h"
    assert hist["QS3"].one("history-lent").text() == "0 h"

    # The waiting job: at the head of QS1 and in the jobs table, with its reason code.
    head = dom.one("share-heads").one("snapshot-row")
    assert head.attrs["data-job-id"] == low
    assert head.one("reason-code").text() == "NOTHING_TO_BORROW"
    rows = {r.attrs["data-job-id"]: r for r in dom.one("jobs-table").all("job-row")}
    assert set(rows) == {high, med, low, qs2}
    assert rows[low].attrs["data-status"] == "RUNNABLE"
    assert rows[low].one("reason-code").text() == "NOTHING_TO_BORROW"
    assert [c.text() for c in rows[low].all(None) if c.tag == "td"][:4] == ["qs1_job_low", "QS1", "1", "RUNNABLE"]
    assert rows[qs2].attrs["data-status"] == "FAILED"
    reason = rows[qs2].one("reason")
    assert "<i>done</i> & gone" in reason.text() and not [n for n in reason.all(None) if n.tag == "i"]
    assert rows[med].one("job-link").attrs["href"] == f"#/job/{med}"
    # Whose capacity each running job is on: med borrows QS2's instance, high runs on QS1's.
    assert rows[med].one("reason-code").text() == "BORROWED"
    assert "borrowed from QS2" in rows[med].one("reason").text()
    assert rows[high].one("reason-code").text() == "OWN_CAPACITY"

    # The job page of the preempted job: one preempted attempt, then the one running now.
    url = signed_in(server, f"/job/{med}")
    shot = ARTIFACTS / "dashboard-job.png"
    browse(browser, url, tmp_path / "profile-shot", screenshot=shot)
    print(f"[e2e] job page screenshot: {shot}")
    dump = browse(browser, url, tmp_path / "profile")
    (ARTIFACTS / "dashboard-job.html").write_text(dump)
    dom = Tree(dump).root
    assert dom.one("view-job").attrs.get("hidden") is None
    assert "qs1_job_med" in dom.one("job-title").text()
    # Who submitted it: the principal that signed the submit (the demo submits as the admin).
    assert "Submitted by qm-admin" in dom.one("job-facts").text()
    bars = dom.one("timeline").all("attempt-bar")
    assert [b.attrs["data-preempted"] for b in bars] == ["true", "false"]
    assert "Preempted: capacity reclaimed by quota share QS2" in bars[0].text()
    attempts = dom.one("attempts-table").all("attempt-row")
    assert [a.attrs["data-preempted"] for a in attempts] == ["true", "false"]
    assert "Preempted: capacity reclaimed by quota share QS2" in attempts[0].one("reason").text()
    # How the attempt after the preemption resumed: a sleeper reports no steps, so unknown.
    resumes = dom.one("resumes-table").all("resume-row")
    assert [r.attrs["data-outcome"] for r in resumes] == ["unknown"], [r.text() for r in resumes]
    # What the preempted attempt used (its processes, as the kernel counted them).
    [used] = dom.one("usage-table").all("usage-row")
    assert used.one("usage-cpu").text().endswith(" s"), used.text()
    assert used.one("usage-memory").text().endswith(("KiB", "MiB")), used.text()


def test_the_dashboard_without_keys_shows_the_sign_in_form_and_no_data(server, batch, tmp_path):
    browser = chromium()
    q = make_queue(batch, "dash-nokeys", [ShareSpec("Q1", "RESERVE", 1)], env_max=1)
    dump = browse(browser, f"{server.url}/#/queue/{q.name}", tmp_path / "profile")
    (ARTIFACTS / "dashboard-login.html").parent.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "dashboard-login.html").write_text(dump)
    dom = Tree(dump).root
    login = dom.one("login")
    assert shown(login)
    assert login.one("login-key").tag == "input"
    assert login.one("login-secret").attrs.get("type") == "password"
    assert [b.text() for b in login.all(None) if b.tag == "button"] == ["Sign in"]
    assert not shown(dom.one("login-error")), dom.one("login-error").text()
    # Nothing the server knows is on the page.
    assert not shown(dom.one("view-queue")) and not shown(dom.one("view-job"))
    assert not dom.all("share-row") and not dom.all("job-row") and not dom.all("history-row")
    assert not [o for o in dom.one("queue-select").all(None) if o.tag == "option"]
    assert q.name not in dump
    assert dom.one("whoami").text() == ""
    assert not shown(dom.one("error")), dom.one("error").text()


def test_the_dashboard_signed_in_by_fragment_shows_who_and_the_data(server, batch, tmp_path):
    browser = chromium()
    q = make_queue(batch, "dash-who", [ShareSpec("Q1", "RESERVE", 1)], env_max=1)
    dom = page(browser, signed_in(server, f"/queue/{q.name}", principal="alice"), tmp_path / "profile")
    assert not shown(dom.one("login")), dom.one("login").text()
    assert dom.one("whoami").text() == "alice", dom.one("whoami").text()
    assert shown(dom.one("sign-out")) and dom.one("sign-out").text() == "Sign out"
    assert dom.one("error").attrs.get("hidden") is not None, dom.one("error").text()
    assert [r.attrs["data-share"] for r in dom.all("share-row")] == ["Q1"]
    assert dom.one("queue-select").all(None, value=q.name)


def test_the_dashboard_with_a_wrong_secret_in_the_fragment_says_so_at_the_sign_in_form(
        server, tmp_path):
    browser = chromium()
    dom = page(browser, signed_in(server, secret="not-the-secret"), tmp_path / "profile")
    assert shown(dom.one("login"))
    assert "secret access key" in dom.one("login-error").text(), dom.one("login-error").text()
    assert not shown(dom.one("view-queue"))


def usage_of(server, queue: str) -> dict:
    status, _, body = server.signed("GET", "/qm/v1/usage")
    assert status == 200, body
    return next(x for x in json.loads(body)["queues"] if x["jobQueue"] == queue)


def test_the_dashboard_shows_the_pool_who_lends_to_whom_filters_and_recent_history(
        server, batch, jobs, tmp_path):
    browser = chromium()
    q = make_queue(batch, "dash-flows", [
        ShareSpec("lender", "LEND_AND_BORROW", 2),
        ShareSpec("borrower", "LEND_AND_BORROW", 1, borrow_limit=100),
        ShareSpec("keeper", "RESERVE", 0),
    ], env_max=3)
    (tmp_path / "alice").mkdir()
    alice = Jobs(server.client(principal="alice"), server, tmp_path / "alice")
    try:
        # The borrower runs on its own instance and on one of the lender's two idle ones; the
        # lender (alice's job) runs on the other; a third borrower job finds nothing to borrow.
        b_own = jobs.sleeper(q, "borrower", "b_own")
        wait_status(batch, b_own, "RUNNING")
        b_more = jobs.sleeper(q, "borrower", "b_more")
        wait_status(batch, b_more, "RUNNING")
        l_run = alice.sleeper(q, "lender", "l_run")
        wait_status(batch, l_run, "RUNNING")
        b_wait = jobs.sleeper(q, "borrower", "b_wait")
        wait_status(batch, b_wait, "RUNNABLE")

        usage = usage_of(server, q.name)
        assert usage["pool"] == [{"capacityUnit": UNIT, "environmentMax": 3, "physical": 3,
                                  "used": 3, "free": 0}], usage["pool"]
        assert usage["flows"] == [{"capacityUnit": UNIT, "lender": "lender",
                                   "borrower": "borrower", "instances": 1}], usage["flows"]
        conf = {r["quotaShareName"]: (r["strategy"], r["borrowLimit"], r["inSharePreemption"])
                for r in usage["shares"]}
        assert conf["borrower"] == ("LEND_AND_BORROW", 100, False), conf
        assert conf["keeper"][0] == "RESERVE", conf

        def history_has_borrowing():
            status, _, body = server.signed("GET", f"/qm/v1/history?jobQueue={q.name}&window=hour")
            assert status == 200, body
            h = json.loads(body)
            series = {s["quotaShareName"]: s for s in h["shares"]}
            return h if len(h["at"]) >= 3 and max(series["borrower"]["borrowed"]) >= 1 else None

        hist = wait_for(history_has_borrowing, what="the history to sample the borrowing")
        assert hist["sampleIntervalMs"] == 200 and max(hist["queueDepth"]) >= 1, hist
        # The history is guarded like the usage: nothing without a signature or a session.
        status, _, body = send("GET", f"{server.url}/qm/v1/history?jobQueue={q.name}")
        assert status == 403 and b"MissingAuthenticationToken" in body, (status, body)

        dom = page(browser, signed_in(server, f"/queue/{q.name}"), tmp_path / "profile")
        assert dom.one("error").attrs.get("hidden") is not None, dom.one("error").text()
        # The pool: nothing is free.
        pool = dom.one("pool-row", data_unit=UNIT)
        assert [pool.one(k).text() for k in ("pool-limit", "pool-used", "pool-free")] == ["3", "3", "0"]
        # Who lends to whom: the lender's row has 1 in the borrower's column.
        cell = dom.one("flows").one("flow-cell", data_lender="lender", data_borrower="borrower")
        assert cell.text() == "1" and cell.attrs["data-unit"] == UNIT
        # Each share's configuration.
        keeper = dom.one("share-row", data_share="keeper").one("share-conf").text()
        assert "RESERVE" in keeper and "never lends" in keeper, keeper
        borrower = dom.one("share-row", data_share="borrower")
        assert borrower.one("share-borrow-limit").text() == "100%"
        assert borrower.one("share-preemption").text() == "off"
        # The recent history: the borrower's chart has points and its borrowing. (The page asks
        # for the history again: points are aligned to its own `until`, so three samples the
        # test saw may fall into two points by then.)
        chart = dom.one("recent-share", data_share="borrower").one("recent-chart")
        assert int(chart.attrs["data-points"]) >= 2 and float(chart.attrs["data-max-borrowed"]) >= 1
        assert [n for n in chart.all(None) if n.tag == "rect"], "the chart draws no bar"
        queue_chart = dom.one("recent-queue").one("recent-queue-chart")
        assert int(queue_chart.attrs["data-points"]) >= 2
        assert float(dom.one("recent-depth").text()) >= 1

        def rows(view: str) -> list[str]:
            d = page(browser, signed_in(server, f"/queue/{q.name}?{view}"), tmp_path / "profile")
            assert d.one("error").attrs.get("hidden") is not None, d.one("error").text()
            return [r.attrs["data-job-id"] for r in d.all("job-row")]

        assert set(rows("")) == {b_own, b_more, l_run, b_wait}
        assert rows("share=lender") == [l_run]
        assert rows("q=B_WA") == [b_wait], "the search ignores case"
        assert rows("status=RUNNABLE") == [b_wait]
        assert rows("submitter=alice") == [l_run]
        assert set(rows("share=borrower&status=RUNNING")) == {b_own, b_more}
        # By wait: the job still waiting has waited longest.
        assert rows("sort=wait")[0] == b_wait
    finally:
        alice.cleanup()


def test_the_pool_says_what_is_idle_while_jobs_wait_and_why(server, batch, jobs, tmp_path):
    """Issue 20: free capacity a waiting job fits is the sign a policy wastes the cluster. A
    RESERVE share's idle instance is never lent, so a borrower's job waits beside it: the usage,
    the gauge and the dashboard's pool say so, with the cause and the job to explain."""
    browser = chromium()
    q = make_queue(batch, "dash-idle", [ShareSpec("keeper", "RESERVE", 1),
                                        ShareSpec("eager", "LEND_AND_BORROW", 1, borrow_limit=100)],
                   env_max=2)
    run = jobs.sleeper(q, "eager", "eager_run")
    wait_status(batch, run, "RUNNING")
    waiting = jobs.sleeper(q, "eager", "eager_wait")
    wait_status(batch, waiting, "RUNNABLE", reason_prefix="NOTHING_TO_BORROW")

    idle = usage_of(server, q.name)["idleWhileWaiting"]
    assert idle == [{"capacityUnit": UNIT, "free": 1, "idle": 1, "cause": "reserve",
                     "jobId": waiting, "jobName": "eager_wait"}], idle
    status, _, body = server.signed("GET", "/metrics")
    assert status == 200, body
    series = (f'qm_idle_while_waiting_instances{{job_queue="{q.name}",instance_type="{UNIT}",'
              f'cause="reserve"}} 1')
    assert series in body.decode(), body.decode()[:3000]
    assert (f'qm_idle_while_waiting_instances{{job_queue="{q.name}",instance_type="{UNIT}",'
            f'cause="borrow_limit"}} 0') in body.decode()

    dom = page(browser, signed_in(server, f"/queue/{q.name}"), tmp_path / "profile")
    cell = dom.one("pool-row", data_unit=UNIT).one("pool-idle")
    assert cell.attrs["data-cause"] == "reserve" and cell.text().startswith("1 ("), cell.text()
    assert cell.one("job-link").text() == "eager_wait"


def test_a_preemption_names_the_job_it_was_for_and_the_stopping_attempt_shows_in_the_bar(
        server, batch, jobs, tmp_path):
    browser = chromium()
    q = make_queue(batch, "dash-inshare",
                   [ShareSpec("Q1", "RESERVE", 1, in_share_preemption="ENABLED")], env_max=1)
    low = jobs.sleeper(q, "Q1", "patient_job", priority=1, ignore_sigterm=True)
    wait_status(batch, low, "RUNNING")
    jobs.wait_started("patient_job")
    urgent = jobs.sleeper(q, "Q1", "urgent_job", priority=5)
    wait_preempted(batch, low)
    # The preempted attempt ignores SIGTERM: it holds its instance through the grace period.
    wait_for(lambda: usage_of(server, q.name)["shares"][0]["stopping"] == 1,
             what="the preempted attempt to be stopping")
    dom = page(browser, signed_in(server, f"/queue/{q.name}"), tmp_path / "profile")
    # The grace period (10 s) outlasts loading the page.
    row = dom.one("share-row", data_share="Q1")
    assert row.all("seg-stopping"), "the stopping instance is not marked in the bar"
    assert row.one("share-stopping").text() == "1"
    wait_status(batch, urgent, "RUNNING", timeout=60)

    dom = page(browser, signed_in(server, f"/job/{low}"), tmp_path / "profile")
    reason = dom.one("attempts-table").all("attempt-row")[0].one("reason")
    link = reason.one("reason-job")
    assert link.text() == "urgent_job", reason.text()
    assert link.attrs["href"] == f"#/job/{urgent}"
    # Times are ISO 8601 with the UTC offset.
    facts = dom.one("job-facts")
    dts = [n.text() for n in facts.all(None) if n.tag == "dt"]
    dds = [n.text() for n in facts.all(None) if n.tag == "dd"]
    submitted = dds[dts.index("Submitted")]
    assert ISO.match(submitted), submitted


def test_the_dashboard_shows_each_share_s_weighted_and_fair_share_and_the_groups(
        server, batch, jobs, tmp_path):
    """Issue 21: under FAIR_SHARE the dashboard says how idle capacity is assigned, each share's
    weight, group, weighted borrowed share and fair share, and each group's usage against its
    limit."""
    browser = chromium()
    q = make_queue(batch, "dash-fair", [
        ShareSpec("owner", "LEND", 1),
        ShareSpec("vision", "LEND_AND_BORROW", 1, tags={"qm:weight": "3", "qm:group": "research"}),
    ], env_max=2)
    batch.tag_resource(resourceArn=q.policy_arn, tags={"qm:idle-assignment": "FAIR_SHARE"})
    status, _, body = server.signed("PUT", f"/qm/v1/queues/{q.name}/groups",
                                    {"groups": [{"name": "research", "limits": {UNIT: 2}, "weight": 2}]})
    assert status == 200, body
    for name in ("v1", "v2"):
        wait_status(batch, jobs.sleeper(q, "vision", name), "RUNNING")

    dom = page(browser, signed_in(server, f"/queue/{q.name}"), tmp_path / "profile")
    assert dom.one("idle-assignment-mode").text() == "FAIR_SHARE"
    fair = dom.one("share-row", data_share="vision").one("share-fairness").text()
    assert "weight 3" in fair and "group research" in fair, fair
    standing = next(s for s in usage_of(server, q.name)["fairness"]["shares"]
                    if s["quotaShareName"] == "vision")
    shown_share = dom.one("share-row", data_share="vision").one("share-weighted").text()
    assert shown_share == f"{standing['weightedShare']:.2f}", (shown_share, standing)
    assert dom.one("share-row", data_share="vision").one("share-fair").text() != "—"
    group = dom.one("group-row", data_group="research")
    assert group.one("group-used").text() == f"{UNIT} 2/2", group.text()
