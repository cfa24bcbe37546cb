"""The domain layer on its own: what a node offers a job, what Kueue counts for a job and a queue,
whether a group holds a VERL job, and the names the stack builds. No Pulumi program runs here."""

from __future__ import annotations

import pytest

from conventions import EFA_RESOURCE, GPU_RESOURCE, GPU_TOLERATION, NODE_GROUP_LABEL, SYSTEM_NODE_LABEL
from domain.catalog import INSTANCE_TYPES
from domain.names import EKS_NODE_GROUP_NAME_MAX, IAM_ROLE_NAME_MAX, ci_role_name, node_group_name
from domain.placement import gpu_placement, system_placement
from domain.quota import SYSTEM_FLAVOR, QueueSpec, job_demand, shortfall
from domain.verl_fit import verl_fits


def p5(nodes_group: str = "p5"):
    it = INSTANCE_TYPES["p5.48xlarge"]
    return gpu_placement(
        nodes_group, it.name, it.gpus, it.max_efa_interfaces, it.vcpus, it.memory_gib, it.hourly_usd
    )


def test_a_gpu_node_is_asked_for_whole_less_what_its_daemons_keep():
    p = p5()
    # 192 vCPUs less 5% (10) for kubelet, CNI and plugins; 90% of 2048 GiB less 1 GiB.
    assert (p.cpu_request, p.memory_request, p.shm_size) == ("182", "1842Gi", "256Gi")
    assert p.resources() == {
        "requests": {"cpu": "182", "memory": "1842Gi", GPU_RESOURCE: "8", EFA_RESOURCE: "32"},
        "limits": {GPU_RESOURCE: "8", EFA_RESOURCE: "32"},  # devices: requests = limits
    }
    assert p.pod_placement() == {
        "nodeSelector": {"trainstack.dev/role": "gpu", NODE_GROUP_LABEL: "p5"},
        "tolerations": [GPU_TOLERATION],
    }


def test_a_cpu_job_takes_half_a_system_node_and_no_toleration():
    p = system_placement("m7i.xlarge", 4, 16, 0.2016)
    assert (p.vcpus, p.memory_gib, p.gpus) == (2, 8, 0)
    assert p.resources() == {"requests": {"cpu": "1", "memory": "6Gi"}}
    assert p.pod_placement() == {"nodeSelector": SYSTEM_NODE_LABEL}
    found = system_placement("", 8, 32, 0.0, selector={"pool": "cpu"})
    assert found.node_selector == {"pool": "cpu"}  # a cluster the stack did not create


def test_a_rayjob_demands_a_head_and_a_submitter_on_the_system_flavor_and_a_pytorchjob_neither():
    workers = {"cpu": 182_000, "memory": 1842, GPU_RESOURCE: 8, EFA_RESOURCE: 32}
    assert job_demand(p5(), 2, "PyTorchJob") == {"trainstack-p5": {k: 2 * v for k, v in workers.items()}}
    # A RayJob's head (500m, 3Gi) and its submitter Job (500m, 1Gi); a RayCluster has no submitter.
    assert job_demand(p5(), 1, "RayJob") == {
        "trainstack-p5": workers,
        SYSTEM_FLAVOR: {"cpu": 1000, "memory": 4},
    }
    assert job_demand(p5(), 1, "RayCluster")[SYSTEM_FLAVOR] == {"cpu": 500, "memory": 3}


def test_a_queue_holds_its_group_at_its_largest_and_one_head_per_node():
    quota = QueueSpec(p5(), 4, provisioned=True).quota()
    assert quota["trainstack-p5"][GPU_RESOURCE] == 32
    assert quota[SYSTEM_FLAVOR] == {"cpu": 4000, "memory": 16, GPU_RESOURCE: 0, EFA_RESOURCE: 0}
    assert shortfall(job_demand(p5(), 4, "RayJob"), quota) == []
    assert shortfall(job_demand(p5(), 5, "PyTorchJob"), quota) == [
        "cpu 910 > 728 on flavor trainstack-p5",
        "memory 9210Gi > 7368Gi on flavor trainstack-p5",
        f"{GPU_RESOURCE} 40 > 32 on flavor trainstack-p5",
        f"{EFA_RESOURCE} 160 > 128 on flavor trainstack-p5",
    ]


@pytest.mark.parametrize(
    ("algorithm", "billions", "tp", "gpus", "memory", "nodes", "why"),
    [
        ("grpo", 1.0, 1, 0, 0.0, 1, "VERL needs GPU nodes"),
        ("grpo", 1.0, 3, 8, 80.0, 1, "tensorParallel 3 does not divide the 8 GPUs of a node"),
        ("grpo", 8.0, 1, 8, 80.0, 1, None),  # 8B on one p5: 16 GB of training + 16 of rollout per GPU
        ("ppo", 70.0, 8, 8, 80.0, 1, "a 70B model needs ~277 GiB per GPU"),  # and a critic as large
        ("ppo", 70.0, 8, 8, 80.0, 8, "a 70B model needs ~49 GiB per GPU"),  # 48 GiB is 60% of 80
        ("ppo", 70.0, 8, 8, 80.0, 16, None),
    ],
)
def test_a_verl_job_fits_a_group_by_gpu_memory(algorithm, billions, tp, gpus, memory, nodes, why):
    said = verl_fits(algorithm, billions, tp, gpus, memory, nodes)
    assert said is None if why is None else said.startswith(why), said


def test_names_stay_within_their_service_limits_and_stable():
    long_cluster = "trainstack-" + "x" * 60
    name = node_group_name(long_cluster, "p5")
    assert len(name) == EKS_NODE_GROUP_NAME_MAX and name == node_group_name(long_cluster, "p5")
    assert node_group_name("trainstack-dev", "gpu") == "trainstack-dev-gpu"  # names that fit never change
    assert len(ci_role_name("trainstack-" + "y" * 50, "deploy")) == IAM_ROLE_NAME_MAX
