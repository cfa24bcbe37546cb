"""Operators on a cluster where the stack's identity may not read everything (a namespace-scoped
role): what it could not read is an answer, not a stop. An operator it cannot see is reused only
when told (mode reuse), and then unchecked and said so; on auto it stops with one sentence, since a
second install would collide with one it cannot see; a CRD it can read is still checked."""

from __future__ import annotations

import pytest
import yaml
from support.paths import shared_dir
from support.plans import stack_values

from account_checks.cluster_inventory import CRD_PATH, ClusterInventory
from account_checks.operator_decisions import ClusterOperatorsError, decide_operators
from config import parse_config
from conventions import PART_OF

WORKLOAD_LISTS = ("/apis/apps/v1/deployments", "/apis/apps/v1/daemonsets")
RAY_CRDS = ("rayjobs.ray.io", "rayclusters.ray.io")
OTHERS_REUSED = {k: "reuse" for k in ("kueue", "trainingOperator", "nvidiaDevicePlugin", "efaDevicePlugin")}


def existing(**modes: str):
    operators = {key: {"mode": mode} for key, mode in modes.items()}
    return parse_config("existing", stack_values("existing", operators=operators))


def ray_crds() -> tuple[dict, ...]:
    return tuple(
        {
            **yaml.safe_load(
                (shared_dir("crds", "TRAINSTACK_CRDS_DIR") / f"ray.io_{name.split('.')[0]}.yaml").read_text()
            ),
            "kind": "CustomResourceDefinition",
        }
        for name in RAY_CRDS
    )


def test_an_operator_the_identity_cannot_see_stops_auto_with_one_sentence():
    refused = (*WORKLOAD_LISTS, *(f"{CRD_PATH}/{n}" for n in RAY_CRDS))
    with pytest.raises(ClusterOperatorsError) as err:
        decide_operators(existing(), ClusterInventory((), refused), ("ray.io/rayjob",))
    assert (
        "trainstack:operators.kuberay.mode = auto: whether the cluster runs KubeRay cannot be told, since the "
        "stack's identity may not read /apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayjobs.ray.io, "
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/rayclusters.ray.io, /apis/apps/v1/deployments "
        "(403), and a second one would collide with the cluster's; allowed: reuse (the cluster's own, taken "
        "unchecked), or an identity that may list Deployments and DaemonSets in every namespace and read CRDs"
    ) in str(err.value)


def test_reuse_of_an_operator_it_cannot_see_is_taken_unchecked(monkeypatch):
    warned: list[str] = []
    monkeypatch.setattr("pulumi.log.warn", warned.append)
    cfg = existing(kuberay="reuse", **OTHERS_REUSED)
    decisions = decide_operators(cfg, ClusterInventory((), WORKLOAD_LISTS), ())
    assert decisions["kuberay"].action == "reuse" and decisions["kuberay"].unchecked
    assert (
        decisions["kuberay"].found == "nothing (the stack's identity may not read /apis/apps/v1/deployments)"
    )
    (line,) = warned
    assert line.startswith("reused unchecked: ")
    assert "kuberay" in line and "nvidiaDevicePlugin" in line


def test_a_crd_it_can_read_is_checked_where_its_workloads_are_out_of_sight():
    """KubeRay's CRDs are served and have every field the jobs set: reused, unchecked beyond them;
    the same CRD without a field the jobs set stops, as it does with the workloads in sight."""
    decisions = decide_operators(existing(**OTHERS_REUSED), ClusterInventory(ray_crds(), WORKLOAD_LISTS), ())
    assert (decisions["kuberay"].action, decisions["kuberay"].unchecked) == ("reuse", True)
    old = ray_crds()
    spec = old[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    del spec["submissionMode"]
    with pytest.raises(ClusterOperatorsError) as err:
        decide_operators(existing(**OTHERS_REUSED), ClusterInventory(old, WORKLOAD_LISTS), ())
    assert "CRD rayjobs.ray.io v1 has no spec.submissionMode, which the stack's jobs set" in str(err.value)


def pytorchjob_crd(labels: dict[str, str]) -> dict:
    crd = yaml.safe_load(
        (shared_dir("crds", "TRAINSTACK_CRDS_DIR") / "kubeflow.org_pytorchjobs.yaml").read_text()
    )
    crd["metadata"]["labels"] = labels
    return {**crd, "kind": "CustomResourceDefinition"}


def test_crds_a_trainstack_stack_kept_are_installed_over_and_anothers_stop_the_install():
    """Only the training operator's CRD is there, its Deployment gone with the stack that installed
    it: labelled trainstack's, kept by that stack's destroy, so this stack installs again over it;
    unlabelled, it is someone's half-removed install, and the stack says so."""
    cfg = existing(**{k: "install" for k in ("kueue", "kuberay", "nvidiaDevicePlugin", "efaDevicePlugin")})
    decisions = decide_operators(cfg, ClusterInventory((pytorchjob_crd(dict(PART_OF)),)), ())
    assert decisions["trainingOperator"].action == "install"
    assert decisions["trainingOperator"].found == (
        "CRD pytorchjobs.kubeflow.org, kept by an earlier install of trainstack's: installed over"
    )
    with pytest.raises(ClusterOperatorsError) as err:
        decide_operators(cfg, ClusterInventory((pytorchjob_crd({"team": "x"}),)), ())
    assert "no Deployment of it runs (only its CRDs are there)" in str(err.value)
