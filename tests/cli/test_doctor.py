"""`trainstack doctor` against a local Kubernetes API server: a clean cluster passes every
check; each fault a real cluster shows (a node, a device plugin, an operator, a pod, NCCL, the
queue, GPU health) fails its own check with the detail and the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fake_cluster import (
    CREATED,
    OUTPUTS,
    condition,
    crd,
    daemonset,
    deployment,
    healthy,
    node,
    pod,
    run,
    workload,
)
from support.kube_server import FakeCluster


def doctor(c: FakeCluster, tmp_path: Path) -> tuple[int, list[dict]]:
    code, out = run(c, tmp_path, "doctor", "--json")
    data = json.loads(out)
    assert data["failed"] == sum(not x["ok"] for x in data["checks"])
    return code, data["checks"]


def failing(checks: list[dict]) -> dict[str, dict]:
    return {c["name"]: c for c in checks if not c["ok"]}


def test_doctor_clean_cluster_passes_everything(tmp_path):
    code, checks = doctor(healthy(), tmp_path)
    assert failing(checks) == {} and code == 0
    names = {c["name"] for c in checks}
    assert {"nodes Ready", "Kubeflow training operator", "KubeRay operator", "training operator webhook",
            "Pod Identity for each job's service account", "NCCL network in fsdp-worker-0"} <= names  # fmt: skip
    code, text = run(healthy(), tmp_path, "doctor")
    assert text.rstrip().endswith(f"{len(checks)} passed, 0 failed")


def breaks(**changes) -> FakeCluster:
    c = healthy()
    for key, value in changes.items():
        setattr(c, key, value)
    return c


def finding(tmp_path: Path, c: FakeCluster, name: str) -> dict:
    code, checks = doctor(c, tmp_path)
    assert code == 1
    found = failing(checks)
    assert name in found, sorted(found)
    assert found[name]["fix"]
    return found[name]


def test_doctor_node_not_ready(tmp_path):
    c = healthy()
    c.nodes[1] = node("ip-10-0-2-1", "p5", ready=False)
    assert "not Ready: ip-10-0-2-1" in finding(tmp_path, c, "nodes Ready")["detail"]


def test_doctor_device_plugin_with_zero_pods(tmp_path):
    c = breaks(
        daemonsets=[
            daemonset("nvidia-device-plugin", 0, 0),
            daemonset("aws-efa-k8s-device-plugin-daemonset", 2, 2),
        ]
    )
    found = finding(tmp_path, c, "nvidia-device-plugin DaemonSet")
    assert "0 pods scheduled" in found["detail"] and "nvidia.com/gpu.present=true" in found["fix"]


def test_doctor_device_plugin_not_ready_and_devices_missing(tmp_path):
    c = breaks(
        daemonsets=[
            daemonset("nvidia-device-plugin", 2, 2),
            daemonset("aws-efa-k8s-device-plugin-daemonset", 2, 1),
        ]
    )
    c.nodes[2] = node("ip-10-0-2-2", "p5", efa=0)
    c.nodes[2]["metadata"]["labels"]["vpc.amazonaws.com/efa.present"] = "true"
    assert finding(tmp_path, c, "aws-efa-k8s-device-plugin-daemonset DaemonSet")["detail"] == "1/2 pods ready"
    assert "allocatable 0" in finding(tmp_path, c, "vpc.amazonaws.com/efa on ip-10-0-2-2")["detail"]


def test_doctor_missing_crd_operator_and_webhook(tmp_path):
    c = breaks(crds=[crd("rayjobs.ray.io"), crd("rayclusters.ray.io")], webhooks=[])
    c.deployments = [
        deployment("training-operator", "kubeflow", ready=0),
        deployment("kuberay-operator", "kuberay-system"),
    ]
    assert finding(tmp_path, c, "CRD pytorchjobs.kubeflow.org")["detail"] == "missing"
    assert finding(tmp_path, c, "Kubeflow training operator")["detail"] == "not ready"
    assert "rejected" in finding(tmp_path, c, "training operator webhook")["detail"]
    # Nothing queues or scales without Kueue and the autoscaler.
    assert finding(tmp_path, c, "Kueue")["detail"] == "not installed"
    assert finding(tmp_path, c, "cluster autoscaler")["detail"] == "not installed"
    assert finding(tmp_path, c, "CRD workloads.kueue.x-k8s.io")["detail"] == "missing"


def test_doctor_pod_identity_missing(tmp_path):
    c = healthy()
    c.pods[0] = pod("fsdp-worker-0", "fsdp", "p5", env=())
    assert "fsdp-worker-0" in finding(tmp_path, c, "Pod Identity for each job's service account")["detail"]


@pytest.mark.parametrize(
    ("message", "why"),
    [
        ("0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector.",
         "not enough free GPUs"),
        ("0/3 nodes are available: 2 Insufficient vpc.amazonaws.com/efa.", "not enough free EFA interfaces"),
        ("0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: true}.", "a node taint"),
        ("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.", "no node matches"),
    ],
)  # fmt: skip
def test_doctor_explains_pending_pods(tmp_path, message, why):
    c = healthy()
    c.pods.append(pod("fsdp-worker-2", "fsdp", "p5", index=2, phase="Pending",
                      scheduled={"status": "False", "reason": "Unschedulable", "message": message}))  # fmt: skip
    assert why in finding(tmp_path, c, "pod fsdp-worker-2")["detail"]


def test_doctor_image_pull_and_crash_loop_with_last_lines(tmp_path):
    c = healthy()
    c.pods[0] = pod(
        "fsdp-worker-0", "fsdp", "p5", waiting={"reason": "ImagePullBackOff", "message": "not found"}
    )
    c.pods[1] = pod("fsdp-worker-1", "fsdp", "p5", index=1, restarts=4,
                    waiting={"reason": "CrashLoopBackOff", "message": "back-off"})  # fmt: skip
    c.previous_logs["fsdp-worker-1"] = (
        "loading\nTraceback (most recent call last):\nRuntimeError: CUDA out of memory"
    )
    assert "ImagePullBackOff" in finding(tmp_path, c, "pod fsdp-worker-0")["detail"]
    crash = finding(tmp_path, c, "pod fsdp-worker-1")
    assert "CrashLoopBackOff (4 restarts)" in crash["detail"] and "CUDA out of memory" in crash["detail"]


def test_doctor_nccl_falls_back_to_sockets(tmp_path):
    c = healthy()
    c.logs["fsdp-worker-1"] = "NCCL INFO NET/Socket : Using [0]eth0\nNCCL INFO Using network Socket"
    found = finding(tmp_path, c, "NCCL network in fsdp-worker-1")
    assert found["detail"] == "NCCL uses Socket" and "vpc.amazonaws.com/efa" in found["fix"]


def test_doctor_hugging_face_token_missing_or_rejected(tmp_path):
    c = healthy()
    c.pods[1] = pod("fsdp-worker-1", "fsdp", "p5", index=1,
                    waiting={"reason": "CreateContainerConfigError", "message": 'secret "hf-token" not found'})  # fmt: skip
    assert "missing" in finding(tmp_path, c, "Hugging Face token")["detail"]
    c = healthy()
    c.logs["fsdp-worker-0"] += "\nrequests.exceptions.HTTPError: 401 Client Error: Unauthorized for url"
    assert "rejected" in finding(tmp_path, c, "Hugging Face token")["detail"]


def test_doctor_nccl_watchdog_timeout(tmp_path):
    c = healthy()
    c.logs["fsdp-worker-0"] += (
        "\n[rank3]:[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42)"
    )
    assert "watchdog" in finding(tmp_path, c, "collectives in fsdp-worker-0")["detail"]


def test_doctor_says_why_a_job_waits_in_its_queue(tmp_path):
    c = healthy()
    _, checks = doctor(c, tmp_path)
    (queued,) = [x for x in checks if x["name"] == "job fsdp in its queue"]
    assert queued["ok"] and queued["detail"] == "admitted: queue p5"
    # First in its queue and not admitted: the queue itself is the problem.
    inactive = condition("QuotaReserved", "False", "Inadmissible",
                         "ClusterQueue trainstack-p5 is inactive: references missing AdmissionCheck(s)")  # fmt: skip
    c.workloads = [workload("fsdp", "p5", inactive)]
    found = finding(tmp_path, c, "job fsdp in its queue")
    assert found["detail"] == (
        "waiting: first in queue p5, not admitted: ClusterQueue trainstack-p5 is inactive: references missing "
        "AdmissionCheck(s)"
    )
    assert found["fix"].startswith("kubectl -n training describe localqueue p5 (its clusterQueue is the one")
    # Evicted because its pods were not ready in time: Kueue requeues it, doctor says why.
    evicted = condition("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout training/fsdp")
    c.workloads = [workload("fsdp", "p5", condition("QuotaReserved", "False"), evicted)]
    found = finding(tmp_path, c, "job fsdp in its queue")
    assert found["detail"] == "evicted: PodsReadyTimeout: Exceeded the PodsReady timeout training/fsdp"
    assert "podsReadyTimeoutMinutes" in found["fix"]


def test_doctor_passes_an_idle_stack_whose_gpu_groups_are_at_zero(tmp_path):
    """Idle is the normal state now: no GPU node, device plugins with nothing to run on, no job."""
    c = healthy()
    c.nodes = [node("ip-10-0-0-1", None)]
    c.daemonsets = [
        daemonset("nvidia-device-plugin", 0, 0),
        daemonset("aws-efa-k8s-device-plugin-daemonset", 0, 0),
    ]
    c.pods, c.custom, c.logs, c.workloads = [], {}, {}, []
    code, checks = doctor(c, tmp_path)
    assert failing(checks) == {} and code == 0


def test_doctor_reports_gpu_faults_the_node_monitoring_agent_found(tmp_path):
    c = healthy()
    c.nodes[1]["status"]["conditions"].append(
        {
            "type": "AcceleratedHardwareReady",
            "status": "False",
            "reason": "NvidiaXID79Error",
            "message": "GPU has fallen off the bus",
            "lastTransitionTime": CREATED,
        }
    )
    found = finding(tmp_path, c, "node health (EKS node monitoring agent)")
    assert found["detail"] == (
        "ip-10-0-2-1 AcceleratedHardwareReady (NvidiaXID79Error: GPU has fallen off the bus)"
    )
    assert "node auto repair replaces" in found["fix"]


def node_event(node_name: str, reason: str, message: str, count: int = 1) -> dict:
    """A core/v1 Event about a node, as the node monitoring agent or the node controller writes it."""
    return {
        "metadata": {"name": f"{node_name}.{reason.lower()}", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node_name, "apiVersion": "v1"},
        "reason": reason,
        "message": message,
        "count": count,
        "type": "Warning",
        "lastTimestamp": CREATED,
    }


def test_doctor_reports_xid_errors_and_the_nodes_repair_replaced(tmp_path):
    c = healthy()
    # ip-10-0-2-9 had XID 79 and is gone (node repair replaced it); ip-10-0-2-2 had XID 13 twice (a
    # Warning: the application's fault, no repair); ip-10-0-2-1 has XID 48 and is still there.
    c.events = [
        node_event("ip-10-0-2-9", "NvidiaXID79Error", "GPU has fallen off the bus"),
        node_event("ip-10-0-2-9", "RemovingNode", "Node ip-10-0-2-9 event: Removing Node from Controller"),
        node_event("ip-10-0-2-2", "NvidiaXID13Warning", "Graphics Engine Exception", count=2),
        {
            **node_event("web-0", "Killing", "Stopping container"),
            "involvedObject": {"kind": "Pod", "name": "web-0"},
        },
    ]
    code, checks = doctor(c, tmp_path)
    assert code == 0  # a Warning XID and a replaced node leave nothing to do
    xid = {x["name"]: x for x in checks}["GPU XID errors (last hour)"]
    assert xid["ok"] and xid["detail"] == "ip-10-0-2-2: XID 13 x2; ip-10-0-2-9: XID 79 (replaced)"

    c.events.append(node_event("ip-10-0-2-1", "NvidiaXID48Error", "Double Bit ECC Error"))
    found = finding(tmp_path, c, "GPU XID errors (last hour)")
    assert "ip-10-0-2-1: XID 48 (awaiting repair)" in found["detail"]
    assert "kubectl drain ip-10-0-2-1" in found["fix"]
    assert "/api/v1/events" in c.requests


def test_a_node_on_a_driver_older_than_the_image_needs_fails_its_groups_check(tmp_path):
    """The stack's outputs say the image needs R580 (CUDA 13.0); GPU feature discovery's label says
    what each node has. A node without the label passes, named as unchecked."""
    outputs = {**OUTPUTS, "driverNeeded": 580}
    c = healthy()
    c.nodes[1]["metadata"]["labels"]["nvidia.com/cuda.driver-version.major"] = "550"
    code, out = run(c, tmp_path, "doctor", "--json", outputs=outputs)
    (check,) = [x for x in json.loads(out)["checks"] if x["name"] == "NVIDIA driver on p5"]
    assert code == 1 and check["ok"] is False
    assert check["detail"] == (
        "0/2 node(s) on R580 or newer; older: ip-10-0-2-1 (R550); not labelled "
        "(nvidia.com/cuda.driver-version.major, GPU feature discovery): ip-10-0-2-2"
    )
    assert check["fix"].startswith("the training image needs R580: move the group to an AMI with it")
    c.nodes[1]["metadata"]["labels"]["nvidia.com/cuda.driver-version.major"] = "580"
    code, out = run(c, tmp_path, "doctor", "--json", outputs=outputs)
    (check,) = [x for x in json.loads(out)["checks"] if x["name"] == "NVIDIA driver on p5"]
    assert code == 0 and check["ok"] is True
    # Outputs of a stack that did not say which driver its image needs: nothing to check against.
    _, out = run(c, tmp_path, "doctor", "--json")
    assert not [x for x in json.loads(out)["checks"] if x["name"].startswith("NVIDIA driver")]
