"""`operators.manifestMirror`: the files the stack applies itself (the training operator's kustomize
overlay, KubeRay's CRDs) come from a folder laid out as raw.githubusercontent.com serves them, at the
same commits, for a runner that reaches no GitHub. Every file is checked before anything is
registered. The real engine reads such a folder on the tier: tests/cluster/test_installed_pytorch.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.config_rules import config_problems, problems
from support.plans import plan

from domain.operators import (
    KUBERAY_CRD_COMMITS,
    KUBERAY_CRDS,
    TRAINING_OPERATOR,
    TRAINING_OPERATOR_HYPERPOD,
    training_operator_location,
)

DIRECTORY = "kubernetes:kustomize/v2:Directory"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
KUBERAY_COMMIT = KUBERAY_CRD_COMMITS["1.7.0"]


def kuberay_crds(run):
    (found,) = [g for g in run.by_type(CONFIG_GROUP) if g.name.endswith("kuberay-crds")]
    return found


def filled(root: Path, skip: str | None = None) -> Path:
    """A mirror holding what the dev template reads from it (files' contents do not matter here)."""
    base = root / "kubeflow" / "trainer" / TRAINING_OPERATOR.commit / "manifests"
    crds = root / "ray-project" / "kuberay" / KUBERAY_COMMIT / "helm-chart" / "kuberay-operator" / "crds"
    files = [
        base / "overlays" / "standalone" / "kustomization.yaml",
        base / "base" / "kustomization.yaml",
        *[crds / f"ray.io_{name}.yaml" for name in KUBERAY_CRDS],
    ]
    for f in files:
        if f.name != skip:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("{}\n")
    return root


def test_the_overlay_and_the_crds_are_read_from_the_mirror_at_the_pinned_commits(tmp_path):
    mirror = filled(tmp_path)
    run = plan("dev", operators={"manifestMirror": f"{mirror}/"})
    (directory,) = run.by_type(DIRECTORY)
    assert directory.inputs["directory"] == (
        f"{mirror}/kubeflow/trainer/{TRAINING_OPERATOR.commit}/manifests/overlays/standalone"
    )
    crds = kuberay_crds(run)
    assert crds.inputs["files"] == [
        f"{mirror}/ray-project/kuberay/{KUBERAY_COMMIT}/helm-chart/kuberay-operator/crds/ray.io_{n}.yaml"
        for n in KUBERAY_CRDS
    ]


def test_hyperpod_and_a_configured_ref_read_their_own_commit_from_the_mirror():
    assert training_operator_location(True, None, "/m") == (
        f"/m/kubeflow/trainer/{TRAINING_OPERATOR_HYPERPOD.commit}/manifests/overlays/standalone"
    )
    assert training_operator_location(False, "a" * 40, "/m") == (
        f"/m/kubeflow/trainer/{'a' * 40}/manifests/overlays/standalone"
    )


def test_a_missing_file_is_named_before_anything_is_registered(tmp_path):
    mirror = filled(tmp_path, skip="ray.io_rayjobs.yaml")
    (found,) = [
        p for p in config_problems(operators={"manifestMirror": str(mirror)}) if "manifestMirror" in p
    ]
    crd = (
        f"{mirror}/ray-project/kuberay/{KUBERAY_COMMIT}/helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml"
    )
    assert found.startswith(
        f'trainstack:operators.manifestMirror = "{mirror}": lacks {crd}; allowed: a folder'
    )


def test_a_missing_folder_is_refused(tmp_path):
    (found,) = [
        p for p in problems(operators={"manifestMirror": str(tmp_path / "none")}) if "manifestMirror" in p
    ]
    assert found.startswith(f'trainstack:operators.manifestMirror = "{tmp_path / "none"}": not a folder')


@pytest.mark.parametrize("value", ["https://mirror.example.com/github", "s3://bucket/manifests"])
def test_a_url_is_refused_with_what_kustomize_reads(value):
    (found,) = [p for p in problems(operators={"manifestMirror": value}) if "manifestMirror" in p]
    assert "kustomize reads an overlay from a folder or from git" in found


def test_an_operator_the_stack_will_not_install_needs_nothing_in_the_mirror(tmp_path):
    tmp_path.joinpath("empty").mkdir()
    run = plan(
        "dev",
        operators={
            "manifestMirror": str(tmp_path / "empty"),
            "trainingOperator": {"enabled": False},
            "kuberay": {"enabled": False},
        },
        jobs=[],
    )
    assert not run.by_type(DIRECTORY)
    assert not [g for g in run.by_type(CONFIG_GROUP) if g.name.endswith("kuberay-crds")]
