"""The Kubernetes cluster the offline plan deploys onto: what its API answers to the stack's reads.

A cluster the stack did not create is read before anything is registered on it
(account_checks/cluster_inventory.py, through the official `kubernetes` client, made by the client
factory the program is given: account_checks/cluster_access.py). Offline, its objects are a fact,
`cluster-objects:<anything>: [manifests]` (tests render the real charts in ../shared/charts), and
`OfflineCluster.connect` makes clients whose requests it answers, in place of urllib3, as the API
server does: a collection by group, version and resource, namespace, label selector (key=value) and
field selector (metadata.name, metadata.namespace), or one object by name (404 when absent); asked
for `PartialObjectMetadataList`, the items' metadata only; asked for a `Table` of Deployments or
DaemonSets, the server's columns with each row's metadata. A SelfSubjectAccessReview is allowed. Each request is kept (`requests`). No
fact: an empty cluster, which runs none of the operators. Claims are the exception: unless a fact
lists PersistentVolumeClaims, the cluster holds the one a stack asks for by name, Bound and
ReadWriteMany (as `make plan` needs no fact for a named EKS cluster), so a template with
`existingCluster.checkpointClaim` plans as it would on its cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kubernetes import client
from kubernetes.client import rest

from account_checks.cluster_access import ACCESS_REVIEW_PATH

FACT_PREFIX = "cluster-objects:"
# The resources the stack lists, by the path segment the API names them with.
RESOURCES = {
    "customresourcedefinitions": "CustomResourceDefinition",
    "deployments": "Deployment",
    "daemonsets": "DaemonSet",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "persistentvolumeclaims": "PersistentVolumeClaim",
    "nodes": "Node",
    "serviceaccounts": "ServiceAccount",
    "networkpolicies": "NetworkPolicy",
    "localqueues": "LocalQueue",
    "jobs": "Job",
    "pytorchjobs": "PyTorchJob",
    "trainjobs": "TrainJob",
    "rayjobs": "RayJob",
    "rayclusters": "RayCluster",
    "resourceflavors": "ResourceFlavor",
    "clusterqueues": "ClusterQueue",
    "topologies": "Topology",
    "admissionchecks": "AdmissionCheck",
    "provisioningrequestconfigs": "ProvisioningRequestConfig",
    "clustertrainingruntimes": "ClusterTrainingRuntime",
}
METADATA_ONLY = "as=PartialObjectMetadataList"
ONE_METADATA_ONLY = "as=PartialObjectMetadata;"
TABLE = "as=Table;"
# The columns the API server prints for a kind, wide ones included (it always renders them: k8s
# pkg/printers/storage TableConvertor; pkg/printers/internalversion/printers.go, v1.36), with how
# this cluster fills each from an object.
_COUNT = {"Desired": "desiredNumberScheduled", "Current": "currentNumberScheduled", "Ready": "numberReady"}


def _pod(o: dict[str, Any]) -> dict[str, Any]:
    return ((o.get("spec") or {}).get("template") or {}).get("spec") or {}


def _cell(column: str, o: dict[str, Any]) -> Any:
    status, containers = o.get("status") or {}, _pod(o).get("containers") or []
    if column == "Name":
        return o["metadata"]["name"]
    if column == "Containers":
        return ",".join(c.get("name", "") for c in containers)
    if column == "Images":
        return ",".join(c.get("image", "") for c in containers)
    if column == "Node Selector":
        return (
            ",".join(f"{k}={v}" for k, v in sorted((_pod(o).get("nodeSelector") or {}).items())) or "<none>"
        )
    if column == "Selector":
        labels = ((o.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    if column == "Age":
        return "<unknown>"
    if o["kind"] == "Deployment" and column == "Ready":
        return f"{status.get('readyReplicas', 0)}/{(o.get('spec') or {}).get('replicas', 1)}"
    return status.get(_COUNT.get(column, ""), 0)


TABLE_COLUMNS = {
    "Deployment": ("Name", "Ready", "Up-to-date", "Available", "Age", "Containers", "Images", "Selector"),
    "DaemonSet": (
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Up-to-date",
        "Available",
        "Node Selector",
        "Age",
        "Containers",
        "Images",
        "Selector",
    ),
}


def split_facts(facts: dict[str, Any] | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The account's facts, and the cluster's objects from every `cluster-objects:` fact."""
    account, objects = {}, []
    for key, value in (facts or {}).items():
        if str(key).startswith(FACT_PREFIX):
            if not isinstance(value, list) or not all(isinstance(o, dict) and "kind" in o for o in value):
                raise ValueError(f"cluster fact {key}: a list of Kubernetes objects (each with a kind)")
            objects += value
        else:
            account[key] = value
    return account, objects


@dataclass
class _Response:
    """What urllib3 hands the client: status, reason, body and headers."""

    status: int
    data: bytes
    reason: str = "OK"
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "application/json"})

    def getheaders(self) -> dict[str, str]:
        return self.headers

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name, default)


def _selected(obj: dict[str, Any], query: dict[str, str]) -> bool:
    meta = obj.get("metadata") or {}
    for clause in filter(None, query.get("labelSelector", "").split(",")):
        key, _, value = clause.partition("=")
        if (meta.get("labels") or {}).get(key) != value:
            return False
    for clause in filter(None, query.get("fieldSelector", "").split(",")):
        key, _, value = clause.partition("=")
        if meta.get(key.removeprefix("metadata.")) != value:
            return False
    return True


