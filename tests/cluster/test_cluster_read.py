"""The read a `pulumi up` makes of a cluster it did not create, against the real API server: a user
it refuses (401) or does not authorize (403), an endpoint nobody answers, one that never completes a
connection and one that takes the request and never answers each end the program with one sentence,
within the read's timeouts; Helm's release Secrets come back as their metadata only, never their
payload, and only from the namespaces of the stack's own releases."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.pki import Pki
from support.plans import stack_values
from support.ports import unused_port

from account_checks import cluster_access
from account_checks.cluster_access import ClusterAddress, ClusterReader, ClusterReadError, live_clients
from account_checks.cluster_inventory import HELM_OWNER_LABEL
from account_checks.cluster_rights import ClusterRightsError, check_rights
from account_checks.operator_decisions import read_operators
from config import parse_config
from planes.namespace_objects import stack_rights

pytestmark = CLUSTER_GROUP

CONTEXT = "trainstack-test"
NOTHING = "; nothing was created"


def kubeconfig(cluster, path: Path, user: dict, server: str | None = None) -> ClusterAddress:
    """The harness's kubeconfig with another user (and server)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": user}]
    if server is not None:
        config["clusters"][0]["cluster"]["server"] = server
    path.write_text(yaml.safe_dump(config))
    return ClusterAddress(kubeconfig_file=str(path), context=CONTEXT)


def read(address: ClusterAddress):
    return read_operators(live_clients(lambda: None), address, "reader")


def refused(address: ClusterAddress) -> str:
    with pytest.raises(ClusterReadError) as err:
        read(address)
    return str(err.value)


def prefix(address: ClusterAddress) -> str:
    return (
        f"stack 'reader': the cluster trainstack:existingCluster.kubeconfig = {address.kubeconfig_file} "
        f"(context {CONTEXT}) could not be read before deploying to it: "
    )


def test_credentials_the_cluster_does_not_accept_end_with_one_sentence(cluster, tmp_path):
    """A client certificate from a CA the API server does not trust: 401 (a bearer token no
    authenticator here knows would pass as anonymous and get a 403 instead)."""
    stranger = Pki(tmp_path / "stranger").issue("admin", "admin", org="system:masters")
    user = {"client-certificate": str(stranger.cert), "client-key": str(stranger.key)}
    address = kubeconfig(cluster, tmp_path / "kubeconfig", user)
    assert refused(address) == (
        prefix(address)
        + f"it answered 401 Unauthorized: it does not accept the credentials of the user of its context {CONTEXT}"
        + NOTHING
    )


TEAM = "team-reader"
# What the local template's stack makes cluster-wide (its TrainJob group's runtime among them), as a
# right the API server is asked for; a namespace-scoped identity holds none of them.
CLUSTER_WIDE = "; ".join(
    [
        *(
            f"{verb} {resource} (cluster-wide)"
            for resource in (
                "resourceflavors.kueue.x-k8s.io",
                "clusterqueues.kueue.x-k8s.io",
                "clustertrainingruntimes.trainer.kubeflow.org",
            )
            for verb in ("create", "patch")
        ),
        f"patch namespaces/{TEAM} (cluster-wide)",
    ]
)


def local_config():
    values = stack_values("local")
    existing = {**yaml.safe_load(values["trainstack:existingCluster"]), "namespace": TEAM}
    return parse_config("local", stack_values("local", existingCluster=existing))


def rights_refused(address: ClusterAddress) -> str:
    reader = ClusterReader(live_clients(lambda: None), address, "reader")
    try:
        with pytest.raises(ClusterRightsError) as err:
            check_rights(reader, stack_rights(local_config()), "make the stack's queues and jobs")
    finally:
        reader.close()
    return str(err.value)


def rights_prefix(address: ClusterAddress) -> str:
    return (
        f"stack 'reader': the cluster trainstack:existingCluster.kubeconfig = {address.kubeconfig_file} "
        f"(context {CONTEXT}) does not let the identity the stack runs as make the stack's queues and jobs: "
        "it may not "
    )


ALLOWED = (
    "; nothing was created; allowed: an identity with those rights (on EKS, an access entry with "
    "AmazonEKSClusterAdminPolicy, or a ClusterRole granting them bound to it)"
)


