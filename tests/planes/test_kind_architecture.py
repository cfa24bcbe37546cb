"""kind on an arm64 laptop (issue #47): the stack builds amd64 images from a lock of x86_64 wheels,
which kind's arm64 nodes cannot run; `pulumi up` refuses with one sentence before anything is built,
and the offline plan warns."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import platform

import pulumi
import pytest
from support.paths import ROOT
from support.plans import stack_values

from account_checks.world import World
from components.image import IMAGE_PLATFORM, docker_build
from components.kind_image import architecture_problem
from offline.engine import run_program
from offline.engine.cluster_answers import OfflineCluster
from offline.engine.world import offline_world
from offline.plan import main

LOCK_HEADER = "--python-platform x86_64-manylinux_2_28"


def test_the_image_is_amd64_because_the_lock_is_x86_64(tmp_path):
    assert LOCK_HEADER in (ROOT / "workload" / "requirements.lock").read_text().splitlines()[1]
    assert docker_build(tmp_path, "base")["platform"] == IMAGE_PLATFORM == "linux/amd64"


@pytest.mark.parametrize("machine", ["arm64", "aarch64"])
def test_an_arm64_machine_is_refused_with_one_sentence(machine):
    assert architecture_problem(machine).startswith(
        f"trainstack:image.builder = kind: this machine is {machine}, so kind's nodes run arm64 images"
    )
    assert architecture_problem("x86_64") is None


def strict_world() -> World:
    """The offline world, strict as `pulumi up`'s real one is."""
    return dataclasses.replace(offline_world(OfflineCluster([])), strict=True)


def test_up_stops_before_the_kind_image_is_built(monkeypatch):
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    registered: list = []
    with pytest.raises(pulumi.RunError, match="this machine is arm64"):
        run_program("local", stack_values("local"), registered=registered, world=strict_world())
    assert not [r for r in registered if r.type.startswith(("docker:", "command:"))]


def test_the_offline_plan_warns(monkeypatch, tmp_path):
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["--stack", "local", "--out", str(tmp_path)]) == 0
    assert "WARNING: trainstack:image.builder = kind: this machine is arm64" in out.getvalue()
