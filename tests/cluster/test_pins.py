"""tools/cluster pins each upstream program at the version the stack deploys, and builds it again
only when a pin changes."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest
from support.cluster.binaries import BIN, TOOLS, pinned, programs

from config.cluster import ClusterConfig


def test_kubernetes_is_the_minor_the_stack_deploys():
    default = next(f for f in dataclasses.fields(ClusterConfig) if f.name == "kubernetes_version").default
    assert pinned("kube", "k8s.io/kubernetes").startswith(f"v{default}.")
    # Its staging modules at the matching v0.x: its own replace directives do not apply downstream.
    staging = (TOOLS / "kube" / "go.mod").read_text()
    minor_patch = pinned("kube", "k8s.io/kubernetes").removeprefix("v1.")
    for module in ("k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go", "k8s.io/kube-scheduler"):
        assert f"{module} => {module} v0.{minor_patch}" in staging


def test_every_program_is_built_from_a_pinned_module():
    for folder, _binary, _package, module in programs():
        assert pinned(folder, module).startswith("v")


def test_a_second_build_with_the_same_pins_builds_nothing():
    if not all((BIN / binary).is_file() for _, binary, _, _ in programs()):
        pytest.skip("`make cluster-bins` has not built the programs")
    done = subprocess.run(
        [str(TOOLS / "build.sh"), str(BIN)], capture_output=True, text=True, timeout=600, check=True
    )
    assert "building" not in done.stdout
