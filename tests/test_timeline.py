"""The time-to-up estimate: the longest dependency chain, weighted by typical provisioning times."""

from __future__ import annotations

from offline.engine import Registration
from offline.timeline import critical_path, describe


def reg(name: str, type_: str, deps: tuple[str, ...] = (), parent: str | None = None, custom=True, **inputs):
    return Registration(
        urn=f"urn:{name}",
        type=type_,
        name=name,
        parent=f"urn:{parent}" if parent else None,
        custom=custom,
        inputs=inputs,
        dependencies=[f"urn:{d}" for d in deps],
    )


def test_the_longest_weighted_chain_wins_not_the_longest_list():
    resources = [
        reg("vpc", "aws:ec2/vpc:Vpc"),
        reg("eks", "eks:index:Cluster", ("vpc",)),
        reg("system", "eks:index:ManagedNodeGroup", ("eks",), amiType="AL2023_x86_64_STANDARD"),
        reg("gpu", "eks:index:ManagedNodeGroup", ("eks",), amiType="AL2023_x86_64_NVIDIA"),
        reg("a", "aws:iam/role:Role"),
        reg("b", "aws:iam/rolePolicy:RolePolicy", ("a",)),
        reg("c", "aws:iam/rolePolicy:RolePolicy", ("b",)),
    ]
    chain = critical_path(resources)
    assert [s.name for s in chain] == ["vpc", "eks", "gpu"]
    assert chain[-1].done_at == 0.5 + 12.0 + 5.0


def test_waiting_on_a_component_waits_on_its_children():
    resources = [
        reg("ops", "trainstack:operators:ClusterOperators", custom=False),
        reg("slow", "kubernetes:helm.sh/v3:Release", parent="ops"),
        reg("fast", "kubernetes:core/v1:Namespace", parent="ops"),
        reg("job", "kubernetes:kubeflow.org/v1:PyTorchJob", ("ops",)),
    ]
    chain = critical_path(resources, until={"urn:job"})
    assert [s.name for s in chain] == ["slow", "job"]
    # The first job on a node group pulls the image (5 min) after the operator (1.25 min).
    assert describe(chain)[0] == "Estimated first `pulumi up`: ~6 min until training starts:"


def test_a_remote_components_children_take_no_time_of_their_own():
    resources = [
        reg("eks", "eks:index:Cluster", custom=False),
        reg("eks-coredns", "aws:eks/addon:Addon", parent="eks"),
    ]
    assert [s.name for s in critical_path(resources)] == ["eks"]


def test_operators_are_not_behind_gpu_nodes(prod_plan):
    ops = {
        r.urn for r in prod_plan.resources if r.type.startswith("kubernetes:helm") or "kustomize" in r.type
    }
    chain = critical_path(prod_plan.resources, until=ops)
    assert "gpu-p5" not in [s.name for s in chain]
    assert [s.name for s in chain if s.minutes >= 1] == ["eks", "eks-system", chain[-1].name]
