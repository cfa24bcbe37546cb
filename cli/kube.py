"""The cluster, through the official Kubernetes Python client, as plain JSON dicts."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kubernetes import client, config
from kubernetes.client.rest import ApiException

from cli.analysis import KINDS
from conventions import JOB_LABEL


class Cluster:
    def __init__(self, kubeconfig: str | dict | None, namespace: str):
        api = client.ApiClient(configuration=client.Configuration())
        if isinstance(kubeconfig, dict):
            config.load_kube_config_from_dict(kubeconfig, client_configuration=api.configuration)
        else:
            config.load_kube_config(config_file=kubeconfig, client_configuration=api.configuration)
        self.api = api
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.extensions = client.ApiextensionsV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)

    def _json(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def job(self, kind: str, name: str) -> dict | None:
        group, version, plural = KINDS[kind]
        try:
            return self.custom.get_namespaced_custom_object(group, version, self.namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def job_pods(self, name: str) -> list[dict]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{JOB_LABEL}={name}")
        return self._json(pods)["items"]

    def pods(self) -> list[dict]:
        return self._json(self.core.list_namespaced_pod(self.namespace))["items"]

    def nodes(self) -> list[dict]:
        return self._json(self.core.list_node())["items"]

    def daemonsets(self) -> list[dict]:
        return self._json(self.apps.list_daemon_set_for_all_namespaces())["items"]

    def deployments(self) -> list[dict]:
        return self._json(self.apps.list_deployment_for_all_namespaces())["items"]

    def crds(self) -> list[str]:
        return [
            c["metadata"]["name"]
            for c in self._json(self.extensions.list_custom_resource_definition())["items"]
        ]

    def webhooks(self) -> list[str]:
        found = self.admission.list_validating_webhook_configuration()
        return [w["metadata"]["name"] for w in self._json(found)["items"]]

    def log(self, pod: str, tail: int | None = None, since: int | None = None, previous: bool = False) -> str:
        try:
            # Raw bytes: the client's own decoding of text/plain logs returns a bytes repr.
            response = self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                tail_lines=tail,
                since_seconds=since,
                previous=previous,
                _preload_content=False,
            )
            return response.data.decode(errors="replace")
        except ApiException as err:
            if err.status in (400, 404):  # no container yet, or no previous run
                return ""
            raise

    def follow(self, pod: str, tail: int | None = None, since: int | None = None) -> Iterator[str]:
        response = self.core.read_namespaced_pod_log(
            pod, self.namespace, follow=True, tail_lines=tail, since_seconds=since, _preload_content=False
        )
        buffered = b""
        try:
            for chunk in response.stream(4096):
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                for line in lines:
                    yield line.decode(errors="replace")
            if buffered:
                yield buffered.decode(errors="replace")
        finally:
            response.release_conn()
