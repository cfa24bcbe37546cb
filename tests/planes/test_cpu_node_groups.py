"""A CPU-only stack: a `gpu: false` group that scales per job like a GPU group (its own Kueue queue
and flavor, the autoscaler's node-template tags), its jobs on that queue without GPUs, no GPU quota
asked; and a stack with no node group at all, its jobs on the system nodes."""

from __future__ import annotations

import pytest
from support.charts import helm
from support.paths import shared_dir
from support.plans import plan, stack_values

from config import parse_config
from conventions import GPU_RESOURCE, QUEUE_LABEL
from offline.scheduling import check

CPU_GROUP = {"name": "cpu", "instanceType": "m6i.large", "gpu": False, "nodeCount": 2}
DDP = {"name": "ddp", "kind": "PyTorchJob", "nodeGroup": "cpu", "nodes": 2}
CPU_ONLY = {"gpuNodeGroups": [CPU_GROUP], "jobs": [DDP]}
GPU_QUOTAS = ("L-DB2E81BA", "L-417A185B", "L-3819A6DF", "L-7212CCBC")  # G and P, on demand and Spot
PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"


@pytest.fixture(scope="module")
def cpu_run():
    return plan("dev", **CPU_ONLY)


def kueue(run, kind: str, name: str) -> dict:
    (found,) = [r.inputs for r in run.resources if r.type.endswith(f":{kind}") and r.name == name]
    return found


def test_the_cpu_group_runs_the_standard_ami_untainted_and_labelled_cpu(cpu_run):
    ng = cpu_run.one("eks:index:ManagedNodeGroup", "gpu-cpu").inputs
    assert ng["amiType"] == "AL2023_x86_64_STANDARD"
    assert not ng.get("taints")
    assert ng["labels"] == {
        "trainstack.dev/role": "cpu",
        "trainstack.dev/node-group": "cpu",
        "trainstack.dev/instance-type": "m6i.large",
    }
    assert ng["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}


def test_the_autoscaler_scales_it_from_zero_by_tags_that_offer_no_gpu(cpu_run):
    tags = {
        t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in cpu_run.by_type("aws:autoscaling/tag:Tag")
    }
    template = "k8s.io/cluster-autoscaler/node-template"
    assert tags == {
        "trainstack.dev/autoscaled/trainstack-dev": "true",
        f"{template}/label/trainstack.dev/role": "cpu",
        f"{template}/label/trainstack.dev/node-group": "cpu",
        f"{template}/label/trainstack.dev/instance-type": "m6i.large",
    }
    policy = cpu_run.one("aws:iam/rolePolicy:RolePolicy", "cluster-autoscaler-policy").inputs["policy"]
    assert "autoscaling:SetDesiredCapacity" in policy


def test_its_job_lands_on_its_own_queue_and_flavor_without_gpus(cpu_run):
    assert kueue(cpu_run, "ResourceFlavor", "resourceflavor-trainstack-cpu")["spec"] == {
        "nodeLabels": {"trainstack.dev/role": "cpu", "trainstack.dev/node-group": "cpu"}
    }
    queue = kueue(cpu_run, "ClusterQueue", "clusterqueue-trainstack-cpu")["spec"]
    (resources,) = queue["resourceGroups"]
    assert GPU_RESOURCE not in resources["coveredResources"]
    job = cpu_run.one(PYTORCHJOB).inputs
    assert job["metadata"]["labels"][QUEUE_LABEL] == "cpu"
    assert job["spec"]["nprocPerNode"] == "1"  # one gloo rank per node
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    pod = worker["template"]["spec"]
    assert worker["replicas"] == 2
    assert pod["nodeSelector"] == {"trainstack.dev/role": "cpu", "trainstack.dev/node-group": "cpu"}
    assert GPU_RESOURCE not in str(pod["containers"][0]["resources"])
    assert not any(t.get("key") == GPU_RESOURCE for t in pod["tolerations"])


def test_no_gpu_quota_is_asked_and_the_standard_one_counts_the_group(cpu_run):
    (report,) = [m for m in cpu_run.messages if m.startswith("Account checks")]
    assert not any(code in report for code in GPU_QUOTAS)
    assert "L-1216C47A" in report and "cpu: 2 x m6i.large at 2 vCPUs" in report


def test_the_scheduling_check_finds_the_job_fits_with_no_device_plugin(cpu_run):
    helm()
    shared_dir("charts", "TRAINSTACK_CHARTS_DIR")
    report = check(cpu_run, parse_config("dev", stack_values("dev", **CPU_ONLY)))
    (chain,) = report.chains
    assert chain.fits
    assert "device plugins: none needed" in chain.line()
    assert "cpu (m6i.large x2, from the ASG's node-template tags)" in chain.line()


def test_a_stack_with_no_node_group_plans_its_job_on_the_system_nodes():
    run = plan("dev", gpuNodeGroups=[], jobs=[{**DDP, "nodeGroup": "system", "nodes": 1}])
    assert [r.name for r in run.by_type("eks:index:ManagedNodeGroup")] == ["eks-system"]
    assert run.one(PYTORCHJOB).inputs["metadata"]["labels"][QUEUE_LABEL] == "system"
    (report,) = [m for m in run.messages if m.startswith("Account checks")]
    assert not any(code in report for code in GPU_QUOTAS)
