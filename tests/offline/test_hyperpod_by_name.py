"""A HyperPod cluster named by its own name (`existingCluster.hyperPodClusterName`,
account_checks/hyperpod_cluster.py): SageMaker's DescribeCluster, answered here by the offline
account as the API shapes it, gives the EKS cluster the stack deploys onto and the types its
instance groups run. The plan is then the template's, cluster for cluster; a name SageMaker does
not know, a Slurm cluster, one not yet in service and a group of a type HyperPod does not run each
stop the program with one sentence before anything is registered."""

from __future__ import annotations

import json

import pytest
from support.cluster_objects import as_facts, hyperpod_dependencies
from support.paths import ROOT

from account_checks.hyperpod_cluster import resolve_hyperpod
from config import parse_config
from config.schema import ConfigError
from offline.engine import run_program
from offline.stack_file import read_stack_file

EKS = "sagemaker-test-cluster"
EKS_FACT = {f"eks-cluster:{EKS}": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}}
HYPERPOD = {
    "hyperpod-cluster:ml-cluster": {"eksCluster": EKS, "instanceGroups": {"workers": "ml.g5.8xlarge"}}
}


def by_name(values: dict[str, str], name: str = "ml-cluster") -> dict[str, str]:
    existing = json.loads(values["trainstack:existingCluster"])
    existing.pop("eksClusterName")
    return {**values, "trainstack:existingCluster": json.dumps({**existing, "hyperPodClusterName": name})}


@pytest.fixture(scope="module")
def template():
    values, secret_keys = read_stack_file(ROOT / "Pulumi.hyperpod.yaml")
    return values, secret_keys, {**EKS_FACT, **as_facts(EKS, hyperpod_dependencies())}


def test_by_its_own_name_the_plan_is_the_one_by_its_eks_clusters_name(template):
    values, secret_keys, facts = template
    named = run_program("hyperpod", by_name(values), secret_keys, facts={**facts, **HYPERPOD})
    eks = run_program("hyperpod", values, secret_keys, facts=facts)
    assert sorted((r.type, r.name) for r in named.resources) == sorted(
        (r.type, r.name) for r in eks.resources
    )
    assert named.outputs["clusterName"] == EKS
    (report,) = [m for m in named.messages if m.startswith("Cluster operators")]
    assert "reuse" in report  # what HyperPod already runs is read on its EKS cluster


@pytest.mark.parametrize(
    "fact, said",
    [
        (None, "no HyperPod cluster named ml-cluster in this region (aws sagemaker list-clusters lists them)"),
        ({"eksCluster": None, "instanceGroups": {"workers": "ml.g5.8xlarge"}},
         "HyperPod cluster ml-cluster is orchestrated by Slurm, not EKS: trainstack deploys onto EKS"),
        ({"eksCluster": EKS, "instanceGroups": {"workers": "ml.g5.8xlarge"}, "status": "Creating"},
         "HyperPod cluster ml-cluster is Creating; deploy once it is InService"),
        ({"eksCluster": EKS, "instanceGroups": {"workers": "ml.p5.48xlarge", "cpu": "ml.m5.2xlarge"}},
         "gpuNodeGroups[0] (g5) is ml.g5.8xlarge, which no instance group of ml-cluster runs (its instance "
         "groups: cpu (ml.m5.2xlarge), workers (ml.p5.48xlarge)); set its instanceType to one of them"),
    ],
)  # fmt: skip
def test_what_sagemaker_answers_that_the_stack_cannot_deploy_onto_stops_it_with_a_sentence(
    template, fact, said
):
    values, secret_keys, facts = template
    given = {**facts, **({"hyperpod-cluster:ml-cluster": fact} if fact else {})}
    with pytest.raises(Exception) as err:
        run_program("hyperpod", by_name(values), secret_keys, facts=given)
    assert str(err.value) == (
        f"stack 'hyperpod': trainstack:existingCluster.hyperPodClusterName: {said}; nothing was created"
    ), str(err.value)


