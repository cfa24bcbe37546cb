"""Each job on a GPU group is cleared by a driver probe before it is registered
(components/driver_probe.py): a Job on a node of the group, in the stack's training image, asking for
no GPU, reading the kernel's /sys/module, with the job's image's CUDA release where it runs
another image; the job depends on it, so pulumi-kubernetes' wait for the probe's completion comes
first, and its failure stops the `up` before the job exists."""

from __future__ import annotations

from support.plans import EXISTING_CLUSTER, plan

from components.driver_probe import PROBE_COMMAND, PROBE_SOURCE
from conventions import GPU_TOLERATION

JOB = "kubernetes:batch/v1:Job"


def probes(run) -> dict:
    return {r.inputs["metadata"]["name"]: r for r in run.by_type(JOB) if r.name.startswith("driver-")}


def container(reg) -> dict:
    (c,) = reg.inputs["spec"]["template"]["spec"]["containers"]
    return c


def test_every_gpu_job_waits_for_its_groups_driver_probe():
    run = plan("prod")
    found = probes(run)
    assert set(found) == {"llama-1b-fsdp-driver", "llama-1b-ray-driver"}
    probe = found["llama-1b-fsdp-driver"]
    pod = probe.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["trainstack.dev/node-group"] == "p5"
    assert pod["tolerations"] == [GPU_TOLERATION]
    assert probe.inputs["spec"]["backoffLimit"] == 0
    c = container(probe)
    assert c["command"] == PROBE_COMMAND
    assert {"name": "DRIVER_PROBE", "value": PROBE_SOURCE} in c["env"]
    assert "nvidia.com/gpu" not in str(c["resources"])
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in c["env"]
    # No volume: the node's kernel modules show in the container's own sysfs (no hostPath, which
    # Pod Security "baseline" namespaces refuse).
    assert "volumes" not in pod and "volumeMounts" not in c
    assert c["args"][c["args"].index("--module-dir") + 1] == "/sys/module"
    trainjob = next(r for r in run.resources if r.name == "job-llama-1b-fsdp" and r.custom)
    assert c["image"] == trainjob.inputs["spec"]["trainer"]["image"]  # the job's own: its CUDA
    # A node of p5 may take the autoscaler's 30 minutes to come, and the image 20 to pull.
    assert probe.options["customTimeouts"] == {"create": "50m"}
    assert probe.urn in trainjob.dependencies


def test_a_job_on_the_system_nodes_has_no_probe_and_each_probe_runs_its_jobs_image():
    jobs = [
        {"name": "cpu", "kind": "PyTorchJob", "nodeGroup": "system", "wait": "none"},
        {
            "name": "own",
            "kind": "PyTorchJob",
            "nodeGroup": "gpu",
            "image": "nvidia/cuda:12.8.1-runtime-ubuntu24.04",
            "wait": "none",
        },
    ]
    found = probes(plan("dev", jobs=jobs))
    assert set(found) == {"own-driver"}
    assert container(found["own-driver"])["image"] == "nvidia/cuda:12.8.1-runtime-ubuntu24.04"


def test_on_a_cluster_the_stack_did_not_create_the_probe_carries_the_stacks_name_and_says_whose_ami():
    found = probes(plan("existing", facts=EXISTING_CLUSTER))
    (name,) = found
    assert name.startswith("trainstack-existing-") and name.endswith("-driver")
    args = container(found[name])["args"]
    assert (
        args[args.index("--fix") + 1] == "the cluster's own node group that the group's nodeSelector selects"
    )
