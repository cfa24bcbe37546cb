"""The cluster, through the official Kubernetes Python client, as plain JSON dicts.

Every call is bounded by a timeout, and every way the cluster can fail a call (unreachable, refusing
the credentials, forbidding a read) becomes one `CliError` line that names the server and the fix.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from cli.errors import EXIT_FAILED, CliError
from cli.kinds import READERS
from conventions import JOB_LABEL

# The API (group, version, plural) of Kueue's objects; a job's is its kind's (cli/kinds.py).
WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
PROVISIONING_REQUESTS = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")


def current_user(kubeconfig: dict, source: str) -> dict:
    """The current context's user entry, or a CliError naming what is missing."""
    name = kubeconfig.get("current-context")
    contexts = {
        c.get("name"): c.get("context") or {} for c in kubeconfig.get("contexts") or [] if isinstance(c, dict)
    }
    if not name or name not in contexts:
        have = ", ".join(str(n) for n in contexts) or "none"
        raise CliError(
            f"{source} has no current context (current-context: {name or 'unset'}; contexts: {have}): "
            "set one with `kubectl config use-context NAME`, or `aws eks update-kubeconfig --name CLUSTER`"
        )
    context = contexts[name]
    users = {u.get("name"): u.get("user") or {} for u in kubeconfig.get("users") or [] if isinstance(u, dict)}
    return users.get(context.get("user"), {})


