"""`trainstack` run for real against a local Kubernetes API server (tests/kube_server.py) serving
fixture objects shaped like real ones; custom resources validate against ../shared/crds."""

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
    crd,
    daemonset,
    deployment,
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

from cli import kube
from cli.analysis import phases
from cli.main import main

# --- status ------------------------------------------------------------------------------------


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
    c.custom = {(kube.KINDS[kind][2], "j"): obj}
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
        "metrics": {"step": 20, "loss": 3.9, "tokens_per_s": 1300000.0, "mfu": 0.44},
        "mlflowRun": None,  # the stack tracks nothing
    }  # fmt: skip
    (group,) = data["nodeGroups"]
    assert group == {"name": "p5", "nodes": 2, "ready": 2, "minimum": 0, "maximum": 2, "gpus": [8, 8],
                     "efa": [32, 32], "gpus_expected": 8, "efa_expected": 32, "failed": False}  # fmt: skip
    assert code == 0 and data["failed"] is False
    code, text = run(c, tmp_path, "status")
    assert "fsdp" in text and "step 20 loss 3.9 1,300,000 tok/s MFU 44.0%" in text and "2/2" in text
    assert "admitted" in text and "0-2" in text
    assert "\033[" not in text  # piped: no colours


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


# --- logs --------------------------------------------------------------------------------------


def test_logs_are_prefixed_by_role_and_rank(tmp_path):
    code, out = run(healthy(), tmp_path, "logs", "fsdp")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == '[worker-0] metrics {"event": "start", "resumed_from": 0}'
    assert "[worker-1] rank 1 up" in lines
    code, out = run(healthy(), tmp_path, "logs", "fsdp", "--rank", "1", "--tail", "1")
    assert out.splitlines() == ["[worker-1] NCCL INFO Using network Libfabric"]


def test_logs_since_and_json(tmp_path):
    c = healthy()
    c.logs["fsdp-worker-1"] = "900|old line\n30|recent line"
    _, out = run(c, tmp_path, "logs", "fsdp", "--rank", "1", "--since", "1m", "--json")
    assert [json.loads(x) for x in out.splitlines()] == [
        {"pod": "fsdp-worker-1", "role": "worker-1", "line": "recent line"}
    ]


def test_logs_follow_streams_every_pod(tmp_path):
    c = healthy()
    c.logs = {"fsdp-worker-0": "a\nb\nc", "fsdp-worker-1": "x\ny"}
    code, out = run(c, tmp_path, "logs", "fsdp", "--follow")
    assert code == 0
    assert sorted(out.splitlines()) == sorted(
        ["[worker-0] a", "[worker-0] b", "[worker-0] c", "[worker-1] x", "[worker-1] y"]
    )
    assert [ln for ln in out.splitlines() if ln.startswith("[worker-0]")] == [
        "[worker-0] a",
        "[worker-0] b",
        "[worker-0] c",
    ]


def test_ray_pods_are_prefixed_head_and_worker():
    head = pod("r-head-abcde", "r", "gpu", ray="head")
    worker = pod("r-gpu-worker-xk2p9", "r", "gpu", ray="worker")
    assert (phases.pod_role(head), phases.pod_role(worker)) == ("head", "worker-xk2p9")


# --- doctor ------------------------------------------------------------------------------------


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
            "Pod Identity for training/trainer", "NCCL network in fsdp-worker-0"} <= names  # fmt: skip
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
    assert "fsdp-worker-0" in finding(tmp_path, c, "Pod Identity for training/trainer")["detail"]


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


# --- metrics and estimate ------------------------------------------------------------------------


def test_metrics_table_skips_malformed_lines_and_plots(tmp_path):
    code, out = run(healthy(), tmp_path, "metrics", "fsdp", "--json", "--plot", str(tmp_path / "curve.png"))
    data = json.loads(out)
    assert [r["step"] for r in data["records"]] == [10, 20]
    assert data["records"][1]["val_loss"] == 3.95
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, text = run(healthy(), tmp_path, "metrics", "fsdp")
    assert code == 0 and "      20   3.9000   3.9500    1,300,000   44.0%" in text


def test_metrics_of_a_job_without_metrics_exit_nonzero(tmp_path):
    c = healthy()
    c.logs = {}
    code, _ = run(c, tmp_path, "metrics", "fsdp")
    assert code == 1


def test_estimate_table(tmp_path):
    code, out = run(
        healthy(), tmp_path, "estimate", "fsdp", "--tokens", "1e12", "--json", "--efficiency", "0.9"
    )
    data = json.loads(out)
    rows = {r["nodes"]: r for r in data["rows"]}
    assert data["measured"] == {"tokensPerS": 1300000.0, "nodes": 2}
    assert rows[2]["tokens_per_s"] == pytest.approx(1.3e6)
    assert rows[4]["tokens_per_s"] == pytest.approx(1.3e6 * 2 * 0.9)
    assert rows[1]["tokens_per_s"] == pytest.approx(1.3e6 / 2 / 0.9)
    assert rows[2]["hours"] == pytest.approx(1e12 / 1.3e6 / 3600)
    assert rows[2]["cost_usd"] == pytest.approx(rows[2]["hours"] * 110.08)
    assert sorted(rows) == [1, 2, 4, 8]
    code, text = run(healthy(), tmp_path, "estimate", "fsdp", "--tokens", "1e12", "--tokens-per-s", "1e6")
    assert code == 0 and "measured 1,000,000 tokens/s on 2 node(s)" in text


def test_an_unknown_job_is_a_usage_error(tmp_path):
    code, out = run(healthy(), tmp_path, "estimate", "nope", "--tokens", "1e9")
    assert code == 2 and out == ""


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
    assert found["fix"].startswith("kubectl describe clusterqueue trainstack-p5")
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
