"""`trainstack status` run for real against a local Kubernetes API server (support/kube_server.py)
serving fixture objects shaped like real ones (support/fake_cluster.py): each job's phase, queue,
pods and metrics, each node group's nodes and devices, and the exit code that sums them up."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest
from support.fake_cluster import (
    ADMITTED,
    CREATED,
    OUTPUTS,
    condition,
    healthy,
    node,
    pod,
    provisioning_request,
    pytorchjob,
    raycluster,
    rayjob,
    run,
    workload,
)
from support.kube_server import FakeCluster, KubeServer

from cli.kinds import READERS
from cli.main import main


@pytest.mark.parametrize(
    ("kind", "obj", "phase", "failed"),
    [
        ("PyTorchJob", pytorchjob("j", 1, ("Created", "True")), "Created", False),
        ("PyTorchJob", pytorchjob("j", 1, ("Created", "True"), ("Running", "True")), "Running", False),
        ("PyTorchJob", pytorchjob("j", 1, ("Running", "False"), ("Succeeded", "True")), "Succeeded", False),
        ("PyTorchJob", pytorchjob("j", 1, ("Running", "True"), ("Restarting", "True")), "Restarting", False),
        ("PyTorchJob", pytorchjob("j", 1, ("Running", "False"), ("Failed", "True")), "Failed", True),
        ("RayJob", rayjob("j", "PENDING", "Initializing"), "PENDING (Initializing)", False),
        ("RayJob", rayjob("j", "RUNNING", "Running"), "RUNNING (Running)", False),
        ("RayJob", rayjob("j", "SUCCEEDED", "Complete"), "SUCCEEDED (Complete)", False),
        ("RayJob", rayjob("j", "FAILED", "Failed"), "FAILED (Failed)", True),
        ("RayCluster", raycluster("j", "ready"), "ready", False),
        ("RayCluster", raycluster("j", "failed"), "failed", True),
    ],
)
def test_status_phase_per_kind(tmp_path, kind, obj, phase, failed):
    c = healthy()
    c.custom = {(READERS[kind].api[2], "j"): obj}
    c.workloads = [workload("j", "p5", *ADMITTED, kind=kind)]
    c.pods = [
        pod(
            "j-0",
            "j",
            "p5",
            index=0 if kind == "PyTorchJob" else None,
            ray=None if kind == "PyTorchJob" else "head",
        )
    ]
    outputs = copy.deepcopy(OUTPUTS)
    outputs["jobs"] = {"j": {"kind": kind, "nodeGroup": "p5", "nodes": 1, "gpus": 8, "hourlyUsd": 55.04}}
    code, out = run(c, tmp_path, "status", "--json", outputs=outputs)
    (job,) = json.loads(out)["jobs"]
    assert (job["phase"], job["failed"]) == (phase, failed)
    assert code == (1 if failed else 0)


def test_status_table_with_pods_restarts_metrics_and_node_groups(tmp_path):
    c = healthy()
    c.pods[1] = pod("fsdp-worker-1", "fsdp", "p5", index=1, restarts=2)
    code, out = run(c, tmp_path, "status", "--json")
    data = json.loads(out)
    (job,) = data["jobs"]
    assert job | {"age": "-"} == {
        "name": "fsdp", "kind": "PyTorchJob", "phase": "Running", "failed": False, "podsReady": 2,
        "podsExpected": 2, "restarts": 2, "age": "-",
        "queue": {"state": "admitted", "detail": "queue p5", "failed": False, "fix": ""},
        "metrics": {"step": 20, "loss": 3.9, "tokensPerS": 1300000.0, "mfu": 0.44},
        "mlflowRun": None,  # the stack tracks nothing
        "retries": None,  # outputs written before the stack said what bounds its retries
    }  # fmt: skip
    (group,) = data["nodeGroups"]
    assert group == {"name": "p5", "nodes": 2, "ready": 2, "minimum": 0, "maximum": 2, "gpus": [8, 8],
                     "efa": [32, 32], "gpusExpected": 8, "efaExpected": 32, "failed": False}  # fmt: skip
    assert code == 0 and data["failed"] is False
    code, text = run(c, tmp_path, "status")
    assert "fsdp" in text and "step 20 loss 3.9 1,300,000 tok/s MFU 44.0%" in text and "2/2" in text
    assert "admitted" in text and "0-2" in text
    assert "\033[" not in text  # piped: no colours


BOUND = "fails once a pod has been recreated 2 time(s) without a newer checkpoint (jobs[].maxRecreations; its launcher exits 5); the operator itself bounds nothing under ExitCode"  # fmt: skip


def test_a_failed_job_says_what_stopped_its_retries(tmp_path):
    """The stack's sentence (the job's outputs) under a job that failed; not under a healthy one."""
    outputs = copy.deepcopy(OUTPUTS)
    outputs["jobs"]["fsdp"]["retries"] = BOUND
    c = healthy()
    code, text = run(c, tmp_path, "status", outputs=outputs)
    assert code == 0 and "retries:" not in text
    c.custom[("pytorchjobs", "fsdp")] = pytorchjob("fsdp", 2, ("Running", "False"), ("Failed", "True"))
    code, text = run(c, tmp_path, "status", outputs=outputs)
    assert code == 1 and f"retries: {BOUND}" in text


def test_a_rayjob_counts_its_failed_attempts(tmp_path):
    """KubeRay counts a RayJob's failed attempts in status.failed (rayjob_controller.go)."""
    bound = "at most 3 attempt(s), each on a new Ray cluster (backoffLimit 2: every failed attempt counts, progress or not)"
    obj = rayjob("j", "FAILED", "Retrying")
    obj["status"]["failed"] = 1
    c = healthy()
    c.custom = {(READERS["RayJob"].api[2], "j"): obj}
    c.workloads = [workload("j", "p5", *ADMITTED, kind="RayJob")]
    c.pods = [pod("j-0", "j", "p5", ray="head")]
    outputs = copy.deepcopy(OUTPUTS)
    outputs["jobs"] = {"j": {"kind": "RayJob", "nodeGroup": "p5", "nodes": 1, "gpus": 8, "hourlyUsd": 55.04,
                             "queue": "p5", "retries": bound}}  # fmt: skip
    _, text = run(c, tmp_path, "status", outputs=outputs)
    assert f"retries: {bound}; 1 attempt(s) failed so far" in text


