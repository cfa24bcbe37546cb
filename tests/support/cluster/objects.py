"""Sending objects to the API server as a client would (server-side apply, field manager
`trainstack-test`), through the dynamic client: CRDs and custom resources alike."""

from __future__ import annotations

import time
from collections.abc import Iterable

from kubernetes import client, dynamic
from kubernetes.dynamic.exceptions import ResourceNotFoundError

MANAGER = "trainstack-test"
# Kinds whose objects a stack's `destroy` must leave as they were before its first `up`.
INVENTORY = (
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "PersistentVolumeClaim"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    ("kueue.x-k8s.io/v1beta2", "Workload"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayCluster"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
)


class Objects:
    def __init__(self, api: client.ApiClient):
        self.api = api
        self.dynamic = dynamic.DynamicClient(api)

    def resource(self, api_version: str, kind: str):
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            self.dynamic.resources.invalidate_cache()  # a CRD added since discovery was read
            return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def apply(self, obj: dict) -> dict:
        res = self.resource(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace") if res.namespaced else None
        return res.server_side_apply(
            body=obj,
            name=obj["metadata"]["name"],
            namespace=namespace,
            field_manager=MANAGER,
            force_conflicts=True,
        ).to_dict()

    def apply_all(self, objs: Iterable[dict]) -> None:
        """CRDs first, and established before anything else is sent."""
        objs = [o for o in objs if o]
        crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
        for crd in crds:
            self.apply(crd)
        for crd in crds:
            self.wait_established(crd["metadata"]["name"])
        for ns in (o for o in objs if o["kind"] == "Namespace"):
            self.apply(ns)
        for o in objs:
            if o["kind"] not in ("CustomResourceDefinition", "Namespace"):
                self.apply(o)

    def wait_established(self, name: str, timeout: float = 60) -> None:
        ext = client.ApiextensionsV1Api(self.api)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = ext.read_custom_resource_definition(name)
            if any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or [])):
                self.dynamic.resources.invalidate_cache()
                return
            time.sleep(0.2)
        raise TimeoutError(f"CRD {name} not established after {timeout:.0f} s")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except dynamic.exceptions.NotFoundError:
            return None

    def list(self, api_version: str, kind: str, namespace: str | None = None, **kw) -> list[dict]:
        return [i.to_dict() for i in self.resource(api_version, kind).get(namespace=namespace, **kw).items]


def inventory(cluster) -> set[tuple[str, str, str]]:
    """(kind, namespace, name) of every object of INVENTORY's kinds the cluster serves."""
    served = {(a, k) for a, k in INVENTORY if serves(cluster.objects, a, k)}
    return {
        (kind, o["metadata"].get("namespace") or "", o["metadata"]["name"])
        for api_version, kind in INVENTORY
        if (api_version, kind) in served
        for o in cluster.objects.list(api_version, kind)
    }


def serves(objects: Objects, api_version: str, kind: str) -> bool:
    try:
        objects.resource(api_version, kind)
    except ResourceNotFoundError:
        return False
    return True


def admitted_jobs(objects: Objects, namespace: str) -> set[str]:
    """The jobs in `namespace` whose Kueue Workload is Admitted (by the Workload's owner's name)."""
    return {
        w["metadata"]["ownerReferences"][0]["name"]
        for w in objects.list("kueue.x-k8s.io/v1beta2", "Workload", namespace)
        if any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in (w.get("status") or {}).get("conditions") or []
        )
    }
