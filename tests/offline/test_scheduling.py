"""The plan's scheduling check (offline/scheduling.py): every job of every template reaches "fits"
through admission, nodes, device plugins and pods, and hand-broken stacks stop at the link that
breaks, in words. DaemonSets come from a real `helm template` of ../shared/charts."""

from __future__ import annotations

import pytest
import yaml
from support.charts import helm
from support.paths import ROOT, shared_dir
from support.plans import plan, stack_values

from config import parse_config
from offline.plan import main
from offline.scheduling import check

EXISTING = {"eks-cluster:ml-platform": {"version": "1.35", "zones": ["us-east-1a", "us-east-1b"]}}
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"
RAYJOB = "kubernetes:ray.io/v1:RayJob"
NVIDIA_TOLERATION = {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}


@pytest.fixture(autouse=True)
def upstream():
    """The real helm and charts (skips where they are missing)."""
    helm()
    shared_dir("charts", "TRAINSTACK_CHARTS_DIR")


def checked(stack: str, run=None, facts=None, **overrides):
    run = run or plan(stack, facts=facts, **overrides)
    return check(run, parse_config(stack, stack_values(stack, **overrides)))


def chain(report, job: str):
    (found,) = [c for c in report.chains if c.job == job]
    return found


def node_pods(run) -> dict:
    """The pod template prod's TrainJob's pods are built from: its group's runtime's."""
    (rjob,) = run.one(RUNTIME).inputs["spec"]["template"]["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]


@pytest.mark.parametrize("stack", ["prod", "dev", "local", "existing"])
def test_every_job_of_every_template_fits(stack):
    report = checked(stack, facts=EXISTING if stack == "existing" else None)
    assert report.chains
    for c in report.chains:
        assert c.fits, c.line()
        assert c.line().endswith("→ pods: fits")
        # A group whose nodes EKS labels with their network place (prod's p5) adds the topology link.
        links = ["admission", "nodes", "device plugins", *(["topology"] if stack == "prod" else [])]
        assert [link.split(":")[0] for link in c.links] == links
    assert report.daemonset_problems == []


def test_prods_chains_name_the_flavors_nodes_and_devices():
    report = checked("prod")
    fsdp, ray = chain(report, "llama-1b-fsdp"), chain(report, "llama-1b-ray")
    assert fsdp.links == [
        "admission: trainstack-p5 (node on trainstack-p5)",
        "nodes: p5 (p5.48xlarge x2, from the ASG's node-template tags)",
        "device plugins: p5 nvidia.com/gpu 8, vpc.amazonaws.com/efa 32",
        "topology: pod set node: prefers one network-node-layer-3 domain; the closest that holds its 2 "
        "pods is one network-node-layer-2 domain (simulated DescribeInstanceTopology of 2 nodes; fact "
        "instance-topology:p5 gives yours) once the provisioned nodes are Ready",
    ]
    # The RayJob's submitter is a PodSet of its own, on the system flavor beside the head.
    assert (
        ray.links[0] == "admission: trainstack-p5 (head, submitter on trainstack-system; p5 on trainstack-p5)"
    )
    assert ray.links[1].startswith("nodes: system (m6i.large x4), p5 (")
    # Every DaemonSet the stack relies on serves the groups it must: DCGM on the tainted GPU nodes.
    assert report.daemonsets == [
        "aws-efa-k8s-device-plugin (aws-efa-k8s-device-plugin) on p5",
        "nvidia-device-plugin (nvidia-device-plugin) on p5",
        "eks-node-monitoring-agent (eks-node-monitoring-agent) on system, p5",
        "dcgm-server (eks-node-monitoring-agent) on p5",
    ]


def test_the_plan_prints_the_scheduling_section(tmp_path, capsys):
    assert main(["--stack", "prod", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    section = out.split("Scheduling (admission → nodes → device plugins → pods):\n")[1].split("\n\n")[0]
    lines = section.splitlines()
    assert lines[0].startswith("  llama-1b-fsdp: admission: trainstack-p5") and lines[0].endswith(
        "→ pods: fits"
    )
    assert lines[1].startswith("  llama-1b-ray: admission: trainstack-p5") and lines[1].endswith(
        "→ pods: fits"
    )
    assert "  DaemonSets: dcgm-server (eks-node-monitoring-agent) on p5" in lines


# --- hand-broken stacks --------------------------------------------------------------------------


NO_NVIDIA_TOLERATION = {"operators": {"nvidiaDevicePlugin": {"values": {"tolerations": []}}}}


def test_a_device_plugin_without_the_gpu_toleration_never_advertises_gpus():
    report = checked("prod", **NO_NVIDIA_TOLERATION)
    broken = (
        "device plugins: nvidia-device-plugin does not tolerate nvidia.com/gpu=true:NoSchedule on group p5"
    )
    assert chain(report, "llama-1b-fsdp").broken == broken
    assert chain(report, "llama-1b-ray").broken == broken
    assert report.daemonset_problems == [
        "nvidia-device-plugin (nvidia-device-plugin) does not schedule on group p5 "
        "(does not tolerate nvidia.com/gpu=true:NoSchedule)"
    ]


def test_the_plan_exits_2_naming_the_job_and_the_broken_link(tmp_path, capsys):
    stack_file = tmp_path / "Pulumi.prod.yaml"
    data = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    data["config"]["trainstack:operators"] = NO_NVIDIA_TOLERATION["operators"]
    stack_file.write_text(yaml.safe_dump(data))
    code = main(["--stack", "prod", "--stack-file", str(stack_file), "--out", str(tmp_path / "out")])
    assert code == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: job {job} can never start: device plugins: nvidia-device-plugin does not tolerate "
        "nvidia.com/gpu=true:NoSchedule on group p5"
        for job in ("llama-1b-fsdp", "llama-1b-ray")
    ] + [
        "error: nvidia-device-plugin (nvidia-device-plugin) does not schedule on group p5 "
        "(does not tolerate nvidia.com/gpu=true:NoSchedule)"
    ]
    assert not (tmp_path / "out" / "prod").exists()


def test_a_daemonset_that_misses_a_group_stops_the_plan_without_any_job(tmp_path, capsys):
    """With no job to break, a group no NVIDIA plugin reaches is still refused: its GPUs would
    never be advertised to the first job put there."""
    stack_file = tmp_path / "Pulumi.prod.yaml"
    data = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    data["config"]["trainstack:operators"] = NO_NVIDIA_TOLERATION["operators"]
    data["config"]["trainstack:jobs"] = []
    stack_file.write_text(yaml.safe_dump(data))
    code = main(["--stack", "prod", "--stack-file", str(stack_file), "--out", str(tmp_path / "out")])
    assert (code, capsys.readouterr().err.splitlines()) == (
        2,
        [
            "error: nvidia-device-plugin (nvidia-device-plugin) does not schedule on group p5 "
            "(does not tolerate nvidia.com/gpu=true:NoSchedule)"
        ],
    )


def _efa(run, count: str) -> None:
    resources = node_pods(run)["spec"]["containers"][0]["resources"]
    resources["requests"]["vpc.amazonaws.com/efa"] = resources["limits"]["vpc.amazonaws.com/efa"] = count


def test_more_efa_interfaces_than_the_type_has():
    run = plan("prod")
    run.one(TRAINJOB).inputs["spec"]["trainer"]["numNodes"] = 1  # within the queue's 64: the node refuses it
    _efa(run, "64")
    assert chain(checked("prod", run), "llama-1b-fsdp").broken == (
        "pods: pod set node requests vpc.amazonaws.com/efa 64, but a p5.48xlarge node of group p5 "
        "advertises 32"
    )


def test_more_efa_interfaces_than_the_queue_holds_is_never_admitted():
    run = plan("prod")
    _efa(run, "64")
    assert chain(checked("prod", run), "llama-1b-fsdp").broken == (
        "admission: pod set node (cpu 364, memory 3684Gi, nvidia.com/gpu 16, vpc.amazonaws.com/efa 128) "
        "fits no flavor of trainstack-p5 (trainstack-system: nodeSelector trainstack.dev/role=gpu is not its "
        "trainstack.dev/role=system; trainstack-p5: vpc.amazonaws.com/efa 128 > 64 on flavor trainstack-p5)"
    )


def test_a_node_selector_no_group_carries():
    """Kueue compares only its flavors' label keys, so the job is admitted; no node takes it."""
    run = plan("prod")
    node_pods(run)["spec"]["nodeSelector"]["example.com/rack"] = "r1"
    report = checked("prod", run)
    assert chain(report, "llama-1b-fsdp").links[0] == "admission: trainstack-p5 (node on trainstack-p5)"
    assert chain(report, "llama-1b-fsdp").broken == (
        "nodes: no node group takes pod set node (group system: nodeSelector example.com/rack=r1 "
        "does not match; group p5: nodeSelector example.com/rack=r1 does not match)"
    )
    assert chain(report, "llama-1b-ray").fits


def test_an_autoscaled_group_whose_tags_lack_a_label_is_never_scaled_up():
    run = plan("prod")
    label = "k8s.io/cluster-autoscaler/node-template/label/trainstack.dev/node-group"
    run.resources = [
        r
        for r in run.resources
        if not (r.type == "aws:autoscaling/tag:Tag" and r.inputs["tag"]["key"] == label)
    ]
    assert chain(checked("prod", run), "llama-1b-fsdp").broken == (
        "nodes: no node group takes pod set node (group system: nodeSelector trainstack.dev/node-group=p5 "
        "does not match; group p5: nodeSelector trainstack.dev/node-group=p5 does not match on the "
        "autoscaler's node template (ASG tags))"
    )


def test_a_daemonset_whose_requests_leave_no_room_for_a_job_pod():
    greedy = {"operators": {"nvidiaDevicePlugin": {"values": {"resources": {"requests": {"cpu": "20"}}}}}}
    report = checked("prod", **greedy)
    assert chain(report, "llama-1b-fsdp").broken == (
        "pods: pod set node requests cpu 182, but a p5.48xlarge node of group p5 has 171.43 left of "
        "191.45 allocatable after DaemonSets (aws-efa-k8s-device-plugin 0.01, nvidia-device-plugin 20, "
        "eks-node-monitoring-agent 0.01)"
    )


def test_a_ray_head_larger_than_the_system_flavor():
    run = plan("prod")
    head = run.one(RAYJOB).inputs["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    head["containers"][0]["resources"]["requests"]["cpu"] = "4"
    report = checked("prod", run)
    assert chain(report, "llama-1b-ray").broken == (
        "admission: pod set head (cpu 4, memory 3Gi) fits no flavor of trainstack-p5 (trainstack-system: "
        "cpu 4 > 2 on flavor trainstack-system; trainstack-p5: nodeSelector trainstack.dev/role=system is "
        "not its trainstack.dev/role=gpu)"
    )
    assert chain(report, "llama-1b-fsdp").fits


def test_a_dcgm_server_without_tolerations_is_reported_on_gpu_groups():
    """Issue 34's first defect: the chart's dcgm-server tolerates nothing, and GPU nodes are tainted."""
    run = plan("prod")
    addon = run.one("aws:eks/addon:Addon", "eks-eks-node-monitoring-agent")
    addon.inputs["configurationValues"] = None
    report = checked("prod", run)
    assert report.daemonset_problems == [
        "dcgm-server (eks-node-monitoring-agent) does not schedule on group p5 "
        "(does not tolerate nvidia.com/gpu=true:NoSchedule)"
    ]
    assert all(c.fits for c in report.chains)  # jobs still start; the node health check is blind


def test_without_the_charts_the_device_plugin_link_says_not_checked(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINSTACK_CHARTS_DIR", str(tmp_path / "nowhere"))
    report = checked("prod")
    fsdp = chain(report, "llama-1b-fsdp")
    assert (
        fsdp.links[2]
        == f"device plugins: not checked: no charts at {tmp_path / 'nowhere'} (set TRAINSTACK_CHARTS_DIR)"
    )
    assert fsdp.fits
    assert report.daemonsets == [
        f"not checked: no charts at {tmp_path / 'nowhere'} (set TRAINSTACK_CHARTS_DIR)"
    ]


def test_the_check_reads_the_objects_the_plan_writes():
    from offline.plan import manifest_of
    from offline.scheduling import JOB_TYPES, body

    run = plan("prod")
    regs = [
        r for r in run.resources if r.type in JOB_TYPES or r.type.startswith("kubernetes:kueue.x-k8s.io/")
    ]
    assert regs
    for r in regs:
        assert body(r) == manifest_of(r)[1]


def test_every_job_kind_on_every_group_with_the_csi_nodes_everywhere():
    groups = [
        {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True, "placementGroup": True},
        {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2},
    ]
    jobs = [
        {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "wait": "none"},
        {"name": "ray", "kind": "RayJob", "nodeGroup": "p5", "nodes": 2, "wait": "none"},
        {"name": "box", "kind": "RayCluster", "nodeGroup": "p5", "nodes": 1, "wait": "none"},
        {"name": "small", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"},
        {"name": "cpu", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 2, "wait": "none"},
    ]
    fsx = {"enabled": True, "storageCapacityGiB": 2400, "throughputPerTiB": 250, "nodeGroups": ["p5"]}
    storage = {"encryption": "KMS", "protect": True, "fsx": fsx, "datasetsMount": True}
    report = checked("prod", gpuNodeGroups=groups, jobs=jobs, storage=storage)
    assert [c.job for c in report.chains] == ["fsdp", "ray", "box", "small", "cpu"]
    assert all(c.fits for c in report.chains), [c.line() for c in report.chains]
    assert (
        chain(report, "box").links[0]
        == "admission: trainstack-p5 (head on trainstack-system; p5 on trainstack-p5)"
    )
    assert report.daemonsets == [
        "aws-efa-k8s-device-plugin (aws-efa-k8s-device-plugin) on p5",
        "nvidia-device-plugin (nvidia-device-plugin) on gpu, p5",
        "fsx-csi-node (aws-fsx-csi-driver) on system, gpu, p5",
        "s3-csi-node (aws-mountpoint-s3-csi-driver) on system, gpu, p5",
        "eks-node-monitoring-agent (eks-node-monitoring-agent) on system, gpu, p5",
        "dcgm-server (eks-node-monitoring-agent) on gpu, p5",
    ]


def test_a_rayjobs_submitter_is_charged_to_the_system_flavor():
    """Issue 34's second defect: Kueue's third PodSet. Quota for the head alone leaves it suspended."""
    run = plan("dev", jobs=[{"name": "ray", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"}])
    (queue,) = [
        r
        for r in run.by_type("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue")
        if r.inputs["metadata"]["name"] == "trainstack-gpu"
    ]
    (system,) = [
        f for f in queue.inputs["spec"]["resourceGroups"][0]["flavors"] if f["name"] == "trainstack-system"
    ]
    for r in system["resources"]:
        r["nominalQuota"] = {"cpu": "500m", "memory": "3Gi"}.get(r["name"], r["nominalQuota"])  # the head's
    assert chain(
        checked("dev", run, jobs=[{"name": "ray", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"}]),
        "ray",
    ).broken == (
        "admission: pod set submitter (cpu 0.5, memory 1Gi) fits no flavor of trainstack-gpu (trainstack-system: "
        "cpu 1 > 500m on flavor trainstack-system; trainstack-gpu: nodeSelector trainstack.dev/role=system is not "
        "its trainstack.dev/role=gpu)"
    )


def test_a_daemonset_no_groups_nodes_need_says_so():
    """DCGM serves GPU nodes: on a CPU-only stack it is not 'on no group', a line that reads as a fault."""
    cpu_only = {"gpuNodeGroups": [], "jobs": [{"name": "t", "kind": "PyTorchJob", "nodeGroup": "system"}]}
    report = checked("dev", **cpu_only)
    assert "  DaemonSets: dcgm-server (eks-node-monitoring-agent): no group's nodes need it" in report.lines()
    assert not any("on no group" in line for line in report.lines())