@dataclass(frozen=True)
class Request:
    path: str
    query: dict[str, str]
    accept: str


def _asked_claim(namespace: str | None, name: str) -> dict[str, Any]:
    """The claim a read names, Bound and ReadWriteMany."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"]},
        "status": {"phase": "Bound"},
    }


class OfflineCluster:
    def __init__(self, objects: list[dict[str, Any]]):
        self.objects = objects
        self.requests: list[Request] = []

    def get(
        self, path: str, query: dict[str, str], accept: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        """GET of a collection, /api/v1[/namespaces/NS]/RESOURCE or /apis/GROUP/VERSION[/...]/RESOURCE,
        or of one object, .../RESOURCE/NAME."""
        self.requests.append(Request(path, query, accept))
        parts = path.strip("/").split("/")
        version = parts[1] if parts[0] == "api" else "/".join(parts[1:3])
        rest_parts = parts[2:] if parts[0] == "api" else parts[3:]
        namespaced = len(rest_parts) >= 3 and rest_parts[0] == "namespaces"
        namespace = rest_parts[1] if namespaced else None
        resource_parts = rest_parts[2:] if namespaced else rest_parts
        kind = RESOURCES.get(resource_parts[0]) if resource_parts else None
        if kind is None or len(resource_parts) > 2:
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        objects = self.objects
        if (
            kind == "PersistentVolumeClaim"
            and len(resource_parts) == 2
            and not any(o["kind"] == kind for o in objects)
        ):
            objects = [*objects, _asked_claim(namespace, resource_parts[1])]
        items = [
            o
            for o in objects
            if o["kind"] == kind
            and (namespace is None or (o.get("metadata") or {}).get("namespace") == namespace)
            and _selected(o, query)
        ]
        if len(resource_parts) == 2:
            named = [o for o in items if o["metadata"]["name"] == resource_parts[1]]
            if not named:
                return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
            if METADATA_ONLY in accept:  # the list form, for one object: the API server refuses it
                return 406, {"kind": "Status", "status": "Failure", "reason": "NotAcceptable", "code": 406}
            if ONE_METADATA_ONLY in accept:
                return 200, {
                    "apiVersion": "meta.k8s.io/v1",
                    "kind": "PartialObjectMetadata",
                    "metadata": named[0]["metadata"],
                }
            return 200, {"apiVersion": version, **named[0]}
        if TABLE in accept:
            if kind not in TABLE_COLUMNS:
                return 406, {"kind": "Status", "status": "Failure", "reason": "NotAcceptable", "code": 406}
            columns = TABLE_COLUMNS[kind]
            return 200, {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "Table",
                "metadata": {"resourceVersion": "1"},
                "columnDefinitions": [
                    {"name": c, "type": "string", "priority": int(c in ("Containers", "Images", "Selector"))}
                    for c in columns
                ],
                "rows": [
                    {
                        "cells": [_cell(c, o) for c in columns],
                        "object": {
                            "apiVersion": "meta.k8s.io/v1",
                            "kind": "PartialObjectMetadata",
                            "metadata": o["metadata"],
                        },
                    }
                    for o in items
                ],
            }
        if METADATA_ONLY in accept:
            return 200, {
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadataList",
                "metadata": {"resourceVersion": "1"},
                "items": [
                    {
                        "apiVersion": "meta.k8s.io/v1",
                        "kind": "PartialObjectMetadata",
                        "metadata": o["metadata"],
                    }
                    for o in items
                ],
            }
        return 200, {
            "apiVersion": version,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }

    def review(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A SelfSubjectAccessReview, as the API server answers it (201, the review with its status):
        allowed, since the offline plan runs as the cluster's administrator."""
        self.requests.append(Request(ACCESS_REVIEW_PATH, {}, "application/json"))
        return 201, {**body, "status": {"allowed": True, "reason": "the offline cluster's administrator"}}

    def connect(self, _address: Any) -> client.ApiClient:
        """A client of the official library whose requests this cluster answers, instead of urllib3
        sending them (a client factory, account_checks/cluster_access.KubeClients)."""
        api = client.ApiClient(client.Configuration())
        api.rest_client = _Answers(self)
        return api


class _Answers:
    """What the client's RESTClientObject does, answered by the offline cluster."""

    def __init__(self, cluster: OfflineCluster):
        self.cluster = cluster

    def request(self, method, url, query_params=None, headers=None, body=None, **_):
        path = urlparse(url).path
        accept = (headers or {}).get("Accept", "application/json")
        if method == "POST" and path == ACCESS_REVIEW_PATH:
            status, payload = self.cluster.review(body)
        elif method != "GET":
            raise NotImplementedError(
                f"the offline cluster answers reads and access reviews only, not {method} {url}"
            )
        else:
            status, payload = self.cluster.get(path, dict(query_params or []), accept)
        response = rest.RESTResponse(_Response(status, json.dumps(payload).encode()))
        if status not in (200, 201):
            raise rest.ApiException(http_resp=response)
        return response

    def GET(self, url, headers=None, query_params=None, **kwargs):  # the client calls it by this name
        return self.request("GET", url, query_params=query_params, headers=headers, **kwargs)

    def POST(self, url, headers=None, query_params=None, body=None, **kwargs):
        return self.request("POST", url, query_params=query_params, headers=headers, body=body, **kwargs)
