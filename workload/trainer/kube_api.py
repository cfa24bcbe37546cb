"""The API server from inside a pod, standard library only (the image needs no Kubernetes client):
what the stack's controllers in the image (trainer.node_fence, trainer.health_gate) read and write."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# An Event about a Node, which has no namespace, goes in `default` (kubernetes v1.36
# pkg/apis/core/validation/events.go: an involved object without a namespace takes an Event of
# namespace "" or "default"), where the kubelet's events of its node are too.
EVENTS_NAMESPACE = "default"


class Kubernetes:
    """Its address from the environment, the service account's token (read each call: the kubelet
    rotates it) and CA."""

    def __init__(self, account: str = SERVICE_ACCOUNT):
        host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
        self.base = f"https://{host}:{port}"
        self.account = account
        self.tls = ssl.create_default_context(cafile=f"{account}/ca.crt")

    def call(
        self, method: str, path: str, body: object = None, content_type: str = "application/json"
    ) -> dict:
        with open(f"{self.account}/token") as f:
            token = f.read().strip()
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", f"Bearer {token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", content_type)
        with urllib.request.urlopen(request, context=self.tls, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")

    def get(self, path: str) -> dict | None:
        """The object, or None where the API server has none."""
        try:
            return self.call("GET", path)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return None
            raise

    def nodes(self, selector: str) -> list[dict]:
        query = urllib.parse.urlencode({"labelSelector": selector})
        return self.call("GET", f"/api/v1/nodes?{query}")["items"]

    def pods_on(self, node: str) -> list[dict]:
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={node}"})
        return self.call("GET", f"/api/v1/pods?{query}")["items"]

    def patch_node(self, node: dict, operations: list[dict]) -> None:
        """A JSON patch of the node, refused (422, its `test` failing) if the node changed since it
        was read, so no one else's taint or label is lost."""
        test = {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": node["metadata"]["resourceVersion"],
        }
        name = urllib.parse.quote(node["metadata"]["name"])
        self.call("PATCH", f"/api/v1/nodes/{name}", [test, *operations], "application/json-patch+json")

    def node_event(
        self, node: dict, reason: str, message: str, component: str, kind: str = "Warning"
    ) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        name = node["metadata"]["name"]
        self.call(
            "POST",
            f"/api/v1/namespaces/{EVENTS_NAMESPACE}/events",
            {
                "metadata": {"generateName": f"{name}.", "namespace": EVENTS_NAMESPACE},
                "involvedObject": {
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"]["uid"],
                    "apiVersion": "v1",
                },
                "reason": reason,
                "message": message[:1024],
                "type": kind,
                "source": {"component": component},
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
