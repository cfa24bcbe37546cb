"""Ray token authentication: every Ray cluster the stack runs (a RayJob's, a RayCluster) asks KubeRay
for `authOptions.mode: token`, so the head's GCS and dashboard refuse a caller without the cluster's
token, and the stack's own submitter still gets it. What KubeRay 1.7 does with the field is read
from its source (ray-operator/controllers/ray/...): reconcileAuthSecret, SetContainerTokenAuthEnvVars,
configureSubmitterContainer, ValidateRayClusterSpec."""

from __future__ import annotations

import copy

import pytest
from support.crds import crd_errors
from support.plans import plan

from components.jobs.ray import RAY_AUTH, RAY_VERSION
from conventions import JOB_LABEL, RAY_ROLE_LABEL, RAY_SUBMITTER_ROLE
from offline.plan import manifest_of

JOBS = [
    {"name": "ray-l4", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"},
    {"name": "ray-box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"},
    {"name": "verl", "kind": "RayJob", "nodeGroup": "gpu", "verl": {"algorithm": "grpo"}, "wait": "none"},
]
# The env KubeRay sets from authOptions, only where a container does not set it already
# (common/pod.go, SetContainerTokenAuthEnvVars: `if !utils.EnvVarExists(...)`).
AUTH_ENV = {"RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ENABLE_K8S_TOKEN_AUTH"}
# KubeRay refuses token mode below this Ray (utils/validation.go, ValidateRayClusterSpec).
TOKEN_AUTH_MIN_RAY = (2, 52, 0)


@pytest.fixture(scope="module")
def run():
    return plan("dev", jobs=JOBS)


def manifest(run, name: str) -> dict:
    (reg,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return manifest_of(reg)[1]


def cluster_spec(m: dict) -> dict:
    return m["spec"]["rayClusterSpec"] if m["kind"] == "RayJob" else m["spec"]


def templates(m: dict) -> list[dict]:
    """Every pod template of a Ray job: head, workers and, for a RayJob, the submitter."""
    spec = cluster_spec(m)
    found = [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]
    if m["kind"] == "RayJob":
        found.append(m["spec"]["submitterPodTemplate"])
    return found


@pytest.mark.parametrize("job", ["ray-l4", "ray-box", "verl"])
def test_every_ray_cluster_asks_for_token_auth(run, job):
    m = manifest(run, job)
    assert crd_errors(m) == []
    # No secretName: KubeRay generates the token in a Secret owned by the RayCluster
    # (raycluster_controller.go, reconcileAuthSecret), so it never enters the stack's state. Not
    # enableK8sTokenAuth either: KubeRay refuses it for a RayJob.
    assert cluster_spec(m)["authOptions"] == {"mode": "token"} == RAY_AUTH
    version = tuple(int(x) for x in cluster_spec(m)["rayVersion"].split("."))
    assert version == tuple(int(x) for x in RAY_VERSION.split(".")) and version >= TOKEN_AUTH_MIN_RAY
    # KubeRay sets the auth env only where a container has none: a container's own RAY_AUTH_MODE
    # (say `disabled`) would turn auth off on that pod, its own RAY_AUTH_TOKEN would not match.
    for template in templates(m):
        spec = template["spec"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            assert not AUTH_ENV & {e["name"] for e in c.get("env", [])}, (job, c["name"])


def test_the_submitter_gets_the_token_from_kuberay(run):
    """The stack's `ray job submit` still works: the submitter's container leaves its command to
    KubeRay (configureSubmitterContainer fills in `ray job submit` only where it is empty, then sets
    RAY_AUTH_MODE and RAY_AUTH_TOKEN from the cluster's Secret), and it is labeled as the submitter
    the head's dashboard policy lets in."""
    submitter = manifest(run, "ray-l4")["spec"]["submitterPodTemplate"]
    assert submitter["metadata"]["labels"][RAY_ROLE_LABEL] == RAY_SUBMITTER_ROLE
    assert submitter["metadata"]["labels"][JOB_LABEL] == "ray-l4"
    (container,) = submitter["spec"]["containers"]
    assert "command" not in container and "args" not in container


def test_the_crd_refuses_an_auth_mode_it_does_not_know(run):
    """The field is the CRD's own (KubeRay 1.7): a misspelt one would be pruned by the API server
    and leave the head open; an unknown mode is refused."""
    m = copy.deepcopy(manifest(run, "ray-box"))
    m["spec"]["authOption"] = m["spec"].pop("authOptions")
    assert any("authOption" in e for e in crd_errors(m))
    m = copy.deepcopy(manifest(run, "ray-box"))
    m["spec"]["authOptions"]["mode"] = "password"
    assert any("password" in e for e in crd_errors(m))
