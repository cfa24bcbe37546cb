"""The Kubernetes cluster the offline plan deploys onto: what its API answers to the stack's reads.

A cluster the stack did not create is read before anything is registered on it
(account_checks/cluster_inventory.py, through the official `kubernetes` client). Offline, its
objects are a fact, `cluster-objects:<anything>: [manifests]` (tests render the real charts in
../shared/charts), and `OfflineCluster.answers()` answers the client's list requests from them at
the HTTP layer (`RESTClientObject.request`, where urllib3 would send them), as the API server does:
by group, version and resource, namespace, label selector (key=value) and field selector
(metadata.name, metadata.namespace). No fact: an empty cluster, which runs none of the operators.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kubernetes.client import rest

FACT_PREFIX = "cluster-objects:"
# The resources the stack lists, by the path segment the API names them with.
RESOURCES = {
    "customresourcedefinitions": "CustomResourceDefinition",
    "deployments": "Deployment",
    "daemonsets": "DaemonSet",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
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


class OfflineCluster:
    def __init__(self, objects: list[dict[str, Any]]):
        self.objects = objects

    def list(self, path: str, query: dict[str, str]) -> tuple[int, dict[str, Any]]:
        """GET of a collection: /api/v1[/namespaces/NS]/RESOURCE or /apis/GROUP/VERSION[/...]/RESOURCE."""
        parts = path.strip("/").split("/")
        version = parts[1] if parts[0] == "api" else "/".join(parts[1:3])
        rest_parts = parts[2:] if parts[0] == "api" else parts[3:]
        namespace = rest_parts[1] if len(rest_parts) == 3 and rest_parts[0] == "namespaces" else None
        kind = RESOURCES.get(rest_parts[-1])
        if kind is None or len(rest_parts) not in (1, 3):
            return 404, {"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}
        items = [
            o
            for o in self.objects
            if o["kind"] == kind
            and (namespace is None or (o.get("metadata") or {}).get("namespace") == namespace)
            and _selected(o, query)
        ]
        return 200, {
            "apiVersion": version,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": "1"},
            "items": items,
        }

    @contextlib.contextmanager
    def answers(self) -> Iterator[None]:
        """Answer the Kubernetes client's requests inside the block, instead of sending them."""
        cluster = self

        def request(_self, method, url, query_params=None, headers=None, body=None, **_):
            if method != "GET":
                raise NotImplementedError(f"the offline cluster answers reads only, not {method} {url}")
            status, payload = cluster.list(urlparse(url).path, dict(query_params or []))
            response = rest.RESTResponse(_Response(status, json.dumps(payload).encode()))
            if status != 200:
                raise rest.ApiException(http_resp=response)
            return response

        original = rest.RESTClientObject.request
        rest.RESTClientObject.request = request
        try:
            yield
        finally:
            rest.RESTClientObject.request = original
