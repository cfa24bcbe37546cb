"""tools/cluster pins each upstream program at the version the stack deploys or pins, or, where the
Go module proxy does not serve that version, at the nearest one it does; both are named here and in
docs/offline-plan.md ("The cluster tier")."""

from __future__ import annotations

import dataclasses
import subprocess

import yaml
from support.cluster.binaries import BIN, TOOLS, pinned, programs
from support.cluster.hyperpod import CHART
from support.paths import ROOT, missing

from components.operators import JOBSET_IMAGE
from components.queueing import KUEUE_IMAGE
from config.cluster import ClusterConfig
from domain.operators import RELEASES, TRAINING_OPERATOR
from offline.nodes import charts_dir

# (folder, module): (what the stack pins, what is built instead, why).
NOT_SERVED = {
    ("kuberay", "github.com/ray-project/kuberay/ray-operator"): (
        "v1.7.0",
        "v1.6.2",
        "v1.7.0 zip refused (403, its .info served, 2026-11-29); v1.6.2 is the nearest served",
    ),
    ("pulumi", "github.com/pulumi/pulumi/pkg/v3"): (
        "v3.272.0",
        "v3.274.0",
        "3.271.0-3.273.x refused; 3.274.0 is the nearest served",
    ),
    ("pulumi-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4"): (
        "v4.34.2",
        "v4.0.0-20260115033456-f47bc2d6f199",
        "the only version served: v4.25.0, the commit its tag names (f47bc2d6f199, 2026-01-15)",
    ),
}


def test_kubernetes_is_the_minor_the_stack_deploys():
    default = next(f for f in dataclasses.fields(ClusterConfig) if f.name == "kubernetes_version").default
    assert pinned("kube", "k8s.io/kubernetes").startswith(f"v{default}.")
    # Its staging modules at the matching v0.x: its own replace directives do not apply downstream.
    staging = (TOOLS / "kube" / "go.mod").read_text()
    minor_patch = pinned("kube", "k8s.io/kubernetes").removeprefix("v1.")
    for module in ("k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go", "k8s.io/kube-scheduler"):
        assert f"{module} => {module} v0.{minor_patch}" in staging


def test_operators_are_the_versions_the_stack_installs():
    assert pinned("kueue", "sigs.k8s.io/kueue") == f"v{RELEASES['kueue'].version}"
    assert pinned("kueue", "sigs.k8s.io/kueue") == KUEUE_IMAGE["tag"]
    assert pinned("training-operator", "github.com/kubeflow/training-operator") == TRAINING_OPERATOR.version
    assert pinned("trainer", "github.com/kubeflow/trainer/v2") == f"v{RELEASES['trainer'].version}"
    # HyperPod's chart runs kubeflow/training-operator:v1-855e096, a v1.7 build.
    chart = charts_dir() / CHART / "charts" / "training-operators" / "values.yaml"
    assert yaml.safe_load(chart.read_text())["image"]["tag"] == "v1-855e096"
    assert pinned("training-operator-hyperpod", "github.com/kubeflow/training-operator") == "v1.7.0"
    # JobSet is the Trainer chart's subchart: the image the stack names is the controller built.
    assert pinned("jobset", "sigs.k8s.io/jobset") == JOBSET_IMAGE["tag"]
    assert pinned("trainer", "sigs.k8s.io/jobset") == JOBSET_IMAGE["tag"]
    assert (
        RELEASES["kuberay"].version
        == NOT_SERVED[("kuberay", "github.com/ray-project/kuberay/ray-operator")][0][1:]
    )


def test_the_engine_is_the_version_requirements_pins_or_the_nearest_served():
    wanted = {
        line.split("==")[0]: line.split("==")[1]
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line
    }
    assert (ROOT / ".pulumi-version").read_text().strip() == wanted["pulumi"]
    assert NOT_SERVED[("pulumi", "github.com/pulumi/pulumi/pkg/v3")][0] == f"v{wanted['pulumi']}"
    provider = ("pulumi-kubernetes", "github.com/pulumi/pulumi-kubernetes/provider/v4")
    assert NOT_SERVED[provider][0] == f"v{wanted['pulumi-kubernetes']}"


def test_each_substitute_is_what_go_mod_pins():
    for (folder, module), (_, built, _) in NOT_SERVED.items():
        assert pinned(folder, module) == built


def test_every_program_is_built_from_a_pinned_module():
    for folder, _binary, _package, module in programs():
        assert pinned(folder, module).startswith("v")


def test_a_second_build_with_the_same_pins_builds_nothing():
    if not all((BIN / binary).is_file() for _, binary, _, _ in programs()):
        missing("`make cluster-bins` has not built the programs")
    done = subprocess.run(
        [str(TOOLS / "build.sh"), str(BIN)], capture_output=True, text=True, timeout=120, check=True
    )
    assert "building" not in done.stdout
