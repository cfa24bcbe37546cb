"""Cluster access: how the stack reaches a cluster it did not create before anything is registered
on it, and what it says when it cannot.

The official Kubernetes client, authenticated as the stack's provider is (an EKS token made like
`aws eks get-token`, or a kubeconfig file and context), made by a client factory the caller passes
in (`KubeClients`): `live_clients` for a real cluster, the offline engine's for its own
(account_checks.world). Every read
has a 5 s connect and 30 s read timeout, is tried once, and a refusal (401, 403), an endpoint that
does not answer or a kubeconfig that does not load ends the program with one sentence
(`ClusterReadError`) instead of a traceback or a hang.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from botocore.exceptions import BotoCoreError
from kubernetes import client
from kubernetes import config as kube_config
from urllib3.exceptions import HTTPError

from config import PROJECT

CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
# What the API server answers instead of whole objects: their metadata only (meta.k8s.io/v1
# PartialObjectMetadataList, or PartialObjectMetadata for one object: the server refuses the other
# form, as client-go's metadata client asks each), so a Secret's payload never leaves the cluster.
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
ONE_METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
# A collection as the server prints it (meta.k8s.io/v1 Table, as `kubectl get -o wide` asks): the
# server always renders the wide columns (k8s pkg/printers/storage TableConvertor: Wide: true), so a
# Deployment's or DaemonSet's row names its images without the pod spec, whose env values may hold
# credentials; each row carries the object's metadata (includeObject=Metadata).
TABLE = "application/json;as=Table;g=meta.k8s.io;v=v1"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
JSON = "application/json"


def eks_token(session, cluster_name: str, region: str) -> str:
    """What `aws eks get-token` prints: an STS GetCallerIdentity URL presigned with the cluster's name
    in the x-k8s-aws-id header, base64url without padding, prefixed k8s-aws-v1.
    (aws-cli awscli/customizations/eks/get_token.py: TokenGenerator, STSClientFactory)."""
    sts = session.client("sts", region_name=region, endpoint_url=f"https://sts.{region}.amazonaws.com")

    def keep_id(params, context, **_):
        if "x-k8s-aws-id" in params:
            context["x-k8s-aws-id"] = params.pop("x-k8s-aws-id")

    def add_header(request, **_):
        if "x-k8s-aws-id" in request.context:
            request.headers["x-k8s-aws-id"] = request.context["x-k8s-aws-id"]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", keep_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    url = sts.generate_presigned_url(
        "get_caller_identity", Params={"x-k8s-aws-id": cluster_name}, ExpiresIn=60, HttpMethod="GET"
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class ClusterAddress:
    """How the stack reaches the cluster: an EKS endpoint and CA, or a kubeconfig file and context."""

    endpoint: str | None = None
    ca_data: str | None = None
    eks_cluster_name: str | None = None
    region: str | None = None
    kubeconfig_file: str | None = None
    context: str | None = None

    @property
    def named(self) -> str:
        """The cluster as the config names it, for a sentence."""
        if self.kubeconfig_file is not None:
            context = f" (context {self.context})" if self.context else ""
            return f"{PROJECT}:existingCluster.kubeconfig = {self.kubeconfig_file}{context}"
        return f"{PROJECT}:existingCluster.eksClusterName = {self.eks_cluster_name} ({self.endpoint})"


# Makes the client for an address; the caller passes one in (live_clients, or the offline engine's).
KubeClients = Callable[[ClusterAddress], client.ApiClient]


def live_clients(session: Callable[[], Any]) -> KubeClients:
    """Clients for a real cluster, authenticated as the stack's provider is; `session` makes the
    boto3 session an EKS token is signed with."""

    def connect(address: ClusterAddress) -> client.ApiClient:
        configuration = client.Configuration()
        if address.kubeconfig_file is not None:
            kube_config.load_kube_config(
                address.kubeconfig_file, context=address.context, client_configuration=configuration
            )
        else:
            configuration.host = address.endpoint
            token = eks_token(session(), address.eks_cluster_name, address.region)
            configuration.api_key = {"authorization": f"Bearer {token}"}
            # urllib3 reads the CA file at each TLS handshake, so it outlives this call.
            with tempfile.NamedTemporaryFile(
                "wb", prefix="trainstack-ca-", suffix=".crt", delete=False
            ) as ca:
                ca.write(base64.b64decode(address.ca_data))
            configuration.ssl_ca_cert = ca.name
        configuration.retries = False  # one try: the timeouts bound the whole read
        return client.ApiClient(configuration)

    return connect


class ClusterReadError(pulumi.RunError):
    def __init__(self, stack: str, address: ClusterAddress, why: str):
        self.why = why
        super().__init__(
            f"stack '{stack}': the cluster {address.named} could not be read before deploying to it: "
            f"{why}; nothing was created"
        )


def refusal(status: int, path: str, address: ClusterAddress, method: str = "GET") -> str:
    """A 401 or 403 as one clause: who was refused, and what to check."""
    who = (
        f"the user of its context {address.context or '(current)'}"
        if address.kubeconfig_file is not None
        else "the IAM identity the stack runs as (its access entry on the cluster)"
    )
    if status == 401:
        return f"it answered 401 Unauthorized: it does not accept the credentials of {who}"
    return f"it answered 403 Forbidden to {method} {path}: {who} may not {'read' if method == 'GET' else 'ask'} that"


class ClusterReader:
    """GETs against one cluster, each with the timeouts; a failure becomes a ClusterReadError."""

    def __init__(self, connect: KubeClients, address: ClusterAddress, stack: str):
        self.address, self.stack = address, stack
        self.refused: list[str] = []  # the paths a refusable read was refused (403)
        try:
            self.api = connect(address)
        except (kube_config.ConfigException, OSError) as err:
            raise ClusterReadError(stack, address, f"its kubeconfig does not load ({err})") from None
        except BotoCoreError as err:
            raise ClusterReadError(stack, address, f"no EKS token could be signed ({err})") from None

    def get(
        self,
        path: str,
        query: dict[str, str] | None = None,
        metadata_only: bool = False,
        one: bool = False,
        table: bool = False,
        refusable: bool = False,
    ) -> Any:
        """The API's JSON answer to GET `path` (a collection, or `one` object; as its metadata only,
        or as a `table`), or None where it answers 404 (no such object or API), or, for a
        `refusable` read, 403 (the path is kept in `refused`)."""
        accept = JSON
        if table:
            accept, query = TABLE, {**(query or {}), "includeObject": "Metadata"}
        elif metadata_only:
            accept = ONE_METADATA_ONLY if one else METADATA_ONLY
        try:
            return self._call("GET", path, query, accept)
        except client.ApiException as err:
            if err.status == 404:
                return None
            if err.status == 403 and refusable:
                self.refused.append(path)
                return None
            raise self._error(err, "GET", path) from None

    def allowed(
        self, verb: str, group: str, resource: str, namespace: str | None = None, name: str | None = None
    ) -> bool:
        """Whether the cluster lets the stack's identity `verb` a `resource` of API `group` (in
        `namespace`, or cluster-wide; `name`: one object), as it answers a SelfSubjectAccessReview (authorization.k8s.io/v1:
        any authenticated user may ask it, through system:basic-user)."""
        attributes = {"verb": verb, "group": group, "resource": resource}
        if namespace is not None:
            attributes["namespace"] = namespace
        if name is not None:
            attributes["name"] = name
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        try:
            answer = self._call("POST", ACCESS_REVIEW_PATH, None, JSON, body)
        except client.ApiException as err:
            raise self._error(err, "POST", ACCESS_REVIEW_PATH) from None
        return bool((answer.get("status") or {}).get("allowed"))

    def _call(self, method: str, path: str, query: dict[str, str] | None, accept: str, body: Any = None):
        try:
            return self.api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params={"Accept": accept, "Content-Type": JSON},
                body=body,
                response_types_map={200: "object", 201: "object"},
                auth_settings=["BearerToken"],
                _return_http_data_only=True,
                _request_timeout=(CONNECT_TIMEOUT_SECONDS, READ_TIMEOUT_SECONDS),
            )
        except (HTTPError, OSError) as err:
            why = (
                f"it could not be reached or did not answer within {CONNECT_TIMEOUT_SECONDS:g} s (connect) "
                f"and {READ_TIMEOUT_SECONDS:g} s (read): {type(err).__name__}"
            )
            raise ClusterReadError(self.stack, self.address, why) from None

    def _error(self, err: client.ApiException, method: str, path: str) -> ClusterReadError:
        if err.status in (401, 403):
            return ClusterReadError(self.stack, self.address, refusal(err.status, path, self.address, method))
        return ClusterReadError(
            self.stack, self.address, f"it answered {err.status} {err.reason} to {method} {path}"
        )

    def close(self) -> None:
        self.api.close()

    def __enter__(self) -> ClusterReader:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