def test_a_user_the_cluster_does_not_authorize_is_told_every_right_it_lacks(cluster, tmp_path):
    """The API server's own RBAC answers each SelfSubjectAccessReview: a user bound to nothing may make
    nothing, and the one sentence names each create, in the namespace and cluster-wide."""
    nobody = cluster.control_plane.pki.issue("nobody", "nobody")
    user = {"client-certificate": str(nobody.cert), "client-key": str(nobody.key)}
    address = kubeconfig(cluster, tmp_path / "kubeconfig", user)
    message = rights_refused(address)
    assert message.startswith(
        rights_prefix(address)
        + f"create localqueues.kueue.x-k8s.io in {TEAM}; patch localqueues.kueue.x-k8s.io in {TEAM}; "
    )
    assert message.endswith(f"; {CLUSTER_WIDE}{ALLOWED}")
    for namespaced in (
        "trainjobs.trainer.kubeflow.org",
        "rayjobs.ray.io",
        "serviceaccounts",
        "networkpolicies.networking.k8s.io",
    ):
        assert f"create {namespaced} in {TEAM}" in message


@pytest.fixture
def team_user(cluster, tmp_path):
    """A user who may do anything in one namespace and nothing beyond it, as a HyperPod team's or a
    namespace-scoped EKS access policy's identity; and in that namespace a Deployment that runs
    KubeRay's image and one with an env value that must not leave the cluster."""
    rbac, apps = client.RbacAuthorizationV1Api(cluster.api), client.AppsV1Api(cluster.api)
    cluster.core.create_namespace({"metadata": {"name": TEAM}})
    rbac.create_namespaced_role(
        TEAM,
        {"metadata": {"name": "all"}, "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]},
    )
    rbac.create_namespaced_role_binding(
        TEAM,
        {
            "metadata": {"name": "all"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "all"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TEAM}],
        },
    )
    for name, image, env in (
        ("ray-operator", "quay.io/kuberay/operator:v1.7.0", []),
        (
            "team-app",
            "registry.example/team/app:1",
            [{"name": "DB_PASSWORD", "value": "kept-in-the-cluster"}],
        ),
    ):
        labels = {"app": name}
        container = {"name": name, "image": image, "env": env}
        apps.create_namespaced_deployment(
            TEAM,
            {
                "metadata": {"name": name},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                },
            },
        )
    pair = cluster.control_plane.pki.issue(TEAM, TEAM)
    user = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
    yield kubeconfig(cluster, tmp_path / "kubeconfig", user)
    cluster.delete_namespace(TEAM)


def test_a_namespace_scoped_identity_is_read_in_its_namespace_and_told_what_it_lacks(team_user):
    """No 403 sentence: the cluster-wide lists it may not make are kept as refused and its own
    namespace is read instead, where the workload that runs an operator's image is read whole and
    any other as the server's table row (no pod spec, so no env value set by the API); the rights it lacks are the
    cluster-wide creates alone."""
    inventory = read_operators(live_clients(lambda: None), team_user, "reader", TEAM)
    assert {"/apis/apps/v1/deployments", "/apis/apps/v1/daemonsets", "/api/v1/nodes"} <= set(
        inventory.refused
    )
    assert f"/apis/apps/v1/namespaces/{TEAM}/deployments" not in inventory.refused
    operator = inventory.named("Deployment", TEAM, "ray-operator")
    assert operator["spec"]["template"]["spec"]["containers"][0]["image"] == "quay.io/kuberay/operator:v1.7.0"
    app = inventory.named("Deployment", TEAM, "team-app")
    assert set(app) == {"kind", "metadata", "images"}
    assert app["images"] == ["registry.example/team/app:1"]
    assert "kept-in-the-cluster" not in json.dumps(inventory.objects)
    assert rights_refused(team_user) == rights_prefix(team_user) + CLUSTER_WIDE + ALLOWED


def test_an_endpoint_nobody_answers_ends_with_one_sentence(cluster, tmp_path):
    admin = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]
    address = kubeconfig(cluster, tmp_path / "kubeconfig", admin, f"https://127.0.0.1:{unused_port()}")
    assert refused(address) == (
        prefix(address)
        + "it could not be reached or did not answer within 5 s (connect) and 30 s (read): "
        + "NewConnectionError"
        + NOTHING
    )


