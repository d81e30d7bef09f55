"""Fair sharing of idle capacity and groups of shares (issue 21) through boto3 against the real
`qm serve`: the scheduling policy's tags `qm:idle-assignment` / `qm:fair-reclaim`, the quota
shares' `qm:weight` / `qm:group`, and the group definitions of `PUT /qm/v1/queues/{q}/groups`.

Under FAIR_SHARE the waiting borrower whose weighted borrowed share would be lowest gets the
freed idle instance, even when another share's job waited longer; a group at its ceiling
borrows no more (GROUP_LIMIT_REACHED); `qm shares` shows the rules and each share's standing;
bad values are ClientExceptions naming the tag or field; everything survives a kill -9."""

import json
import re
import subprocess

import pytest
from botocore.exceptions import ClientError

from qm_e2e import (UNIT, ShareSpec, config_toml, error_of, make_queue, qm_bin, wait_for,
                    wait_status)


@pytest.fixture(scope="module")
def server(start_server):
    # Four instances: the queue's environment, every one of them usable.
    s = start_server(config=config_toml(count=4), name="fair_share")
    yield s
    s.close()


def shares_table(server, queue: str) -> str:
    out = subprocess.run([str(qm_bin()), "shares", "--queue", queue], env=server.cli_env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def fairness(server, queue: str) -> dict:
    status, _, body = server.signed("GET", "/qm/v1/usage")
    assert status == 200, body
    q = next(q for q in json.loads(body)["queues"] if q["jobQueue"] == queue)
    return q["fairness"]


def test_fair_share_gives_freed_capacity_to_the_lower_weighted_share_and_groups_cap_members(
        batch, raw_batch, jobs, server):
    # owner lends 2 instances; vision (weight 3) and nlp (weight 1) own one each and borrow.
    q = make_queue(batch, "fair", [
        ShareSpec("owner", "LEND", 2),
        ShareSpec("vision", "LEND_AND_BORROW", 1, tags={"qm:weight": "3"}),
        ShareSpec("nlp", "LEND_AND_BORROW", 1),
    ], env_max=4)

    # A value the policy tag does not take is refused, naming the tag and what it takes.
    with pytest.raises(ClientError) as e:
        batch.tag_resource(resourceArn=q.policy_arn, tags={"qm:idle-assignment": "ROUND_ROBIN"})
    code, message, status = error_of(e)
    assert (code, status) == ("ClientException", 400), (code, status, message)
    assert "qm:idle-assignment" in message and "FAIR_SHARE" in message, message
    with pytest.raises(ClientError) as e:
        batch.tag_resource(resourceArn=q.policy_arn, tags={"qm:fair-reclaim": "yes"})
    assert "qm:fair-reclaim" in error_of(e)[1], error_of(e)
    with pytest.raises(ClientError) as e:
        batch.tag_resource(resourceArn=q.shares["nlp"], tags={"qm:weight": "0"})
    assert "qm:weight" in error_of(e)[1], error_of(e)
    with pytest.raises(ClientError) as e:
        batch.tag_resource(resourceArn=q.shares["nlp"], tags={"qm:group": "research org"})
    assert "qm:group" in error_of(e)[1], error_of(e)
    assert fairness(server, q.name)["idleAssignment"] == "FIFO"

    batch.tag_resource(resourceArn=q.policy_arn, tags={"qm:idle-assignment": "FAIR_SHARE"})
    f = fairness(server, q.name)
    assert f["idleAssignment"] == "FAIR_SHARE" and f["fairReclaim"] is False, f
    assert {s["quotaShareName"]: s["weight"] for s in f["shares"]} == {
        "owner": 1, "vision": 3, "nlp": 1}, f

    # Fill the pool: vision and nlp each run one job on their own instance and one borrowed.
    v1 = jobs.sleeper(q, "vision", "v1")
    n1 = jobs.sleeper(q, "nlp", "n1")
    for j in (v1, n1):
        wait_status(batch, j, "RUNNING")
    v2 = jobs.sleeper(q, "vision", "v2")
    wait_status(batch, v2, "RUNNING")
    n2 = jobs.sleeper(q, "nlp", "n2")
    wait_status(batch, n2, "RUNNING")
    # nlp's job waits first, vision's after it: first come, first served would pick nlp's.
    n3 = jobs.sleeper(q, "nlp", "n3")
    wait_status(batch, n3, "RUNNABLE")
    v3 = jobs.sleeper(q, "vision", "v3")
    wait_status(batch, v3, "RUNNABLE")

    # An instance vision borrowed is freed: vision's weighted share after taking it (1 / 3
    # of what is lent) is below nlp's (2 / 1), so vision's younger job goes first.
    batch.terminate_service_job(jobId=v2, reason="free one borrowed instance")
    wait_status(batch, v3, "RUNNING", timeout=60)
    waiting = batch.describe_service_job(jobId=n3)
    assert waiting["status"] == "RUNNABLE", waiting["status"]
    # `qm explain` carries the server's reason whole, whatever it is.
    explained = subprocess.run([str(qm_bin()), "explain", n3], env=server.cli_env(),
                               capture_output=True, text=True, timeout=60)
    assert explained.returncode == 0, explained.stderr
    assert f"server:     {waiting['statusReason']}\n" in explained.stdout, explained.stdout
    f = fairness(server, q.name)
    by = {s["quotaShareName"]: s for s in f["shares"]}
    assert by["vision"]["weightedShare"] < by["nlp"]["weightedShare"], f
    assert by["vision"]["fairShare"][UNIT] > by["nlp"]["fairShare"][UNIT], f

    table = shares_table(server, q.name)
    assert "idle capacity: FAIR_SHARE, fair reclaim off" in table, table
    for head in ("WEIGHT", "GROUP", "WEIGHTED-SHARE", "FAIR-SHARE"):
        assert head in table, table

    # Groups: a bad definition is refused naming the field; a good one caps its members.
    for bad, field in ((
            {"groups": [{"name": "research", "limits": {UNIT: -1}}]}, f"groups[0].limits.{UNIT}"),
            ({"groups": [{"name": "research", "weight": 0}]}, "groups[0].weight"),
            ({"groups": [{"name": "a b"}]}, "groups[0].name"),
            ({"groups": [{"name": "r", "limits": {"ml.p5.48xlarge": 1}}]}, "groups[0].limits"),
            ({"groups": [{"name": "nlp"}]}, "also a quota share"),
            ({"groups": [{"name": "r", "shares": ["nlp"]}]}, "shares")):
        status, _, body = server.signed("PUT", f"/qm/v1/queues/{q.name}/groups", bad)
        assert status == 400, (status, body)
        assert field in json.loads(body)["message"], body
    # Only admins change groups.
    status, _, body = server.signed("PUT", f"/qm/v1/queues/{q.name}/groups",
                                    {"groups": []}, principal="fair-outsider")
    assert status == 403, (status, body)

    groups = {"groups": [{"name": "research", "limits": {UNIT: 3}, "weight": 2}]}
    status, _, body = server.signed("PUT", f"/qm/v1/queues/{q.name}/groups", groups)
    assert status == 200, body
    for share in ("vision", "nlp"):
        batch.tag_resource(resourceArn=q.shares[share], tags={"qm:group": "research"})
    f = fairness(server, q.name)
    assert f["groups"][0]["name"] == "research" and f["groups"][0]["limits"] == {UNIT: 3}, f
    assert sorted(f["groups"][0]["shares"]) == ["nlp", "vision"], f
    # vision and nlp hold 4 > 3: a lowered ceiling is reclaimed lazily (nobody is preempted),
    # but an instance nlp frees goes to nobody in the group while it is at its ceiling.
    batch.terminate_service_job(jobId=n2, reason="free an instance under the ceiling")
    blocked = wait_status(batch, n3, "RUNNABLE", timeout=60, reason_prefix="GROUP_LIMIT_REACHED")
    assert "group research" in blocked["statusReason"] and "limit of 3" in blocked["statusReason"], \
        blocked["statusReason"]
    assert batch.describe_service_job(jobId=v3)["status"] == "RUNNING"
    # Once n2's process is gone the group holds 3 of its 3.
    at_ceiling = re.compile(rf"^research\s+nlp,vision\s+2\s+{re.escape(UNIT)} 3/3\s", re.M)
    wait_for(lambda: at_ceiling.search(shares_table(server, q.name)), timeout=60,
             what="qm shares showing the group at its ceiling")

    # Everything survives a crash: tags, groups, and the core's rules replayed from them.
    server.kill9()
    server.start()
    batch = server.client()
    f = fairness(server, q.name)
    assert f["idleAssignment"] == "FAIR_SHARE", f
    assert {s["quotaShareName"]: (s["weight"], s.get("group")) for s in f["shares"]} == {
        "owner": (1, None), "vision": (3, "research"), "nlp": (1, "research")}, f
    status, _, body = server.signed("GET", f"/qm/v1/queues/{q.name}/groups")
    assert status == 200 and json.loads(body) == groups, body
    assert batch.describe_service_job(jobId=n3)["statusReason"].startswith("GROUP_LIMIT_REACHED")

    # Untagging the policy goes back to FIFO for every queue using it.
    batch.untag_resource(resourceArn=q.policy_arn, tagKeys=["qm:idle-assignment"])
    assert fairness(server, q.name)["idleAssignment"] == "FIFO"
    jobs.batch = batch
