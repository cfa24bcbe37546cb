"""The offline cluster answers the official Kubernetes client as the API server does: lists by
resource, namespace, label and field selector, one object by name, metadata only when asked for
PartialObjectMetadataList; anything it does not serve is a 404."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from offline.engine.cluster_answers import OfflineCluster, split_facts

OBJECTS = [
    {
        "kind": "Secret",
        "metadata": {"name": "sh.helm.release.v1.a.v1", "namespace": "x", "labels": {"owner": "helm"}},
    },
    {"kind": "Secret", "metadata": {"name": "token", "namespace": "x"}},
    {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "training"}, "data": {"k": "v"}},
    {"kind": "ConfigMap", "metadata": {"name": "b", "namespace": "training"}},
    {"kind": "ConfigMap", "metadata": {"name": "a", "namespace": "other"}},
]


def test_lists_are_answered_through_the_real_client():
    cluster = OfflineCluster(OBJECTS)
    core = client.CoreV1Api(cluster.connect(None))
    helm = core.list_secret_for_all_namespaces(label_selector="owner=helm").items
    (mine,) = core.list_namespaced_config_map("training", field_selector="metadata.name=a").items
    named = core.read_namespaced_config_map("a", "other")
    with pytest.raises(ApiException) as err:
        core.list_persistent_volume()
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("c", "training")
    assert [s.metadata.name for s in helm] == ["sh.helm.release.v1.a.v1"]
    assert (mine.metadata.namespace, mine.data) == ("training", {"k": "v"})
    assert named.metadata.namespace == "other"
    assert err.value.status == 404 and missing.value.status == 404
    assert cluster.requests[0].path == "/api/v1/secrets"


def test_a_metadata_only_list_holds_no_payload():
    with_payload = [{**OBJECTS[0], "data": {"release": "H4sI..."}}]
    status, listed = OfflineCluster(with_payload).get(
        "/api/v1/namespaces/x/secrets", {}, "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
    )
    assert status == 200 and listed["kind"] == "PartialObjectMetadataList"
    assert listed["items"] == [
        {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": OBJECTS[0]["metadata"]}
    ]


def test_cluster_facts_are_kept_apart_from_the_accounts():
    account, objects = split_facts({"quota:L-DB2E81BA": 0, "cluster-objects:a": OBJECTS[:1]})
    assert account == {"quota:L-DB2E81BA": 0} and objects == OBJECTS[:1]
    with pytest.raises(ValueError, match="cluster fact cluster-objects:b: a list of Kubernetes objects"):
        split_facts({"cluster-objects:b": [{"metadata": {}}]})
