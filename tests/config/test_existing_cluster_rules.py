"""The rules of a stack on a cluster trainstack did not create (`trainstack:existingCluster`): what
only a created cluster or group can have, what a kubeconfig stack cannot, each refusal naming its key."""

from __future__ import annotations

import pytest
from support.plans import EXISTING_CLUSTER as CLUSTER
from support.plans import plan

from config.schema import ConfigError


def problems(stack: str, **overrides) -> list[str]:
    with pytest.raises(ConfigError) as err:
        plan(stack, facts=CLUSTER, **overrides)
    return [str(p) for p in err.value.problems]


def test_a_described_group_needs_a_selector_and_a_known_instance_type():
    found = problems(
        "existing", gpuNodeGroups=[{"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2}]
    )
    assert found[0].startswith("trainstack:gpuNodeGroups[0].nodeSelector = null: on an existing cluster")
    found = problems(
        "existing",
        gpuNodeGroups=[{"name": "p5", "instanceType": "p9.huge", "nodeSelector": {"pool": "gpu"}}],
        jobs=[],
    )
    assert found[0].startswith(
        'trainstack:gpuNodeGroups[0].instanceType = "p9.huge": not in the offline catalog; `pulumi preview` '
        "asks EC2"
    )


def test_what_only_a_created_group_has_is_refused_on_an_existing_cluster():
    group = {
        "name": "p5",
        "instanceType": "p5.48xlarge",
        "nodeSelector": {"pool": "gpu"},
        "placementGroup": True,
    }
    (found,) = problems("existing", gpuNodeGroups=[group], jobs=[])
    assert found == (
        "trainstack:gpuNodeGroups[0].placementGroup = true: only for node groups trainstack creates; "
        "allowed: unset on an existingCluster"
    )
    created = problems(
        "dev", gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge", "nodeSelector": {"a": "b"}}]
    )
    assert created[0].startswith("trainstack:gpuNodeGroups[0].nodeSelector = {")


def test_a_kubeconfig_stack_refuses_what_needs_aws():
    found = problems("local", image={"builder": "codebuild"})
    assert found[0].startswith(
        'trainstack:image.builder = "codebuild": a kubeconfig stack uses no AWS account'
    )
    both = {"eksClusterName": "ml-platform", "kubeconfig": "~/.kube/config", "checkpointHostPath": "/x"}
    found = problems("local", existingCluster=both)
    assert any(p.startswith("trainstack:existingCluster = ") and "names two clusters" in p for p in found)
    nowhere = {"kubeconfig": "~/.kube/config", "kindClusterName": "trainstack"}
    found = problems("local", existingCluster=nowhere)
    assert any("keeps checkpoints on a node path, in S3 or on a claim" in p for p in found)
    none_image = problems("local", image={"builder": "none"})
    assert (
        none_image[0]
        == "trainstack:jobs[0].image = null: image.builder is none: nothing builds one; allowed: an image reference"
    )
