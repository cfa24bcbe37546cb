"""The offline cluster answers the official Kubernetes client as the API server does: lists by
resource, namespace, label and field selector; anything it does not serve is a 404."""

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
    api = client.ApiClient(client.Configuration(host="https://cluster.offline"))
    core = client.CoreV1Api(api)
    with OfflineCluster(OBJECTS).answers():
        helm = core.list_secret_for_all_namespaces(label_selector="owner=helm").items
        (mine,) = core.list_namespaced_config_map("training", field_selector="metadata.name=a").items
        with pytest.raises(ApiException) as err:
            core.list_node()
    assert [s.metadata.name for s in helm] == ["sh.helm.release.v1.a.v1"]
    assert (mine.metadata.namespace, mine.data) == ("training", {"k": "v"})
    assert err.value.status == 404


def test_cluster_facts_are_kept_apart_from_the_accounts():
    account, objects = split_facts({"quota:L-DB2E81BA": 0, "cluster-objects:a": OBJECTS[:1]})
    assert account == {"quota:L-DB2E81BA": 0} and objects == OBJECTS[:1]
    with pytest.raises(ValueError, match="cluster fact cluster-objects:b: a list of Kubernetes objects"):
        split_facts({"cluster-objects:b": [{"metadata": {}}]})
