"""What a new user reads first: every option's help line and default, the estimate table bounded by
the group, --json keys in one style, and errors that name only what the user gave."""

from __future__ import annotations

import argparse
import json
import re

import pytest
from support.fake_cluster import OUTPUTS, healthy, run
from support.ports import unused_port

from cli.main import main
from cli.output import camel_keys
from cli.parser import parser


def subparsers() -> dict[str, argparse.ArgumentParser]:
    p = parser("trainstack")
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", sorted(subparsers()))
def test_every_argument_has_help_and_every_default_is_shown(command, capsys):
    commands = subparsers()
    for action in commands[command]._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"{command} {name} has no help text"
        if action.default not in (None, False):
            assert "default" in action.help, f"{command} {name}: its default {action.default} is not shown"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    if command == "logs":
        assert "job a job of the stack (trainstack status lists them)" in text
        assert "--follow, -f keep printing each pod's new lines" in text
        assert "--tail TAIL only the last N lines of each pod (default: all)" in text
    assert "--timeout TIMEOUT seconds to wait for the cluster per call (default: 20)" in text
    if command == "estimate":
        assert (
            "throughput kept per doubling of nodes, instead of the plan's model (default: the model; 0.9 "
            "where the stack has none for the job)"
        ) in text


def test_estimate_tabulates_only_up_to_the_groups_maximum(tmp_path):
    four = json.loads(json.dumps(OUTPUTS))
    four["gpuNodeGroups"]["p5"]["nodes"] = 4
    argv = ("estimate", "fsdp", "--tokens", "1e12", "--tokens-per-s", "1e6", "--json")
    code, out = run(healthy(), tmp_path, *argv, outputs=four)
    assert code == 0 and [r["nodes"] for r in json.loads(out)["rows"]] == [1, 2, 4]
    code, out = run(healthy(), tmp_path, *argv, "--max-nodes", "16", outputs=four)
    assert [r["nodes"] for r in json.loads(out)["rows"]] == [1, 2, 4, 8, 16]


SNAKE = re.compile(r'"[a-z0-9]+_[a-z0-9_]+":')


@pytest.mark.parametrize(
    "argv",
    [
        ("status",),
        ("doctor",),
        ("metrics", "fsdp"),
        ("estimate", "fsdp", "--tokens", "1e12"),
    ],
)
def test_json_keys_are_camel_case_everywhere(tmp_path, argv):
    code, out = run(healthy(), tmp_path, *argv, "--json")
    data = json.loads(out)
    assert code == 0 and data and not SNAKE.findall(out), SNAKE.findall(out)
    if argv[0] == "estimate":
        assert set(data["rows"][0]) == {"nodes", "tokensPerS", "hours", "costUsd"}


def test_camel_keys_changes_field_names_only():
    data = {"gpus_expected": 8, "rows": [{"cost_usd": None}], "my-job": {"tokens_per_s": 1.0}, "mfu": 0.4}
    assert camel_keys(data) == {
        "gpusExpected": 8,
        "rows": [{"costUsd": None}],
        "my-job": {"tokensPerS": 1.0},
        "mfu": 0.4,
    }


def test_a_missing_kubeconfig_file_of_the_stack_is_not_called_an_option(tmp_path, capsys):
    """A kind stack's outputs name the user's kubeconfig file: no --kubeconfig was passed."""
    missing = tmp_path / "kube" / "config"
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({**OUTPUTS, "kubeconfigFile": str(missing), "kubeContext": "kind-x"}))
    code = main(["status", "--outputs", str(outputs)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert (
        err == f"trainstack status: error: the stack's kubeconfig file {missing}: No such file or directory"
    )
    assert "--kubeconfig" not in err


def test_a_refused_connection_does_not_suggest_a_longer_timeout(tmp_path, capsys):
    url = f"http://127.0.0.1:{unused_port()}"
    kubeconfig = {
        "apiVersion": "v1",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        "users": [{"name": "u", "user": {"token": "t"}}],
    }
    outputs = tmp_path / "outputs.json"
    outputs.write_text(json.dumps({**OUTPUTS, "kubeconfig": kubeconfig}))
    code = main(["status", "--outputs", str(outputs)])
    err = capsys.readouterr().err
    assert code == 1 and "could not be reached (connection refused)" in err
    assert "cluster.publicAccessCidrs" in err and "--timeout" not in err