def test_a_flexible_instance_group_answers_its_current_types(template):
    """A flexible instance group has no InstanceType: its current types (InstanceRequirements)."""
    values, secret_keys, facts = template
    flexible = {"eksCluster": EKS, "instanceGroups": {"workers": ["ml.g5.12xlarge", "ml.g5.8xlarge"]}}
    run = run_program(
        "hyperpod", by_name(values), secret_keys, facts={**facts, "hyperpod-cluster:ml-cluster": flexible}
    )
    assert run.outputs["clusterName"] == EKS


class SageMaker:
    """A session whose SageMaker answers DescribeCluster with `answer`."""

    def __init__(self, answer: dict):
        self.answer = answer

    def client(self, service: str):
        assert service == "sagemaker"
        return self

    def describe_cluster(self, ClusterName: str) -> dict:
        return self.answer


def test_a_gpu_group_of_an_ec2_type_is_its_eks_clusters_not_hyperpods(template):
    """Only a group of a SageMaker (`ml.`) type is looked for among the instance groups."""
    values, secret_keys, _ = template
    groups = json.loads(values["trainstack:gpuNodeGroups"])
    eks_group = {"name": "g6", "instanceType": "g6.xlarge", "nodeCount": 1, "nodeSelector": {"pool": "g6"}}
    given = {**by_name(values), "trainstack:gpuNodeGroups": json.dumps([*groups, eks_group])}
    cfg = parse_config("hyperpod", given, frozenset(secret_keys))
    answer = {
        "ClusterStatus": "InService",
        "Orchestrator": {"Eks": {"ClusterArn": f"arn:aws:eks:us-east-1:123456789012:cluster/{EKS}"}},
        "InstanceGroups": [{"InstanceGroupName": "workers", "InstanceType": "ml.g5.8xlarge"}],
    }
    resolved = resolve_hyperpod(cfg, lambda: SageMaker(answer))
    assert resolved.existing_cluster.eks_cluster_name == EKS


def test_one_cluster_is_named_once(template):
    values, secret_keys, _ = template
    existing = json.loads(values["trainstack:existingCluster"]) | {"hyperPodClusterName": "ml-cluster"}
    with pytest.raises(ConfigError) as err:
        parse_config(
            "hyperpod", {**values, "trainstack:existingCluster": json.dumps(existing)}, frozenset(secret_keys)
        )
    (problem,) = [str(p) for p in err.value.problems if "names two clusters" in str(p)]
    assert problem.startswith(
        'trainstack:existingCluster = "eksClusterName and hyperPodClusterName": names two clusters'
    ), problem


def test_the_plan_says_which_deep_health_checks_hyperpod_runs_on_each_groups_new_nodes(template):
    """HyperPod gates its own nodes: the stack runs no gate there and changes nothing of the cluster,
    it says per GPU group what the instance groups serving it check, and what their owner adds."""
    values, secret_keys, facts = template
    checked = {
        "hyperpod-cluster:ml-cluster": {
            "eksCluster": EKS,
            "instanceGroups": {"workers": "ml.g5.8xlarge", "more-workers": "ml.g5.8xlarge"},
            "deepHealthChecks": {
                "workers": ["InstanceStress", "InstanceConnectivity"],
                "more-workers": ["InstanceStress"],
            },
        }
    }
    run = run_program("hyperpod", by_name(values), secret_keys, facts={**facts, **checked})
    (said,) = [m for m in run.messages if m.startswith("Node health")]
    lines = said.splitlines()
    assert "every job pod requires its health agents' Schedulable label" in lines[0]
    assert lines[1:] == [
        "  WARN  g5: instance group more-workers (ml.g5.8xlarge) runs InstanceStress; the cluster's owner adds "
        "InstanceConnectivity to the instance group's OnStartDeepHealthChecks (aws sagemaker update-cluster)",
        "  ok    g5: instance group workers (ml.g5.8xlarge) runs InstanceStress, InstanceConnectivity",
    ]
    assert not [r for r in run.resources if "health-gate" in r.name]


def test_an_instance_group_without_deep_health_checks_is_named(template):
    values, secret_keys, facts = template
    run = run_program("hyperpod", by_name(values), secret_keys, facts={**facts, **HYPERPOD})
    (said,) = [m for m in run.messages if m.startswith("Node health")]
    assert "workers (ml.g5.8xlarge) runs none: its new nodes join untested" in said