class Cluster:
    def __init__(self, kubeconfig: dict, namespace: str, timeout: float, source: str):
        command = (current_user(kubeconfig, source).get("exec") or {}).get("command")
        if command and shutil.which(command) is None:
            raise CliError(
                f"{source} gets its credentials from `{command}`, which is not on PATH: install it "
                "(for EKS, the AWS CLI: `aws eks get-token`), or use a kubeconfig with a token"
            )
        configuration = client.Configuration()
        try:
            config.load_kube_config_from_dict(kubeconfig, client_configuration=configuration)
        except (ConfigException, KeyError, TypeError, ValueError) as err:
            raise CliError(
                f"{source} is not usable ({err}): regenerate it with `aws eks update-kubeconfig`"
            ) from None
        configuration.retries = 1  # one retry of a dropped connection, not urllib3's three
        # The client builds its connection pool (CA, client certificate) from the configuration it is
        # given, so the kubeconfig is loaded first.
        api = client.ApiClient(configuration=configuration)
        self.api = api
        self.server = api.configuration.host
        self.timeout = (timeout, timeout)  # (connect, read) seconds for every call
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.extensions = client.ApiextensionsV1Api(api)
        self.admission = client.AdmissionregistrationV1Api(api)

    def _call(
        self, what: str, fn: Callable[..., Any], *args: Any, absent: tuple[int, ...] = (), **kwargs: Any
    ) -> Any:
        """`fn` with the timeout: None for a status in `absent`; a cluster that cannot answer becomes a
        one-line CliError."""
        kwargs.setdefault("_request_timeout", self.timeout)
        try:
            return fn(*args, **kwargs)
        except ApiException as err:
            if err.status in absent:
                return None
            raise self._failure(err, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise self._failure(err, what) from None

    def _failure(self, err: Exception, what: str) -> CliError:
        if isinstance(err, ApiException):
            if err.status == 401:
                return CliError(
                    f"the cluster at {self.server} refused the credentials (401 Unauthorized) while {what}: "
                    "refresh them (`aws sso login`, or the profile the kubeconfig names) and check the "
                    "principal has an EKS access entry (trainstack:cluster.adminPrincipals)",
                    EXIT_FAILED,
                )
            if err.status == 403:
                return CliError(
                    f"the cluster at {self.server} forbids {what} (403 Forbidden): give your principal an "
                    "access entry with the view or admin policy (trainstack:cluster.adminPrincipals)",
                    EXIT_FAILED,
                )
            return CliError(
                f"the cluster at {self.server} answered {err.status} {err.reason} while {what}", EXIT_FAILED
            )
        reason = getattr(err, "reason", None) or err
        # urllib3's NewConnectionError (refused, no route) is also a TimeoutError subclass.
        timed_out = isinstance(reason, urllib3.exceptions.TimeoutError) or isinstance(
            err, urllib3.exceptions.TimeoutError
        )
        reach = "check that its endpoint is reachable from here (cluster.publicAccessCidrs, a VPN for a private endpoint)"
        if timed_out and not isinstance(reason, urllib3.exceptions.NewConnectionError):
            said = f"did not answer within {self.timeout[0]:g} s"
            fix = f"{reach}, or raise --timeout"
        else:
            # Refused or unresolvable: an answer came at once, so a longer wait would change nothing.
            said = f"could not be reached ({_short(reason)})"
            fix = reach
        return CliError(f"the cluster at {self.server} {said} while {what}: {fix}", EXIT_FAILED)

    def job(self, kind: str, name: str) -> dict | None:
        group, version, plural = READERS[kind].api
        return self._call(
            f"reading {kind} {name}",
            self.custom.get_namespaced_custom_object,
            *(group, version, self.namespace, plural, name),
            absent=(404,),
        )

    def job_pods(self, name: str) -> list[dict]:
        pods = self._call(
            f"listing the pods of {name}",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{JOB_LABEL}={name}",
        )
        return self._json(pods)["items"]

    def pods(self) -> list[dict]:
        return self._json(self._call("listing pods", self.core.list_namespaced_pod, self.namespace))["items"]

    def nodes(self) -> list[dict]:
        return self._json(self._call("listing nodes", self.core.list_node))["items"]

    def node_events(self) -> list[dict]:
        """Events about nodes (the node monitoring agent's XIDs, nodes removed); Kubernetes keeps
        them an hour by default."""
        found = self._call(
            "listing node events",
            self.core.list_event_for_all_namespaces,
            field_selector="involvedObject.kind=Node",
        )
        return self._json(found)["items"]

    def daemonsets(self) -> list[dict]:
        return self._json(self._call("listing DaemonSets", self.apps.list_daemon_set_for_all_namespaces))[
            "items"
        ]

    def deployments(self) -> list[dict]:
        return self._json(self._call("listing Deployments", self.apps.list_deployment_for_all_namespaces))[
            "items"
        ]

    def crds(self) -> list[str]:
        found = self._call("listing CRDs", self.extensions.list_custom_resource_definition)
        return [c["metadata"]["name"] for c in self._json(found)["items"]]

    def webhooks(self) -> list[str]:
        found = self._call("listing webhooks", self.admission.list_validating_webhook_configuration)
        return [w["metadata"]["name"] for w in self._json(found)["items"]]

    def workloads(self) -> list[dict]:
        """Kueue's Workloads in the namespace (one per queued job)."""
        return self._custom_list("listing Kueue workloads", WORKLOADS)

    def provisioning_requests(self) -> list[dict]:
        """The autoscaler's ProvisioningRequests Kueue made for the namespace's Workloads."""
        return self._custom_list("listing ProvisioningRequests", PROVISIONING_REQUESTS)

    def _custom_list(self, what: str, api: tuple[str, str, str]) -> list[dict]:
        """Custom objects in the namespace; none where their API is not served (404)."""
        group, version, plural = api
        found = self._call(
            what,
            self.custom.list_namespaced_custom_object,
            group,
            version,
            self.namespace,
            plural,
            absent=(404,),
        )
        return (found or {}).get("items", [])

    def _json(self, obj: Any) -> Any:
        return self.api.sanitize_for_serialization(obj)

    def log(self, pod: str, tail: int | None = None, since: int | None = None, previous: bool = False) -> str:
        # Raw bytes: the client's own decoding of text/plain logs returns a bytes repr.
        response = self._call(
            f"reading the log of {pod}",
            self.core.read_namespaced_pod_log,
            *(pod, self.namespace),
            tail_lines=tail,
            since_seconds=since,
            previous=previous,
            _preload_content=False,
            absent=(400, 404),  # no container yet, or no previous run
        )
        return response.data.decode(errors="replace") if response is not None else ""

    def follow(self, pod: str, tail: int | None = None, since: int | None = None) -> Iterator[str]:
        # Bounded connect; the stream itself may stay quiet for as long as the pod does.
        response = self._call(
            f"following the log of {pod}",
            self.core.read_namespaced_pod_log,
            pod,
            self.namespace,
            follow=True,
            tail_lines=tail,
            since_seconds=since,
            _preload_content=False,
            _request_timeout=(self.timeout[0], None),
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


def _short(reason: object) -> str:
    """urllib3 wraps the socket error in a long repr; keep the OS's words."""
    text = str(reason)
    for marker in (
        "Connection refused",
        "Name or service not known",
        "No route to host",
        "Network is unreachable",
    ):
        if marker in text:
            return marker.lower()
    return text.split(": ", 1)[-1][:200]