def release_secret(cluster, namespace: str, release: str, payload: str) -> str:
    """Revision 1 of a Helm release as Helm 3 keeps it (a Secret labelled owner=helm and the release's
    name: helm pkg/storage/driver/secrets.go); its name."""
    name = f"sh.helm.release.v1.{release}.v1"
    label, value = HELM_OWNER_LABEL.split("=")
    cluster.core.create_namespaced_secret(
        namespace,
        {
            "metadata": {"name": name, "labels": {label: value, "name": release}},
            "type": "helm.sh/release.v1",
            "stringData": {"release": payload},
        },
    )
    return name


def test_helm_release_secrets_are_read_as_their_metadata_only(cluster):
    """The real API server answers the metadata-only Accept header with PartialObjectMetadata: the
    release's payload (its rendered manifests and values, credentials among them) is never sent."""
    label, value = HELM_OWNER_LABEL.split("=")
    name = release_secret(cluster, "kube-system", "reader-probe", "a payload that must stay in the cluster")
    try:
        inventory = read(ClusterAddress(kubeconfig_file=str(cluster.kubeconfig), context=CONTEXT))
    finally:
        cluster.core.delete_namespaced_secret(name, "kube-system")
    (secret,) = [o for o in inventory.of_kind("Secret") if o["metadata"]["name"] == name]
    assert secret == {"kind": "Secret", "metadata": secret["metadata"]}
    assert secret["metadata"]["labels"] == {label: value, "name": "reader-probe"}
    assert ("kube-system", "reader-probe") in inventory.helm_releases()


# Linux's own limit on a connect that gets no answer (net.ipv4.tcp_syn_retries 6: 1+2+...+64 s).
KERNEL_GIVES_UP_SECONDS = 127
# A server that stalls stops after this long, so that a read without its timeouts ends in a
# different error instead of hanging the suite.
STALL_SECONDS = 20


@pytest.fixture
def short_timeouts(monkeypatch):
    """The read's timeouts at 1 s each: what is under test is that they bound every request."""
    monkeypatch.setattr(cluster_access, "CONNECT_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(cluster_access, "READ_TIMEOUT_SECONDS", 1.0)


def timed_out(kind: str) -> str:
    return f"it could not be reached or did not answer within 1 s (connect) and 1 s (read): {kind}" + NOTHING


def test_an_address_that_never_completes_a_connection_ends_at_the_connect_timeout(
    cluster, tmp_path, short_timeouts
):
    """A listener whose accept queue is full: Linux drops further SYNs, so a connect hangs as it does
    to an address behind a firewall that drops packets."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):  # the queue holds backlog + 1; the rest are left pending
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        admin = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]
        address = kubeconfig(cluster, tmp_path / "kubeconfig", admin, f"https://127.0.0.1:{port}")
        # Without a connect timeout the kernel gives up after its SYN retries (about 127 s) with the
        # same error: the read must have ended long before that.
        ended: list[str] = []
        reader = threading.Thread(target=lambda: ended.append(refused(address)), daemon=True)
        reader.start()
        reader.join(KERNEL_GIVES_UP_SECONDS / 2)
        assert ended == [prefix(address) + timed_out("ConnectTimeoutError")]
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_a_server_that_takes_the_request_and_never_answers_ends_at_the_read_timeout(
    cluster, tmp_path, short_timeouts
):
    """TLS completes with a certificate the kubeconfig trusts, the request is read, no answer comes."""
    pair = cluster.control_plane.pki.issue("stalling-server", "127.0.0.1", server=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    done = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(65536)
            done.wait(STALL_SECONDS)

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        admin = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]
        server_url = f"https://127.0.0.1:{listener.getsockname()[1]}"
        address = kubeconfig(cluster, tmp_path / "kubeconfig", admin, server_url)
        assert refused(address) == prefix(address) + timed_out("ReadTimeoutError")
    finally:
        done.set()
        server.join(5)
        listener.close()


def test_helm_release_secrets_of_other_namespaces_are_not_read(cluster):
    """The stack reads Helm's release Secrets only where its own releases live: a team's release in
    its own namespace is neither listed nor reported."""
    namespace = "team-elsewhere"
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    release_secret(cluster, namespace, "team-app", "another team's release")
    try:
        inventory = read(ClusterAddress(kubeconfig_file=str(cluster.kubeconfig), context=CONTEXT))
    finally:
        cluster.delete_namespace(namespace)
    assert not [o for o in inventory.of_kind("Secret") if o["metadata"].get("namespace") == namespace]
    assert (namespace, "team-app") not in inventory.helm_releases()