def test_status_fails_when_a_node_group_lacks_devices(tmp_path):
    c = healthy()
    c.nodes[2] = node("ip-10-0-2-2", "p5", gpus=0)
    code, out = run(c, tmp_path, "status", "--json")
    assert code == 1 and json.loads(out)["nodeGroups"][0]["gpus"] == [8, 0]


def test_an_idle_autoscaled_group_at_zero_is_healthy_and_a_joining_node_is_not_counted(tmp_path):
    c = healthy()
    c.nodes = [node("ip-10-0-0-1", None)]
    c.pods, c.custom, c.workloads = [], {}, []
    outputs = {**copy.deepcopy(OUTPUTS), "jobs": {}}
    code, out = run(c, tmp_path, "status", "--json", outputs=outputs)
    assert (
        code == 0 and json.loads(out)["nodeGroups"][0] | {"failed": False} == json.loads(out)["nodeGroups"][0]
    )
    assert (json.loads(out)["nodeGroups"][0]["nodes"], json.loads(out)["nodeGroups"][0]["minimum"]) == (0, 0)
    c.nodes.append(node("ip-10-0-2-9", "p5", ready=False, gpus=0, efa=0))  # the autoscaler's, joining
    group = json.loads(run(c, tmp_path, "status", "--json", outputs=outputs)[1])["nodeGroups"][0]
    assert (group["nodes"], group["ready"], group["gpus"], group["failed"]) == (1, 0, [], False)
    # Below its floor it fails: minNodes says a node should be there.
    outputs["gpuNodeGroups"]["p5"]["minNodes"] = 1
    code, out = run(c, tmp_path, "status", "--json", outputs=outputs)
    assert code == 1 and json.loads(out)["nodeGroups"][0]["failed"] is True


def queue_of(c: FakeCluster, tmp_path: Path, job: str = "fsdp") -> tuple[int, dict]:
    code, out = run(c, tmp_path, "status", "--json")
    (found,) = [j for j in json.loads(out)["jobs"] if j["name"] == job]
    return code, found["queue"]


