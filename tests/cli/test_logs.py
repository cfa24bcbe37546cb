"""`trainstack logs` against a local Kubernetes API server: lines prefixed by role and rank,
--rank, --tail, --since, --json and --follow."""

from __future__ import annotations

import json

from support.fake_cluster import healthy, pod, run

from cli.analysis import phases


def test_logs_are_prefixed_by_role_and_rank(tmp_path):
    code, out = run(healthy(), tmp_path, "logs", "fsdp")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == '[worker-0] metrics {"event": "start", "resumed_from": 0}'
    assert "[worker-1] rank 1 up" in lines
    code, out = run(healthy(), tmp_path, "logs", "fsdp", "--rank", "1", "--tail", "1")
    assert out.splitlines() == ["[worker-1] NCCL INFO Using network Libfabric"]


def test_logs_since_and_json(tmp_path):
    c = healthy()
    c.logs["fsdp-worker-1"] = "900|old line\n30|recent line"
    _, out = run(c, tmp_path, "logs", "fsdp", "--rank", "1", "--since", "1m", "--json")
    assert [json.loads(x) for x in out.splitlines()] == [
        {"pod": "fsdp-worker-1", "role": "worker-1", "line": "recent line"}
    ]


def test_logs_follow_streams_every_pod(tmp_path):
    c = healthy()
    c.logs = {"fsdp-worker-0": "a\nb\nc", "fsdp-worker-1": "x\ny"}
    code, out = run(c, tmp_path, "logs", "fsdp", "--follow")
    assert code == 0
    assert sorted(out.splitlines()) == sorted(
        ["[worker-0] a", "[worker-0] b", "[worker-0] c", "[worker-1] x", "[worker-1] y"]
    )
    assert [ln for ln in out.splitlines() if ln.startswith("[worker-0]")] == [
        "[worker-0] a",
        "[worker-0] b",
        "[worker-0] c",
    ]


def test_ray_pods_are_prefixed_head_and_worker():
    head = pod("r-head-abcde", "r", "gpu", ray="head")
    worker = pod("r-gpu-worker-xk2p9", "r", "gpu", ray="worker")
    assert (phases.pod_role(head), phases.pod_role(worker)) == ("head", "worker-xk2p9")
