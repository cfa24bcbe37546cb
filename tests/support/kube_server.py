"""A local HTTP server on the loopback address that answers the part of the Kubernetes REST API
`trainstack` uses, from fixture objects shaped like a real API server's (lists with kind and
metadata, required status fields, pod logs with tailLines/sinceSeconds/previous/follow)."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


@dataclass
class FakeCluster:
    namespace: str = "training"
    nodes: list[dict] = field(default_factory=list)
    pods: list[dict] = field(default_factory=list)
    daemonsets: list[dict] = field(default_factory=list)
    deployments: list[dict] = field(default_factory=list)
    crds: list[dict] = field(default_factory=list)
    webhooks: list[dict] = field(default_factory=list)
    custom: dict[tuple[str, str], dict] = field(default_factory=dict)  # (plural, name) -> object
    workloads: list[dict] | None = None  # Kueue's, in the namespace; None: no Kueue API (404)
    provisioning_requests: list[dict] | None = None  # None: no ProvisioningRequest API (404)
    events: list[dict] = field(default_factory=list)  # all namespaces; fieldSelector on involvedObject.kind
    logs: dict[str, str] = field(default_factory=dict)
    previous_logs: dict[str, str] = field(default_factory=dict)
    follow_delay: float = 0.05
    requests: list[str] = field(default_factory=list)
    refuse: int | None = None  # answer every request with this status (401, 403), as a real API server would


def _list(kind: str, api_version: str, items: list[dict]) -> dict:
    return {"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items}


def _selected(items: list[dict], selector: str | None) -> list[dict]:
    if not selector:
        return items
    wanted = dict(part.split("=", 1) for part in selector.split(","))
    return [i for i in items if all(i["metadata"].get("labels", {}).get(k) == v for k, v in wanted.items())]


class Handler(BaseHTTPRequestHandler):
    cluster: FakeCluster
    protocol_version = "HTTP/1.0"  # bodies end when the connection closes (as a followed log does)

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict | str, content_type: str = "application/json") -> None:
        data = body if isinstance(body, str) else json.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.end_headers()
        self.wfile.write(data.encode())

    def _not_found(self, what: str) -> None:
        self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": f"{what} not found",
                         "reason": "NotFound", "code": 404})  # fmt: skip

    def do_GET(self) -> None:
        c = self.cluster
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        c.requests.append(url.path)
        if c.refuse:
            reason = {401: "Unauthorized", 403: "Forbidden"}[c.refuse]
            return self._send(c.refuse, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason,
                                         "reason": reason, "code": c.refuse})  # fmt: skip
        path = url.path
        ns = c.namespace
        if path == "/api/v1/nodes":
            return self._send(200, _list("NodeList", "v1", c.nodes))
        if path == "/api/v1/events":
            kind = dict(p.split("=", 1) for p in query.get("fieldSelector", "").split(",") if p)
            wanted = kind.get("involvedObject.kind")
            items = [e for e in c.events if wanted in (None, e["involvedObject"]["kind"])]
            return self._send(200, _list("EventList", "v1", items))
        if path == f"/api/v1/namespaces/{ns}/pods":
            return self._send(200, _list("PodList", "v1", _selected(c.pods, query.get("labelSelector"))))
        if m := re.fullmatch(rf"/api/v1/namespaces/{ns}/pods/([^/]+)/log", path):
            return self._log(m.group(1), query)
        if path == "/apis/apps/v1/daemonsets":
            return self._send(200, _list("DaemonSetList", "apps/v1", c.daemonsets))
        if path == "/apis/apps/v1/deployments":
            return self._send(200, _list("DeploymentList", "apps/v1", c.deployments))
        if path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions":
            return self._send(200, _list("CustomResourceDefinitionList", "apiextensions.k8s.io/v1", c.crds))
        if path == "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations":
            return self._send(
                200,
                _list("ValidatingWebhookConfigurationList", "admissionregistration.k8s.io/v1", c.webhooks),
            )
        for api, plural, kind, items in (
            ("kueue.x-k8s.io/v1beta2", "workloads", "WorkloadList", c.workloads),
            (
                "autoscaling.x-k8s.io/v1",
                "provisioningrequests",
                "ProvisioningRequestList",
                c.provisioning_requests,
            ),
        ):
            if path == f"/apis/{api}/namespaces/{ns}/{plural}":
                return (
                    self._send(200, _list(kind, api, items)) if items is not None else self._not_found(path)
                )
        if m := re.fullmatch(rf"/apis/[^/]+/v1(?:alpha1)?/namespaces/{ns}/([^/]+)/([^/]+)", path):
            found = c.custom.get((m.group(1), m.group(2)))
            return self._send(200, found) if found else self._not_found(f"{m.group(1)} {m.group(2)}")
        return self._not_found(path)

    def _log(self, pod: str, query: dict) -> None:
        c = self.cluster
        if not any(p["metadata"]["name"] == pod for p in c.pods):
            return self._not_found(f"pod {pod}")
        text = (c.previous_logs if query.get("previous", "").lower() == "true" else c.logs).get(pod, "")
        lines = text.splitlines()
        if "sinceSeconds" in query:  # fixture lines carry their age: "<seconds ago>|<line>"
            lines = [ln for ln in lines if int(ln.split("|", 1)[0]) <= int(query["sinceSeconds"])]
        lines = [ln.split("|", 1)[1] if re.match(r"[0-9]+\|", ln) else ln for ln in lines]
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]) :] if int(query["tailLines"]) else []
        if query.get("follow", "").lower() != "true":
            return self._send(200, "".join(f"{ln}\n" for ln in lines), "text/plain")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        for ln in lines:  # a followed log arrives over time
            self.wfile.write(f"{ln}\n".encode())
            self.wfile.flush()
            time.sleep(c.follow_delay)


class KubeServer:
    def __init__(self, cluster: FakeCluster):
        handler = type("BoundHandler", (Handler,), {"cluster": cluster})
        self.cluster = cluster
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # A short poll: shutdown() waits for the serving loop to notice, 0.5 s by default.
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def kubeconfig(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
            "users": [{"name": "fake", "user": {"token": "offline"}}],
        }

    def __enter__(self) -> KubeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
