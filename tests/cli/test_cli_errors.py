"""`trainstack` answers every plain mistake with one line that says what is wrong and what to do,
and a non-zero exit: never a traceback (unless --debug), never a hang on a cluster that is not there."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import stat
from pathlib import Path

import pytest
from support.fake_cluster import OUTPUTS, healthy
from support.kube_server import FakeCluster, KubeServer
from support.ports import unused_port

from cli.analysis import phases
from cli.kube import Cluster
from cli.main import main

# Every command that reads the stack's outputs and the cluster, with the arguments it needs.
COMMANDS = {
    "status": ["status"],
    "doctor": ["doctor"],
    "logs": ["logs", "fsdp"],
    "metrics": ["metrics", "fsdp"],
    "estimate": ["estimate", "fsdp", "--tokens", "1e9"],
}
SHOW = "pulumi stack output --json --show-secrets > outputs.json"


def one_line_error(capsys, argv: list[str]) -> tuple[int, str]:
    """Run the command; return its exit code and its one stderr line (asserting there is one)."""
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own exit
        code = exit_.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    return code, err.strip()


def write(tmp_path: Path, data) -> str:
    path = tmp_path / "outputs.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


KUBECONFIG_FREE = dict(OUTPUTS)

BAD_OUTPUTS = {
    "missing file": (None, "cannot read the outputs file", "No such file or directory"),
    "empty file": ("", "is not JSON (Expecting value at line 1, column 1)", SHOW),
    "not JSON": ("kubeconfig: yes\n", "is not JSON", SHOW),
    "a list": ("[1, 2]", "holds a JSON list, not the stack's outputs", SHOW),
    "no kubeconfig": (KUBECONFIG_FREE, "the outputs have no kubeconfig", "or pass --kubeconfig"),
    "redacted kubeconfig": ({**OUTPUTS, "kubeconfig": "[secret]"}, 'redacted ("[secret]")', SHOW),
    "empty kubeconfig": ({**OUTPUTS, "kubeconfig": ""}, "the outputs' kubeconfig is empty", SHOW),
    "empty kubeconfig object": ({**OUTPUTS, "kubeconfig": {}}, "the outputs' kubeconfig is empty", SHOW),
    "no cluster in it": (
        {**OUTPUTS, "kubeconfig": {"apiVersion": "v1", "kind": "Config", "clusters": []}},
        "has no current context (current-context: unset; contexts: none)",
        "aws eks update-kubeconfig",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_OUTPUTS))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_bad_outputs_are_one_line_with_the_fix(tmp_path, capsys, command, case):
    data, what, fix = BAD_OUTPUTS[case]
    path = str(tmp_path / "absent.json") if data is None else write(tmp_path, data)
    code, err = one_line_error(capsys, [*COMMANDS[command], "--outputs", path])
    assert code == 2
    assert err.startswith(f"trainstack {command}: error: ") and what in err and fix in err


def test_an_unreadable_outputs_file_says_why(tmp_path, capsys):
    code, err = one_line_error(capsys, ["status", "--outputs", str(tmp_path)])
    assert code == 2 and f"cannot read the outputs file {tmp_path}: Is a directory" in err
    if os.geteuid() != 0:  # root reads any file
        path = Path(write(tmp_path, OUTPUTS))
        path.chmod(0)
        assert "Permission denied" in one_line_error(capsys, ["status", "--outputs", str(path)])[1]
        path.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_a_missing_kubeconfig_file_is_named_before_pulumi_is_asked(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pulumi here
    code, err = one_line_error(capsys, ["status", "--kubeconfig", "/nonexistent"])
    assert code == 2 and "--kubeconfig /nonexistent: No such file or directory" in err
    assert "pulumi" not in err


def test_a_kubeconfig_file_without_a_current_context(tmp_path, capsys):
    config = tmp_path / "config"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncontexts:\n- name: a\n  context: {cluster: a, user: a}\n"
    )
    code, err = one_line_error(
        capsys, ["status", "--outputs", write(tmp_path, OUTPUTS), "--kubeconfig", str(config)]
    )
    assert code == 2 and "has no current context (current-context: unset; contexts: a)" in err
    config.write_text("")
    code, err = one_line_error(
        capsys, ["status", "--outputs", write(tmp_path, OUTPUTS), "--kubeconfig", str(config)]
    )
    assert code == 2 and "is empty or not a kubeconfig" in err


def kubeconfig_for(server: str, user: dict | None = None, cluster: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
        "users": [{"name": "u", "user": user or {"token": "t"}}],
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_cluster_that_refuses_the_connection(tmp_path, capsys, command):
    url = f"http://127.0.0.1:{unused_port()}"
    outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": kubeconfig_for(url)})
    code, err = one_line_error(capsys, [*COMMANDS[command], "--outputs", outputs])
    assert code == 1
    assert f"the cluster at {url} could not be reached (connection refused)" in err
    assert "cluster.publicAccessCidrs" in err


def test_a_cluster_that_never_answers_ends_at_the_timeout(tmp_path, capsys):
    # A socket that listens but never accepts: the kernel completes the handshake, nobody answers.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": kubeconfig_for(url)})
        code, err = one_line_error(capsys, ["status", "--outputs", outputs, "--timeout", "0.5"])
    assert code == 1 and f"the cluster at {url} did not answer within 0.5 s" in err and "--timeout" in err


@pytest.mark.parametrize(
    ("status", "said"), [(401, "refused the credentials (401"), (403, "(403 Forbidden)")]
)
@pytest.mark.parametrize("command", ["status", "doctor", "logs"])
def test_a_cluster_that_refuses_the_credentials(tmp_path, capsys, command, status, said):
    cluster = healthy()
    cluster.refuse = status
    with KubeServer(cluster) as server:
        outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": server.kubeconfig()})
        code, err = one_line_error(capsys, [*COMMANDS[command], "--outputs", outputs])
    assert code == 1 and said in err and "adminPrincipals" in err


def test_a_credential_command_that_is_not_installed(tmp_path, capsys):
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws-not-here",
                     "args": ["eks", "get-token", "--cluster-name", "c"]}}  # fmt: skip
    outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": kubeconfig_for("https://example.invalid", user)})
    code, err = one_line_error(capsys, ["status", "--outputs", outputs])
    assert code == 2 and "gets its credentials from `aws-not-here`, which is not on PATH" in err


@pytest.mark.parametrize("command", ["logs", "metrics", "estimate"])
def test_an_unknown_job_names_the_stack_jobs(tmp_path, capsys, command):
    argv = [a if a != "fsdp" else "nope" for a in COMMANDS[command]]
    with KubeServer(healthy()) as server:
        outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": server.kubeconfig()})
        code, err = one_line_error(capsys, [*argv, "--outputs", outputs])
    assert code == 2 and "no job nope in the stack's outputs: the stack's jobs are fsdp" in err


@pytest.mark.parametrize(
    ("option", "value", "said"),
    [
        ("--tokens", "lots", "'lots' is not a number"),
        ("--tokens", "-5", "'-5' must be a positive number"),
        ("--tokens", "nan", "'nan' must be a positive number"),
        ("--tokens", "0", "'0' must be a positive number"),
        ("--efficiency", "1.5", "'1.5' must be at most 1"),
        ("--max-nodes", "0", "'0' must be a positive number"),
        ("--timeout", "never", "'never' is not a number"),
    ],
)
def test_bad_numbers_are_one_line_usage_errors(tmp_path, capsys, option, value, said):
    argv = ["estimate", "fsdp", "--tokens", "1e9", "--outputs", write(tmp_path, OUTPUTS), option, value]
    code, err = one_line_error(capsys, argv)
    assert code == 2 and err.startswith("trainstack estimate: error: argument") and said in err


def test_a_missing_argument_is_one_line(capsys):
    code, err = one_line_error(capsys, ["logs"])
    assert code == 2 and "the following arguments are required: job" in err


def fake_pulumi(tmp_path: Path, stderr: str, code: int = 255) -> None:
    script = tmp_path / "bin" / "pulumi"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' {json.dumps(stderr)} >&2\nexit {code}\n")
    script.chmod(0o755)


def test_a_stack_that_does_not_exist(tmp_path, capsys, monkeypatch):
    # What `pulumi stack output` prints for an unknown stack (pulumi/pkg/cmd/pulumi/stack).
    fake_pulumi(tmp_path, "error: no stack named 'nope' found")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    code, err = one_line_error(capsys, ["status", "--stack", "nope"])
    assert code == 2
    assert "pulumi has no stack named 'nope' here (error: no stack named 'nope' found)" in err
    assert "pulumi stack ls" in err


def test_no_pulumi_on_path_says_to_pass_the_outputs(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    code, err = one_line_error(capsys, ["doctor"])
    assert code == 2 and "the pulumi CLI is not on PATH: pass --outputs FILE" in err and SHOW[:40] in err


def test_an_unexpected_error_is_one_line_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    def broken(kind, obj):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(phases, "job_phase", broken)
    with KubeServer(healthy()) as server:
        outputs = write(tmp_path, {**OUTPUTS, "kubeconfig": server.kubeconfig()})
        code, err = one_line_error(capsys, ["status", "--outputs", outputs])
        assert code == 1 and "unexpected RuntimeError: a bug (run again with --debug" in err
        assert main(["status", "--outputs", outputs, "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_the_kubeconfig_certificate_authority_reaches_the_connection_pool():
    """A real EKS endpoint serves a certificate signed by the cluster's own CA: the client's pool must
    verify with it (it did not when the pool was built before the kubeconfig was loaded)."""
    ca = b"-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
    kubeconfig = kubeconfig_for(
        "https://ABC.gr7.us-east-1.eks.amazonaws.com",
        cluster={"certificate-authority-data": base64.b64encode(ca).decode()},
    )
    cluster = Cluster(kubeconfig, "training", 5.0, "test")
    pool = cluster.api.rest_client.pool_manager.connection_pool_kw
    assert Path(pool["ca_certs"]).read_bytes() == ca and pool["cert_reqs"] == ssl.CERT_REQUIRED


def test_a_fake_cluster_still_answers(tmp_path, capsys):
    """The checks above do not stop a working setup (the main paths are in test_status.py,
    test_doctor.py, test_logs.py and test_metrics_and_estimate.py)."""
    cluster = FakeCluster(nodes=[])
    with KubeServer(cluster) as server:
        outputs = write(
            tmp_path, {**OUTPUTS, "jobs": {}, "gpuNodeGroups": {}, "kubeconfig": server.kubeconfig()}
        )
        assert main(["status", "--outputs", outputs]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    # Both tables, empty: no job and no node group, and the cluster was asked for its nodes.
    heads = [line.split() for line in out.splitlines()]
    assert heads == [
        ["JOB", "KIND", "PHASE", "QUEUE", "PODS", "RESTARTS", "AGE", "LATEST"],
        [],
        ["NODE", "GROUP", "READY/NODES", "MIN-MAX", "GPUS/NODE", "EFA/NODE"],
    ]
    assert any(r.startswith("/api/v1/nodes") for r in cluster.requests), cluster.requests
