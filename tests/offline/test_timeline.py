"""The time-to-up estimate: the longest dependency chain, weighted by typical provisioning times."""

from __future__ import annotations

from conventions import NODE_GROUP_LABEL
from domain.catalog import image_compressed_gb
from offline.engine import Registration
from offline.timeline import critical_path, describe, job_start_minutes


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


POD = {"template": {"spec": {"containers": [{"name": "trainer", "image": "training"}]}}}


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
        reg("job", "kubernetes:kubeflow.org/v1:PyTorchJob", ("ops",), metadata={"name": "job"}, spec=POD),
    ]
    chain = critical_path(resources, until={"urn:job"}, image_gb=17.5)
    assert [s.name for s in chain] == ["slow", "job"]
    # The first job on a node group pulls the image (17.5 GB at 3.5 GB/min) and starts (0.5 min)
    # after the operator (1.25 min).
    assert chain[-1].done_at == 1.25 + 5.0 + 0.5
    assert describe(chain)[0] == "Estimated first `pulumi up`: ~7 min until training starts:"


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
    assert [s.name for s in chain if s.minutes >= 1][:2] == ["eks", "eks-system"]


def test_a_job_on_a_group_at_zero_waits_for_nodes_and_pulls_the_image_every_time():
    resources = [
        reg(
            "gpu",
            "eks:index:ManagedNodeGroup",
            amiType="AL2023_x86_64_NVIDIA",
            scalingConfig={"desiredSize": 0},
            labels={NODE_GROUP_LABEL: "p5"},
        ),
        *(
            reg(
                name,
                "kubernetes:kubeflow.org/v1:PyTorchJob",
                ("gpu",),
                metadata={"name": name, "namespace": "training", "labels": {NODE_GROUP_LABEL: "p5"}},
                spec=POD,
            )
            for name in ("first", "second")
        ),
    ]
    starts = job_start_minutes(resources, image_gb=7.0)
    # Both pay the node join (5), a 7 GB pull at 3.5 GB/min (2) and the start with its node check.
    assert {name: s.total for name, s in starts.items()} == {"first": 8.0, "second": 8.0}
    # The empty group itself is created in a CPU group's time: no node joins it yet.
    chain = critical_path(resources, image_gb=7.0)
    assert [s.minutes for s in chain] == [2.25, 8.0]


def test_a_job_on_the_idle_prod_stack_trains_within_ten_minutes_of_admission(prod_plan):
    cfg_image = image_compressed_gb("pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime")
    starts = job_start_minutes(prod_plan.resources, cfg_image)
    assert set(starts) == {"llama-1b-fsdp", "llama-1b-ray"}
    for start in starts.values():
        assert start.provision == 5.0 and start.total < 10
    # The devel base would pull ~6 GB more on every fresh node.
    assert image_compressed_gb("pytorch/pytorch:2.9.1-cuda12.8-cudnn9-devel") - cfg_image == 6.0


def workload(name: str, *images: str, deps: tuple[str, ...] = ()) -> Registration:
    containers = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    return reg(
        name,
        "kubernetes:ray.io/v1:RayJob",
        deps,
        metadata={"name": name, "namespace": "training", "labels": {NODE_GROUP_LABEL: "g5"}},
        spec={"template": {"spec": {"containers": containers}}},
    )


def test_each_image_is_pulled_at_its_own_size_once_per_group_with_nodes():
    sizes = {"training": 7.0, "verl": 14.0}
    resources = [workload("train", "training"), workload("grpo", "verl", "training")]
    starts = job_start_minutes(resources, sizes.__getitem__, namespace="training")
    assert starts["train"].pull == 2.0  # 7 GB at 3.5 GB a minute
    # The training image is on the group's nodes already; VERL's is not: 14 GB, 4 minutes.
    assert starts["grpo"].pull == 4.0


def test_a_job_waits_for_its_datasets_preparation_and_the_first_up_counts_it_once():
    resources = [
        reg("prepare", "kubernetes:batch/v1:Job", metadata={"name": "data-c4-abc"}),
        workload("train", "training", deps=("prepare",)),
    ]
    starts = job_start_minutes(resources, 7.0, namespace="training", prepare={"train": 30.0})
    assert (starts["train"].prepare, starts["train"].after_admission) == (30.0, 2.5)
    assert starts["train"].total == 32.5
    assert (
        starts["train"].describe()
        == "dataset preparation ~30, first up only, image pull ~2.0, pod start ~0.5"
    )
    chain = critical_path(resources, image_gb=7.0, preparations={"data-c4-abc": 30.0})
    assert [(s.name, s.minutes) for s in chain] == [("prepare", 30.0), ("train", 2.5)]
