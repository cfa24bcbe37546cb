"""What every template and example sends to a cluster, accepted by the real API server with the
operators' webhooks serving: each object the plan renders for pulumi-kubernetes to apply (its
namespace, service accounts, network policies, Kueue's Topology, flavors, queues and admission
checks, Trainer's ClusterTrainingRuntime, the jobs) is applied as the provider applies it
(server-side apply), against the CRD schemas and CEL rules, and Kueue's, Trainer's, KubeRay's and
the training operator's admission webhooks; a job is then held by Kueue (suspended) until admitted.
The Helm releases, the kustomize directory and the CRD config groups are the operators' own: the
harness lays them on the cluster from their charts and manifests (support/cluster/operators.py)."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.sent import JOB_KINDS, remove_sent, sent_objects
from support.cluster.stacks import planned_file
from support.paths import ROOT

pytestmark = CLUSTER_GROUP

STACK_FILES = {
    **{p.stem.removeprefix("Pulumi."): p for p in sorted(ROOT.glob("Pulumi.*.yaml"))},
    **{f"example-{p.stem}": p for p in sorted((ROOT / "examples").glob("*.yaml"))},
}


def suspended(job: dict) -> bool:
    spec = job.get("spec") or {}
    if job["kind"] == "PyTorchJob":
        return (spec.get("runPolicy") or {}).get("suspend") is True
    return spec.get("suspend") is True


def apart(objects: list[dict], suffix: str) -> list[dict]:
    """The stack's namespaced objects in namespaces of its own (`<namespace>-<suffix>`), so that no
    stack waits for another's to be deleted; cluster-wide ones, and those in a namespace the stack
    does not make (the node fence's events Role in `default`), are applied over the last stack's."""
    made = {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"}
    for obj in objects:
        meta = obj["metadata"]
        if obj["kind"] == "Namespace":
            meta["name"] = f"{meta['name']}-{suffix}"
        elif meta.get("namespace") in made:
            meta["namespace"] = f"{meta['namespace']}-{suffix}"
    return objects


@pytest.fixture(scope="module")
def applied(cluster, operators):
    """Everything applied, removed once the module is done: the namespaces (their jobs and queues
    with them) and the cluster-wide objects."""
    cluster.settle()
    found: list[dict] = []
    yield found
    remove_sent(cluster, found)


@pytest.mark.parametrize("name", sorted(STACK_FILES))
def test_every_object_the_stack_sends_is_accepted_and_its_jobs_are_queued(cluster, applied, name):
    stack = planned_file(name, STACK_FILES[name])
    objects = apart(sent_objects(stack), str(sorted(STACK_FILES).index(name)))
    assert any(o["kind"] in JOB_KINDS for o in objects), f"{name} sends no job"
    for obj in objects:
        meta = obj["metadata"]
        try:
            cluster.objects.apply(obj)
        except ApiException as err:
            why = f"{err.status} {err.reason}: {err.body}"
            pytest.fail(f"{name}: {obj['kind']} {meta.get('namespace', '')}/{meta['name']}: {why}")
        applied.append(obj)
    for job in (o for o in objects if o["kind"] in JOB_KINDS):
        meta = job["metadata"]
        got = cluster.objects.get(job["apiVersion"], job["kind"], meta["name"], meta["namespace"])
        # Kueue's webhook holds every job of the stack's queues until it admits it.
        assert suspended(got), f"{name}: {job['kind']} {meta['name']} was not held by Kueue"
