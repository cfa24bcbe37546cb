"""The read a `pulumi up` makes of a cluster it did not create, against the real API server: a user
it refuses (401) or does not authorize (403) and an endpoint nobody answers at each end the program
with one sentence; Helm's release Secrets come back as their metadata only, never their payload."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.pki import Pki
from support.ports import unused_port

from account_checks.cluster_access import ClusterAddress, ClusterReadError, live_clients
from account_checks.cluster_inventory import HELM_OWNER_LABEL
from account_checks.operator_decisions import CRD_NAMES, read_operators

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


def test_a_user_the_cluster_does_not_authorize_ends_with_one_sentence(cluster, tmp_path):
    nobody = cluster.control_plane.pki.issue("nobody", "nobody")
    user = {"client-certificate": str(nobody.cert), "client-key": str(nobody.key)}
    address = kubeconfig(cluster, tmp_path / "kubeconfig", user)
    assert refused(address) == (
        prefix(address)
        + "it answered 403 Forbidden to GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
        + f"{CRD_NAMES[0]}: the user of its context {CONTEXT} may not read that"
        + NOTHING
    )


def test_an_endpoint_nobody_answers_ends_with_one_sentence(cluster, tmp_path):
    admin = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]
    address = kubeconfig(cluster, tmp_path / "kubeconfig", admin, f"https://127.0.0.1:{unused_port()}")
    assert refused(address) == (
        prefix(address)
        + "it could not be reached or did not answer within 5 s (connect) and 30 s (read): "
        + "NewConnectionError"
        + NOTHING
    )


def test_helm_release_secrets_are_read_as_their_metadata_only(cluster):
    """The real API server answers the metadata-only Accept header with PartialObjectMetadata: the
    release's payload (its rendered manifests and values, credentials among them) is never sent."""
    name = "sh.helm.release.v1.reader-probe.v1"
    label, value = HELM_OWNER_LABEL.split("=")
    cluster.core.create_namespaced_secret(
        "kube-system",
        {
            "metadata": {"name": name, "labels": {label: value, "name": "reader-probe"}},
            "type": "helm.sh/release.v1",
            "stringData": {"release": "a payload that must stay in the cluster"},
        },
    )
    try:
        inventory = read(ClusterAddress(kubeconfig_file=str(cluster.kubeconfig), context=CONTEXT))
    finally:
        cluster.core.delete_namespaced_secret(name, "kube-system")
    (secret,) = [o for o in inventory.of_kind("Secret") if o["metadata"]["name"] == name]
    assert secret == {"kind": "Secret", "metadata": secret["metadata"]}
    assert secret["metadata"]["labels"] == {label: value, "name": "reader-probe"}
    assert ("kube-system", "reader-probe") in inventory.helm_releases()
