"""`existingCluster.checkpointClaim` and `jobs[].hyperpod`: what they accept, and each refusal naming
its key, the value and what is allowed."""

from __future__ import annotations

import json

import pytest
from support.plans import EXISTING_CLUSTER as CLUSTER
from support.plans import plan, stack_values

from config.jobs import HyperPodJobConfig, JobConfig, check_job_hyperpod
from config.node_groups import GpuNodeGroupConfig
from config.schema import ConfigError, Reader

EKS = {
    "eksClusterName": "ml-platform",
    "systemNodes": {"nodeSelector": {"eks.amazonaws.com/nodegroup": "system"}},
}


def problems(stack: str, **overrides) -> list[str]:
    with pytest.raises(ConfigError) as err:
        plan(stack, facts=CLUSTER, **overrides)
    return [str(p) for p in err.value.problems]


@pytest.mark.parametrize("name", ["FSx_Claim", "-claim", "a" * 254, ""])
def test_a_claim_must_be_a_kubernetes_name(name):
    (found,) = problems("existing", existingCluster={**EKS, "checkpointClaim": name})
    assert found.startswith(f"trainstack:existingCluster.checkpointClaim = {json.dumps(name)}: not a")
    assert "PersistentVolumeClaim name" in found and "fsx-claim, say" in found


def test_a_created_cluster_has_no_claim_to_name():
    (found,) = problems("dev", existingCluster={"checkpointClaim": "fsx-claim"})
    assert found.startswith('trainstack:existingCluster.checkpointClaim = "fsx-claim": only on a cluster')
    assert "storage.fsx" in found


def test_a_kubeconfig_stack_takes_one_checkpoint_home():
    local = json.loads(stack_values("local")["trainstack:existingCluster"])  # has checkpointHostPath
    (found,) = problems("local", existingCluster={**local, "checkpointClaim": "shared"})
    assert found.startswith('trainstack:existingCluster.checkpointHostPath = "/var/local/trainstack": ')
    assert "on a node path, in S3 or on a claim, one of them" in found and "or checkpointClaim" in found


def test_hyperpod_max_retries_range_and_kind():
    job = {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 1, "hyperpod": {"maxRetries": 0}}
    found = problems("existing", jobs=[job])
    assert "trainstack:jobs[0].hyperpod.maxRetries = 0: out of range; allowed: 1-100" in found
    ray = {"name": "ray", "kind": "RayJob", "nodeGroup": "p5", "hyperpod": {"maxRetries": 5}}
    # (p5 is not a HyperPod group either: that is a problem of its own, also reported.)
    found = problems("existing", jobs=[ray])
    assert (
        "trainstack:jobs[0].hyperpod.maxRetries = 5: HyperPod auto-resumes PyTorchJobs only, "
        "not a RayJob; allowed: unset"
    ) in found
    bad = {**job, "hyperpod": {"deepHealthCheck": "always"}}
    (found, *_) = problems("existing", jobs=[bad])
    assert found.startswith('trainstack:jobs[0].hyperpod.deepHealthCheck = "always"')
    assert "preferred" in found and "required" in found


def test_hyperpod_settings_on_an_ec2_group_are_refused():
    """Called by the cross-plane job rules with the job's group, which says whether it is HyperPod's."""
    job = JobConfig(
        name="fsdp", kind="PyTorchJob", node_group="p5", hyperpod=HyperPodJobConfig(max_retries=5)
    )
    r = Reader()
    check_job_hyperpod(
        job, GpuNodeGroupConfig(name="p5", instance_type="p5.48xlarge"), "trainstack:jobs[0]", r
    )
    (found,) = [str(p) for p in r.problems]
    assert found == (
        "trainstack:jobs[0].hyperpod = \"(set)\": node group 'p5' (p5.48xlarge) is not a HyperPod group; "
        "allowed: unset, or a group whose instanceType starts with ml."
    )
    for instance_type, settings in (("ml.p5.48xlarge", job.hyperpod), ("p5.48xlarge", HyperPodJobConfig())):
        r = Reader()
        check_job_hyperpod(
            JobConfig(name="a", kind="PyTorchJob", node_group="p5", hyperpod=settings),
            GpuNodeGroupConfig(name="p5", instance_type=instance_type),
            "k",
            r,
        )
        assert r.problems == []