def test_status_says_a_job_waits_behind_the_jobs_ahead_in_its_queue(tmp_path):
    c = healthy()
    c.custom[("pytorchjobs", "later")] = pytorchjob("later", 2, ("Created", "True"))
    c.workloads.append(
        workload(
            "later",
            "p5",
            condition(
                "QuotaReserved",
                "False",
                "Pending",
                "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in "
                "flavor trainstack-p5, 16 more needed",
            ),
            created="2026-11-21T11:00:00Z",
        )
    )
    outputs = copy.deepcopy(OUTPUTS)
    outputs["jobs"]["later"] = {
        "kind": "PyTorchJob",
        "nodeGroup": "p5",
        "nodes": 2,
        "gpus": 16,
        "hourlyUsd": 110.08,
    }
    code, out = run(c, tmp_path, "status", "--json", outputs=outputs)
    later = next(j for j in json.loads(out)["jobs"] if j["name"] == "later")
    assert later["queue"] == {
        "state": "waiting",
        "detail": "behind fsdp (running) in queue p5: couldn't assign flavors to pod set worker: insufficient "
        "unused quota for nvidia.com/gpu in flavor trainstack-p5, 16 more needed",
        "failed": False,
        "fix": "",
    }
    assert code == 0  # queued behind a running job is how it should be
    _, text = run(c, tmp_path, "status", outputs=outputs)
    assert "behind fsdp (running) in queue p5" in text


def test_status_shows_nodes_being_provisioned_and_a_failed_provisioning_request(tmp_path):
    c = healthy()
    name = c.workloads[0]["metadata"]["name"]
    pending = [
        {"name": "trainstack-provisioning", "state": "Pending", "message": "", "lastTransitionTime": CREATED}
    ]
    c.workloads = [workload("fsdp", "p5", condition("QuotaReserved", "True"), checks=pending)]
    c.provisioning_requests = [
        provisioning_request(name, condition("Provisioned", "False", "Provisioning", "Provisioning 2 nodes"))
    ]
    code, queue = queue_of(c, tmp_path)
    assert queue["state"] == "provisioning" and not queue["failed"]
    assert queue["detail"] == (
        "quota held in queue p5, nodes being provisioned; trainstack-provisioning Pending; ProvisioningRequest "
        f"{name}-trainstack-provisioning-1: Provisioning 2 nodes"
    )
    capacity = ("Failed", "True", "FailedToProvision",
                "scale-up failed: InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge "
                "capacity in the Availability Zone you requested (us-east-1c)")  # fmt: skip
    c.provisioning_requests = [provisioning_request(name, condition(*capacity))]
    c.workloads[0]["status"]["admissionChecks"][0]["state"] = "Retry"
    code, queue = queue_of(c, tmp_path)
    assert code == 1 and queue["failed"] and "InsufficientInstanceCapacity" in queue["detail"]
    assert "kubectl -n kube-system logs deploy/cluster-autoscaler" in queue["fix"]


def test_status_without_kueue_says_the_job_is_not_queued(tmp_path):
    c = healthy()
    c.workloads = None  # the API is absent: 404
    code, queue = queue_of(c, tmp_path)
    assert code == 1 and queue["state"] == "not queued" and "Kueue is not running" in queue["detail"]


def test_status_on_a_kind_stack_reads_the_users_kubeconfig_file_and_context(tmp_path):
    """A local stack's outputs name the kubeconfig file and context, not a kubeconfig: the command
    uses the same file, with the stack's context current, and finds nodes by the described labels."""
    c = healthy()
    c.nodes = [node("kind-worker", None), node("kind-worker2", None)]
    for n in c.nodes:
        n["metadata"]["labels"]["kubernetes.io/os"] = "linux"
    with KubeServer(c) as server:
        config = server.kubeconfig()
        config["contexts"].append({"name": "kind-trainstack", "context": {"cluster": "fake", "user": "fake"}})
        config["current-context"] = "some-other-cluster"
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(json.dumps(config))
        outputs = {
            **copy.deepcopy(OUTPUTS),
            "kubeconfigFile": str(kubeconfig),
            "kubeContext": "kind-trainstack",
            "gpuNodeGroups": {"cpu": {"nodeSelector": {"kubernetes.io/os": "linux"}, "instanceType": "m6i.large",
                                      "nodes": 2, "minNodes": 2, "gpusPerNode": 0, "efaInterfacesPerNode": 0}},
        }  # fmt: skip
        path = tmp_path / "outputs.json"
        path.write_text(json.dumps(outputs))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["status", "--json", "--outputs", str(path)])
    data = json.loads(out.getvalue())
    assert code == 0 and data["jobs"][0]["phase"] == "Running"
    assert (data["nodeGroups"][0]["nodes"], data["nodeGroups"][0]["ready"]) == (2, 2)
    outputs["kubeContext"] = "kind-gone"
    path.write_text(json.dumps(outputs))
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["status", "--outputs", str(path)])
    assert code == 2 and f"{kubeconfig} has no context kind-gone" in err.getvalue()
