"""Reading a cluster the stack did not create: through a real HTTP connection with the official
client, a refusal (401, 403), an endpoint that refuses or never answers, or a kubeconfig that does
not load ends in one sentence, never a traceback or a hang; Helm's release Secrets are read as
metadata only (their payload never leaves the API server), in the stack's release namespaces only."""

from __future__ import annotations

import socket
import threading

import pytest
import yaml
from support.kube_server import FakeCluster, KubeServer
from support.plans import EXISTING_CLUSTER, plan

from account_checks import cluster_access
from account_checks.cluster_access import METADATA_ONLY, TABLE, ClusterAddress, ClusterReadError, live_clients
from account_checks.operator_decisions import read_operators
from offline.engine.cluster_answers import OfflineCluster


def no_session():
    raise AssertionError("a kubeconfig cluster needs no AWS session")


def kubeconfig_to(tmp_path, server: str) -> ClusterAddress:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "contexts": [{"name": "team", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "team",
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return ClusterAddress(kubeconfig_file=str(path), context="team")


def read(address: ClusterAddress) -> str:
    with pytest.raises(ClusterReadError) as err:
        read_operators(live_clients(no_session), address, "existing")
    return str(err.value)


def named(address: ClusterAddress) -> str:
    return f"stack 'existing': the cluster trainstack:existingCluster.kubeconfig = {address.kubeconfig_file} (context team)"


def test_a_refusal_is_one_sentence(tmp_path):
    with KubeServer(FakeCluster(refuse=401)) as server:
        message = read(kubeconfig_to(tmp_path, server.url))
    address = kubeconfig_to(tmp_path, server.url)
    why = "it answered 401 Unauthorized: it does not accept the credentials of the user of its context team"
    assert message == f"{named(address)} could not be read before deploying to it: {why}; nothing was created"


def test_reads_the_identity_may_not_make_are_kept_as_refused_not_fatal(tmp_path):
    """A 403 is an answer: what the identity may not read is kept for the decisions to name, and
    the workloads refused cluster-wide are asked for in the namespaces the stack concerns."""
    with KubeServer(FakeCluster(refuse=403)) as server:
        inventory = read_operators(
            live_clients(no_session), kubeconfig_to(tmp_path, server.url), "existing", "team-a"
        )
    assert inventory.objects == ()
    assert "/apis/apps/v1/deployments" in inventory.refused
    assert "/apis/apps/v1/namespaces/team-a/daemonsets" in inventory.refused
    assert inventory.hidden("Deployment") == tuple(
        f"/apis/apps/v1{where}/deployments"
        for where in (
            "",
            *(
                f"/namespaces/{ns}"
                for ns in ("kube-system", "kubeflow-system", "kuberay-system", "kueue-system", "team-a")
            ),
        )
    )


def test_an_endpoint_nobody_listens_on_is_one_sentence(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = kubeconfig_to(tmp_path, f"http://127.0.0.1:{port}")
    assert read(address) == (
        f"{named(address)} could not be read before deploying to it: it could not be reached or did not answer "
        "within 5 s (connect) and 30 s (read): NewConnectionError; nothing was created"
    )


def test_an_endpoint_that_never_answers_is_read_with_a_timeout(tmp_path, monkeypatch):
    """The kernel accepts the connection (listen backlog) and nothing ever answers: the read timeout
    ends the wait (shortened here from its 30 s)."""
    monkeypatch.setattr(cluster_access, "READ_TIMEOUT_SECONDS", 0.2)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    address = kubeconfig_to(tmp_path, f"http://127.0.0.1:{silent.getsockname()[1]}")
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(read(address)), daemon=True)
    reader.start()
    reader.join(60)  # a guard: without a timeout the read never returns
    silent.close()
    assert result == [
        f"{named(address)} could not be read before deploying to it: it could not be reached or did not answer "
        "within 5 s (connect) and 0.2 s (read): ReadTimeoutError; nothing was created"
    ]


def test_a_kubeconfig_that_does_not_load_is_one_sentence(tmp_path):
    address = ClusterAddress(kubeconfig_file=str(tmp_path / "missing"), context="team")
    message = read(address)
    assert message.startswith(
        f"{named(address)} could not be read before deploying to it: its kubeconfig does not load ("
    )
    assert message.endswith("); nothing was created")


HELM_SECRET = {
    "kind": "Secret",
    "type": "helm.sh/release.v1",
    "metadata": {
        "name": "sh.helm.release.v1.kueue.v1",
        "namespace": "kueue-system",
        "labels": {"name": "kueue", "owner": "helm", "status": "deployed", "version": "1"},
    },
    "data": {
        "release": "SDRzSUFBQUFBQUFBLyp5VlhXL2JPQkw5S3dzOVN6Wmx5N0lqWUI4OHRvMk5tM3F0Mk5ZdDdtTE5yWHJRalNUUmFGRVNjbEg="
    },
}
ELSEWHERE = {
    "kind": "Secret",
    "metadata": {"name": "sh.helm.release.v1.app.v3", "namespace": "team-a", "labels": {"owner": "helm", "name": "app"}},
    "data": {"release": "cGF5bG9hZA=="},
}  # fmt: skip


def test_helm_releases_are_read_as_metadata_in_the_release_namespaces_only():
    cluster = OfflineCluster([HELM_SECRET, ELSEWHERE])
    inventory = read_operators(cluster.connect, ClusterAddress(kubeconfig_file="k"), "existing")
    assert inventory.of_kind("Secret") == [{"kind": "Secret", "metadata": HELM_SECRET["metadata"]}]
    secrets = [r for r in cluster.requests if r.path.endswith("/secrets")]
    assert [(r.path, r.query, r.accept) for r in secrets] == [
        (f"/api/v1/namespaces/{ns}/secrets", {"labelSelector": "owner=helm"}, METADATA_ONLY)
        for ns in ("kube-system", "kubeflow-system", "kuberay-system", "kueue-system")
    ]
    # Everything else it asks for is a named CRD, the operators' workloads, the nodes' metadata, or
    # Kueue's ConfigMap.
    others = {r.path for r in cluster.requests} - {r.path for r in secrets}
    (nodes,) = [r for r in cluster.requests if r.path == "/api/v1/nodes"]
    assert nodes.accept == METADATA_ONLY
    assert others == {
        "/api/v1/nodes",
        "/apis/apps/v1/deployments",
        "/apis/apps/v1/daemonsets",
        *(
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
            for name in (
                "pytorchjobs.kubeflow.org",
                "rayjobs.ray.io",
                "rayclusters.ray.io",
                "trainjobs.trainer.kubeflow.org",
                "clustertrainingruntimes.trainer.kubeflow.org",
                "jobsets.jobset.x-k8s.io",
                *(
                    f"{p}.kueue.x-k8s.io"
                    for p in ("clusterqueues", "localqueues", "resourceflavors", "workloads")
                ),
            )
        ),
    }


def test_the_plan_reads_the_cluster_through_the_factory_it_is_given():
    run = plan("existing", facts=EXISTING_CLUSTER)
    assert {r.path for r in run.cluster_requests} >= {"/apis/apps/v1/deployments", "/apis/apps/v1/daemonsets"}


def deployment(namespace: str, name: str, image: str, env: list[dict] | None = None) -> dict:
    container = {"name": name, "image": image, "env": env or []}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"spec": {"containers": [container]}},
        },
    }


