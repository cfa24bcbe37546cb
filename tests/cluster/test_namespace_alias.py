"""A stack from before attached clusters got a NamespacePatch held its training namespace as a plain
Namespace; today's TrainingPodIdentity declares a NamespacePatch with an alias to that type
(components/pod_identity.py). Through the real engine and provider: a program of the component alone
brings the namespace up as a Namespace (`existing_cluster` false, as those releases did), the user
puts their own object in it, then the same stack runs with `existing_cluster` true. The alias makes
it one resource: the preview deletes and replaces nothing, the namespace keeps its uid and the user's
object, and `destroy` lets the namespace go without deleting it (a patch gives up its fields only).
Without the alias the engine would create the patch and delete the Namespace, and with it the user's
objects."""

from __future__ import annotations

import textwrap

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import CLUSTER_GROUP

pytestmark = CLUSTER_GROUP

STACK = "namespace-alias"
NAMESPACE = "alias-training"
# The component alone, on the harness's cluster: the stack's own code, not a stand-in.
PROGRAM = textwrap.dedent(
    """
    import pulumi
    import pulumi_kubernetes as k8s

    from components.pod_identity import TrainingPodIdentity, TrainingPodIdentityArgs

    config = pulumi.Config()
    provider = k8s.Provider("cluster", kubeconfig=config.require("kubeconfig"))
    TrainingPodIdentity(
        "training",
        TrainingPodIdentityArgs(
            provider=provider,
            eks=None,
            namespace=config.require("namespace"),
            existing_cluster=config.require_bool("existingCluster"),
        ),
    )
    """
)


@pytest.fixture(scope="module")
def aliased(cluster, tmp_path_factory):
    source = tmp_path_factory.mktemp("namespace-alias-program")
    (source / "__main__.py").write_text(PROGRAM)
    engine = Engine(
        tmp_path_factory.mktemp("namespace-alias"), cluster.bin_dir, STACK, cluster.objects, source
    )
    engine.config = {
        "trainstack:kubeconfig": cluster.kubeconfig.read_text(),
        "trainstack:namespace": NAMESPACE,
    }
    yield engine


def run(engine: Engine, existing: bool, operation: str):
    engine.configure({**engine.config, "trainstack:existingCluster": existing})
    outcome = engine(operation)
    assert outcome.returncode == 0, str(outcome)
    return outcome


def test_a_namespace_held_as_a_namespace_is_taken_over_by_the_patch_not_deleted(cluster, aliased):
    run(aliased, False, "up")
    namespace = cluster.objects.get("v1", "Namespace", NAMESPACE)
    user_data = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "claims", "namespace": NAMESPACE},
    }
    cluster.objects.apply(user_data)
    preview = run(aliased, True, "preview")
    assert not set(preview.changes) - {"same", "update"}, preview.changes
    run(aliased, True, "up")
    assert (
        cluster.objects.get("v1", "Namespace", NAMESPACE)["metadata"]["uid"] == namespace["metadata"]["uid"]
    )
    assert cluster.objects.get("v1", "ConfigMap", "claims", NAMESPACE)
    run(aliased, True, "destroy")
    kept = cluster.objects.get("v1", "Namespace", NAMESPACE)
    assert kept is not None and not kept["metadata"].get("deletionTimestamp")
    assert kept["metadata"]["uid"] == namespace["metadata"]["uid"]
    cluster.core.delete_namespace(NAMESPACE)
    cluster.leaving.add(NAMESPACE)  # later tests wait for it to go
