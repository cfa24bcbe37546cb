"""`trainstack metrics` and `trainstack estimate` against a local Kubernetes API server: the
training curve read from the job's logs, and the time and cost of a token budget at other sizes."""

from __future__ import annotations

import json

import pytest
from support.fake_cluster import OUTPUTS, healthy, run


def test_metrics_table_skips_malformed_lines_and_plots(tmp_path):
    code, out = run(healthy(), tmp_path, "metrics", "fsdp", "--json", "--plot", str(tmp_path / "curve.png"))
    data = json.loads(out)
    assert [r["step"] for r in data["records"]] == [10, 20]
    assert data["records"][1]["valLoss"] == 3.95
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, text = run(healthy(), tmp_path, "metrics", "fsdp")
    assert code == 0 and "      20   3.9000   3.9500    1,300,000   44.0%" in text


def test_metrics_of_a_job_without_metrics_exit_nonzero(tmp_path):
    c = healthy()
    c.logs = {}
    curve = tmp_path / "curve.png"
    code, out = run(c, tmp_path, "metrics", "fsdp", "--plot", str(curve))
    assert code == 1
    assert out == "no training metrics in the logs of fsdp yet\n"
    assert not curve.exists()  # no empty plot
    # Logs without a metrics line (only malformed ones) are the same: no table of nothing.
    c.logs = {"fsdp-worker-0": "NCCL INFO Using network Libfabric\nmetrics {not json"}
    code, out = run(c, tmp_path, "metrics", "fsdp")
    assert (code, out) == (1, "no training metrics in the logs of fsdp yet\n")
    assert "/api/v1/namespaces/training/pods/fsdp-worker-0/log" in c.requests


def test_estimate_table(tmp_path):
    code, out = run(
        healthy(),
        tmp_path,
        "estimate",
        "fsdp",
        "--tokens",
        "1e12",
        "--json",
        "--efficiency",
        "0.9",
        "--max-nodes",
        "4",
    )
    data = json.loads(out)
    rows = {r["nodes"]: r for r in data["rows"]}
    assert data["measured"] == {"tokensPerS": 1300000.0, "nodes": 2}
    assert rows[2]["tokensPerS"] == pytest.approx(1.3e6)
    assert rows[4]["tokensPerS"] == pytest.approx(1.3e6 * 2 * 0.9)
    assert rows[1]["tokensPerS"] == pytest.approx(1.3e6 / 2 / 0.9)
    assert rows[2]["hours"] == pytest.approx(1e12 / 1.3e6 / 3600)
    assert rows[2]["costUsd"] == pytest.approx(rows[2]["hours"] * 110.08)
    assert sorted(rows) == [1, 2, 4]
    code, text = run(healthy(), tmp_path, "estimate", "fsdp", "--tokens", "1e12", "--tokens-per-s", "1e6")
    assert code == 0 and "measured 1,000,000 tokens/s on 2 node(s)" in text


def test_estimate_scales_by_the_plans_model_where_the_outputs_carry_it(tmp_path):
    """The stack exports each job's modeled tokens/s per node count (planes/jobs.py modeled_scaling):
    the measurement is scaled by its ratios, not by a flat share per doubling; --efficiency asks for
    the flat rule."""
    outputs = json.loads(json.dumps(OUTPUTS))
    outputs["jobs"]["fsdp"]["modeledTokensPerS"] = {"1": 800_000, "2": 1_500_000, "4": 2_400_000}
    argv = ("estimate", "fsdp", "--tokens", "1e12", "--tokens-per-s", "1e6", "--max-nodes", "4", "--json")
    code, out = run(healthy(), tmp_path, *argv, outputs=outputs)
    data = json.loads(out)
    assert code == 0 and data["scaling"] == "model" and "efficiencyPerDoubling" not in data
    rows = {r["nodes"]: r["tokensPerS"] for r in data["rows"]}
    assert rows == pytest.approx({1: 1e6 * 0.8 / 1.5, 2: 1e6, 4: 1e6 * 2.4 / 1.5})
    code, text = run(healthy(), tmp_path, *argv[:-1], outputs=outputs)
    assert "other node counts scaled by the plan's step model" in text.splitlines()[0]
    code, out = run(healthy(), tmp_path, *argv, "--efficiency", "0.9", outputs=outputs)
    data = json.loads(out)
    assert data["scaling"] == "efficiency" and data["efficiencyPerDoubling"] == 0.9
    assert {r["nodes"]: r["tokensPerS"] for r in data["rows"]}[1] == pytest.approx(1e6 / 2 / 0.9)


def test_a_job_on_a_type_without_a_known_price_costs_unknown(tmp_path):
    """An `ml.` group's nodes have no price in the stack's outputs (hourlyUsd null)."""
    unpriced = {**OUTPUTS, "jobs": {"fsdp": {**OUTPUTS["jobs"]["fsdp"], "hourlyUsd": None}}}
    argv = ("estimate", "fsdp", "--tokens", "1e12", "--tokens-per-s", "1e6")
    code, text = run(healthy(), tmp_path, *argv, outputs=unpriced)
    assert code == 0
    assert text.splitlines()[2].split()[-1] == "unknown"
    assert text.splitlines()[-1] == (
        "cost unknown: node group p5 has no price; set its hourlyUsd "
        "(trainstack:gpuNodeGroups[<i>].hourlyUsd) and run `pulumi up`, or pass --hourly-usd"
    )
    code, out = run(healthy(), tmp_path, *argv, "--hourly-usd", "10", "--json", outputs=unpriced)
    rows = {r["nodes"]: r for r in json.loads(out)["rows"]}
    assert rows[2]["costUsd"] == pytest.approx(rows[2]["hours"] * 2 * 10)
    code, out = run(healthy(), tmp_path, *argv, "--json", outputs=unpriced)
    assert {r["costUsd"] for r in json.loads(out)["rows"]} == {None}


def test_an_unknown_job_is_a_usage_error(tmp_path, capsys):
    code, out = run(healthy(), tmp_path, "estimate", "nope", "--tokens", "1e9")
    assert code == 2 and out == ""
    assert capsys.readouterr().err == (
        "trainstack estimate: error: no job nope in the stack's outputs: the stack's jobs are fsdp\n"
    )