def test_workloads_are_listed_as_tables_and_only_operators_read_whole():
    """Every Deployment and DaemonSet is asked for as the server's table (names, labels, images); only
    one that runs an operator's image is read whole, so a team's env values stay in the cluster."""
    app = deployment("team-a", "app", "registry.example/app:1", [{"name": "DB_PASSWORD", "value": "s3cret"}])
    ray = deployment("ray-system", "kuberay-operator", "quay.io/kuberay/operator:v1.7.0")
    cluster = OfflineCluster([app, ray])
    inventory = read_operators(cluster.connect, ClusterAddress(kubeconfig_file="k"), "existing")
    assert inventory.named("Deployment", "team-a", "app") == {
        "kind": "Deployment",
        "metadata": app["metadata"],
        "images": ["registry.example/app:1"],
    }
    assert inventory.named("Deployment", "ray-system", "kuberay-operator")["spec"] == ray["spec"]
    lists = [(r.path, r.accept) for r in cluster.requests if r.path.endswith(("/deployments", "/daemonsets"))]
    assert lists == [(f"/apis/apps/v1/{kind}", TABLE) for kind in ("deployments", "daemonsets")]
    whole = [r.path for r in cluster.requests if "/deployments/" in r.path]
    assert whole == ["/apis/apps/v1/namespaces/ray-system/deployments/kuberay-operator"]
