"""What a plan sends to a cluster, made ready for the harness's: the objects pulumi-kubernetes
would apply, in an order the API server takes them, and the pods and DaemonSets the plan renders,
stripped of what the harness has no use for (volumes: it has no storage)."""

from __future__ import annotations

import contextlib
import re
from dataclasses import replace

from kubernetes.dynamic.exceptions import NotFoundError

from offline.plan import CONFIG_GROUP, HELM_RELEASE, KUSTOMIZE_DIRECTORY, manifest_of
from support.cluster.stacks import PlannedStack

# Their own objects, laid on the cluster by the harness from the operators' charts and manifests.
OPERATORS_OWN = (HELM_RELEASE, KUSTOMIZE_DIRECTORY, CONFIG_GROUP)
HELM_RELEASE_SECRET = "sh.helm.release.v1."
JOB_KINDS = ("TrainJob", "PyTorchJob", "RayJob", "RayCluster")
DAEMONSET = "trainstack.test/daemonset"


def object_name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", text.lower()).strip("-")[:50]


def sent_objects(stack: PlannedStack) -> list[dict]:
    """The objects pulumi-kubernetes would apply, as the plan renders them, with their secrets'
    values (a test value each) where the plan shows "[secret]"; namespaces first, then what the
    queues name, the queues, and the jobs last."""
    found = []
    for reg in stack.run.resources:
        if reg.type in OPERATORS_OWN:
            continue
        rendered = manifest_of(replace(reg, inputs=reg.revealed or reg.inputs))
        # The label a stack puts on the release Secrets of the Helm releases it installs (a
        # SecretPatch): those releases are the operators' own here, laid on by the harness.
        if rendered is not None and not rendered[1]["metadata"]["name"].startswith(HELM_RELEASE_SECRET):
            found.append(rendered[1])
    return sorted(found, key=_apply_order)


def _apply_order(obj: dict) -> int:
    kind = obj["kind"]
    if kind == "Namespace":
        return 0
    if kind in JOB_KINDS:
        return 3
    return 2 if kind in ("ClusterQueue", "LocalQueue") else 1


def bare_pod(name: str, spec: dict, labels: dict[str, str] | None = None) -> dict:
    """A pod of the plan's spec without volumes or a service account."""
    spec = {k: v for k, v in spec.items() if k != "volumes"}
    for key in ("containers", "initContainers"):
        spec[key] = [{k: v for k, v in c.items() if k != "volumeMounts"} for c in spec.get(key) or []] or None
    spec = {k: v for k, v in spec.items() if v is not None}
    spec.pop("serviceAccountName", None)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def daemonset(ds, namespace: str) -> dict:
    """One of the plan's DaemonSets (offline.nodes.plan_daemonsets), its pods bare."""
    labels = {DAEMONSET: object_name(ds.name)}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": object_name(ds.name), "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": bare_pod("x", ds.spec)["spec"]},
        },
    }


def remove_sent(cluster, objects: list[dict]) -> None:
    """What `sent_objects` laid on the cluster (an object sent twice, once), deleted without waiting
    (`Cluster.settle` waits): the namespaces (their jobs and queues with them), and the cluster-wide
    objects. The jobs go first: their Workloads carry Kueue's finalizer, and content with finalizers
    left in a namespace makes the namespace controller look again 8.5 s later (kube-controller-manager
    v1.36 deletion/namespaced_resources_deleter.go: finalizerEstimateSeconds 15; namespace_controller.go
    requeues after estimate/2 + 1), while a job deleted now takes its Workload with it (the garbage
    collector, by owner reference) before the namespace's first pass, 5 s after its deletion."""
    for job in objects:
        if job["kind"] in JOB_KINDS:
            meta = job["metadata"]
            with contextlib.suppress(NotFoundError):
                cluster.objects.resource(job["apiVersion"], job["kind"]).delete(
                    name=meta["name"], namespace=meta["namespace"]
                )
    for api_version, kind, name, namespaced in sorted(
        {(o["apiVersion"], o["kind"], o["metadata"]["name"], "namespace" in o["metadata"]) for o in objects}
    ):
        if kind == "Namespace":
            cluster.delete_namespace(name)
        elif not namespaced:
            cluster.delete_object(api_version, kind, name)
