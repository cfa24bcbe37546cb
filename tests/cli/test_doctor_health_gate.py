"""`trainstack doctor` on the stack's health gate: which of a gated group's nodes are still burning in
and which failed, with the severity and the result the gate wrote on the node."""

from __future__ import annotations

import json

from support.fake_cluster import healthy, run

from conventions import (
    HEALTH_FAILED_TAINT_KEY,
    HEALTH_LABEL,
    HEALTH_MODE_LABEL,
    HEALTH_RESULT_ANNOTATION,
    HEALTH_STARTUP_TAINT_KEY,
)

GATE = "node health gate"


def findings(c, tmp_path) -> dict[str, dict]:
    _, out = run(c, tmp_path, "doctor", "--json")
    return {x["name"]: x for x in json.loads(out)["checks"]}


def gated(c):
    for n in c.nodes[1:]:
        n["metadata"]["labels"][HEALTH_MODE_LABEL] = "burnIn"
    return c


def test_nodes_that_passed_pass_and_a_cluster_without_a_gate_has_no_finding(tmp_path):
    assert GATE not in findings(healthy(), tmp_path)
    c = gated(healthy())
    for n in c.nodes[1:]:
        n["metadata"]["labels"][HEALTH_LABEL] = "passed"
    assert findings(c, tmp_path)[GATE] == {
        "name": GATE,
        "ok": True,
        "detail": "2/2 passed or watched",
        "fix": "",
    }


def test_a_node_burning_in_and_a_failed_one_are_named(tmp_path):
    c = gated(healthy())
    burning, failed = c.nodes[1], c.nodes[2]
    burning["spec"] = {
        "taints": [{"key": HEALTH_STARTUP_TAINT_KEY, "value": "burn-in", "effect": "NoSchedule"}]
    }
    failed["spec"] = {"taints": [{"key": HEALTH_FAILED_TAINT_KEY, "value": "ISOLATE", "effect": "NoExecute"}]}
    failed["metadata"]["labels"][HEALTH_LABEL] = "failed"
    failed["metadata"].setdefault("annotations", {})[HEALTH_RESULT_ANNOTATION] = json.dumps(
        {
            "verdict": "failed",
            "severity": "ISOLATE",
            "summary": "gpu-inventory: 00000000:48:00.0: row remapping failed",
        }
    )
    found = findings(c, tmp_path)[GATE]
    assert not found["ok"]
    assert found["detail"] == (
        "0/2 passed or watched; burning in: ip-10-0-2-1 (no job lands there until it passes); "
        "failed: ip-10-0-2-2 (ISOLATE: gpu-inventory: 00000000:48:00.0: row remapping failed)"
    )
    assert "its Auto Scaling group replaces it" in found["fix"]
