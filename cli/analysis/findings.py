"""`doctor`'s findings: each rule an EKS training engineer checks (nodes, GPU faults, HyperPod's node
health, queues, device plugins, operators, Pod Identity, pending and crashing pods, NCCL in the
logs), with a fix for each failure."""

from __future__ import annotations

import re

from cli.analysis.drivers import check_drivers
from cli.analysis.node_findings import (
    check_gpu_faults,
    check_health_gate,
    check_hyperpod_health,
    check_node_health,
)
from cli.analysis.phases import allocatable, node_ready
from cli.analysis.queues import queue_state
from cli.analysis.view import ClusterView, Finding
from conventions import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    JOB_LABEL,
    NODE_GROUP_LABEL,
    job_service_account,
)

REQUIRED_CRDS = (
    "pytorchjobs.kubeflow.org",
    "trainjobs.trainer.kubeflow.org",
    "jobsets.jobset.x-k8s.io",
    "rayjobs.ray.io",
    "rayclusters.ray.io",
    "workloads.kueue.x-k8s.io",
    "provisioningrequests.autoscaling.x-k8s.io",
)
# Deployments by the names their manifests and charts give them (release names as the stack sets).
OPERATORS = {
    "training-operator": "Kubeflow training operator",
    "kubeflow-trainer-controller-manager": "Kubeflow Trainer",
    "jobset-controller": "JobSet controller",
    "kuberay-operator": "KubeRay operator",
    "kueue-controller-manager": "Kueue",
    "cluster-autoscaler-aws-cluster-autoscaler": "cluster autoscaler",
}
PLUGINS = {"nvidia-device-plugin": GPU_RESOURCE, "efa-k8s-device-plugin": EFA_RESOURCE}
NCCL_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.MULTILINE)
WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*Timeout", re.IGNORECASE
)
HF_REJECTED = re.compile(
    r"401 Client Error|Invalid (user )?token|Access to model .* is restricted|gated repo", re.I
)


def check_nodes(view: ClusterView) -> list[Finding]:
    not_ready = [n["metadata"]["name"] for n in view.nodes if not node_ready(n)]
    return [
        Finding(
            "nodes Ready",
            not not_ready and bool(view.nodes),
            f"{len(view.nodes) - len(not_ready)}/{len(view.nodes)} Ready"
            + (f"; not Ready: {', '.join(not_ready)}" if not_ready else ""),
            "kubectl describe node <name>: look at its conditions and the kubelet's events"
            if not_ready or not view.nodes
            else "",
        )
    ]


def check_device_plugins(view: ClusterView) -> list[Finding]:
    findings = []
    gpu_nodes = [n for n in view.nodes if NODE_GROUP_LABEL in n.get("metadata", {}).get("labels", {})]
    efa_nodes = [
        n for n in gpu_nodes if n["metadata"]["labels"].get("vpc.amazonaws.com/efa.present") == "true"
    ]
    for fragment, resource in PLUGINS.items():
        sets = [d for d in view.daemonsets if fragment in d["metadata"]["name"]]
        wanted = gpu_nodes if resource == GPU_RESOURCE else efa_nodes
        if not sets:
            if wanted:
                findings.append(
                    Finding(
                        f"{fragment} DaemonSet",
                        False,
                        f"not installed, and {len(wanted)} node(s) need it",
                        f"turn trainstack:operators.{'nvidiaDevicePlugin' if resource == GPU_RESOURCE else 'efaDevicePlugin'} on",
                    )
                )
            continue
        for ds in sets:
            status = ds.get("status", {})
            desired, ready = status.get("desiredNumberScheduled", 0), status.get("numberReady", 0)
            if desired == 0 and wanted:
                findings.append(
                    Finding(
                        f"{ds['metadata']['name']} DaemonSet",
                        False,
                        f"0 pods scheduled on {len(wanted)} node(s) that need it: its node affinity matches none",
                        "the NVIDIA chart selects nvidia.com/gpu.present=true (or NFD labels): label the GPU "
                        "nodes, and tolerate nvidia.com/gpu in the EFA plugin",
                    )
                )
            else:
                findings.append(
                    Finding(
                        f"{ds['metadata']['name']} DaemonSet",
                        ready >= desired,
                        f"{ready}/{desired} pods ready",
                        ""
                        if ready >= desired
                        else f"kubectl -n kube-system describe daemonset {ds['metadata']['name']}",
                    )
                )
    for node in gpu_nodes:
        group = node["metadata"]["labels"][NODE_GROUP_LABEL]
        facts = view.gpu_groups.get(group, {})
        for resource, key in ((GPU_RESOURCE, "gpusPerNode"), (EFA_RESOURCE, "efaInterfacesPerNode")):
            expected = int(facts.get(key, 0))
            if expected and allocatable(node, resource) < expected:
                findings.append(
                    Finding(
                        f"{resource} on {node['metadata']['name']}",
                        False,
                        f"allocatable {allocatable(node, resource)}, the instance type has {expected}",
                        "the device plugin pod on that node is missing or failing: "
                        f"kubectl -n kube-system get pods -o wide --field-selector spec.nodeName={node['metadata']['name']}",
                    )
                )
    return findings


def check_operators(view: ClusterView) -> list[Finding]:
    findings = [
        Finding(
            f"CRD {crd}",
            crd in view.crds,
            "installed" if crd in view.crds else "missing",
            "" if crd in view.crds else "turn the operator that serves it back on and run `pulumi up`",
        )
        for crd in REQUIRED_CRDS
    ]
    for name, title in OPERATORS.items():
        found = [d for d in view.deployments if d["metadata"]["name"] == name]
        ready = bool(found) and found[0].get("status", {}).get("readyReplicas", 0) >= 1
        findings.append(
            Finding(
                title,
                ready,
                "ready" if ready else ("not ready" if found else "not installed"),
                ""
                if ready
                else f"kubectl get deploy -A | grep {name}; kubectl describe the deployment's pods",
            )
        )
    webhook = any("training-operator" in w for w in view.webhooks)
    operator_ready = any(c.ok for c in findings if c.name == OPERATORS["training-operator"])
    findings.append(
        Finding(
            "training operator webhook",
            webhook and operator_ready,
            "serving" if webhook and operator_ready else "not serving: PyTorchJobs are rejected",
            ""
            if webhook and operator_ready
            else "wait for the training-operator Deployment to be Ready (it writes its own certificates)",
        )
    )
    return findings


def _env_names(pod: dict) -> set[str]:
    return {e.get("name") for c in pod.get("spec", {}).get("containers", []) for e in c.get("env", []) or []}


def check_pod_identity(view: ClusterView) -> list[Finding]:
    """Each job's pods run as the job's own account, which Pod Identity gives its role."""
    trainers = [
        p
        for p in view.pods
        if (job := p.get("metadata", {}).get("labels", {}).get(JOB_LABEL))
        and p.get("spec", {}).get("serviceAccountName") == job_service_account(job)
    ]
    if not trainers:
        return []
    missing = [
        p["metadata"]["name"] for p in trainers if "AWS_CONTAINER_CREDENTIALS_FULL_URI" not in _env_names(p)
    ]
    return [
        Finding(
            "Pod Identity for each job's service account",
            not missing,
            "credentials injected" if not missing else f"no Pod Identity credentials in {', '.join(missing)}",
            ""
            if not missing
            else "check the association (aws eks list-pod-identity-associations) and the eks-pod-identity-agent "
            "add-on; pods created before the association need a restart",
        )
    ]


PENDING_RULES = (
    (
        re.compile(r"Insufficient nvidia\.com/gpu"),
        "not enough free GPUs",
        "wait for running jobs, or scale the node group",
    ),
    (
        re.compile(r"Insufficient vpc\.amazonaws\.com/efa"),
        "not enough free EFA interfaces",
        "check the EFA device plugin runs on the group's nodes",
    ),
    (
        re.compile(r"untolerated taint"),
        "a node taint the pod does not tolerate",
        "tolerate nvidia.com/gpu (trainstack does for GPU jobs)",
    ),
    (
        re.compile(r"didn't match Pod's node affinity/selector"),
        "no node matches its node selector",
        "the node group may not exist yet, or its nodes are not Ready",
    ),
    (
        re.compile(r"Insufficient (cpu|memory)"),
        "not enough CPU or memory",
        "lower the requests or use a larger instance",
    ),
)


def check_pods(view: ClusterView) -> list[Finding]:
    findings = []
    for pod in view.pods:
        name = pod["metadata"]["name"]
        status = pod.get("status", {})
        if status.get("phase") == "Pending":
            scheduled = next((c for c in status.get("conditions", []) if c.get("type") == "PodScheduled"), {})
            message = scheduled.get("message", "")
            if scheduled.get("status") == "False":
                why, fix = next(
                    ((w, f) for rule, w, f in PENDING_RULES if rule.search(message)),
                    ("it cannot be scheduled", "kubectl describe pod: read its events"),
                )
                findings.append(Finding(f"pod {name}", False, f"Pending: {why} ({message})", fix))
        for container in status.get("containerStatuses", []) or []:
            reason = (container.get("state", {}).get("waiting") or {}).get("reason", "")
            if reason in ("ImagePullBackOff", "ErrImagePull"):
                findings.append(
                    Finding(
                        f"pod {name}",
                        False,
                        f"{reason}: {container.get('image')}",
                        "check the image exists in ECR and the node role may pull it (AmazonEC2ContainerRegistryPullOnly)",
                    )
                )
            elif reason == "CrashLoopBackOff":
                tail = "\n".join(view.previous_logs.get(name, "").splitlines()[-10:])
                findings.append(
                    Finding(
                        f"pod {name}",
                        False,
                        f"CrashLoopBackOff ({container.get('restartCount', 0)} restarts); last lines:\n{tail}",
                        f"kubectl -n training logs {name} --previous",
                    )
                )
            elif reason == "CreateContainerConfigError" and "hf-token" in (
                container.get("state", {}).get("waiting", {}).get("message", "")
            ):
                findings.append(
                    Finding(
                        "Hugging Face token",
                        False,
                        f"pod {name}: the hf-token Secret is missing",
                        "pulumi config set --secret hfToken <token>, then pulumi up",
                    )
                )
    return findings


def check_logs(view: ClusterView) -> list[Finding]:
    findings = []
    efa_groups = {g for g, f in view.gpu_groups.items() if int(f.get("efaInterfacesPerNode", 0))}
    for pod in view.pods:
        name = pod["metadata"]["name"]
        text = view.logs.get(name, "")
        group = pod.get("spec", {}).get("nodeSelector", {}).get(NODE_GROUP_LABEL)
        networks = NCCL_NETWORK.findall(text)
        if group in efa_groups and networks:
            efa = all("libfabric" in n.lower() for n in networks)
            findings.append(
                Finding(
                    f"NCCL network in {name}",
                    efa,
                    f"NCCL uses {networks[-1]}",
                    ""
                    if efa
                    else "NCCL fell back to TCP sockets: the pod must request vpc.amazonaws.com/efa, and the image "
                    "needs aws-ofi-nccl on LD_LIBRARY_PATH with FI_PROVIDER=efa",
                )
            )
        if WATCHDOG.search(text):
            findings.append(
                Finding(
                    f"collectives in {name}",
                    False,
                    "NCCL watchdog timeout: a rank stopped taking part in a collective",
                    "find the rank that died or hung first (trainstack logs JOB), then check its node and EFA",
                )
            )
        if HF_REJECTED.search(text):
            findings.append(
                Finding(
                    "Hugging Face token",
                    False,
                    f"pod {name}: the Hub rejected the token",
                    "pulumi config set --secret hfToken <a token with access>, then pulumi up",
                )
            )
    return findings


def check_queues(view: ClusterView) -> list[Finding]:
    """Why each job waits, if it does: behind other jobs (fine), or for something that will not
    come by itself (a queue it can never fit, nodes the autoscaler cannot get, pods never ready)."""
    findings = []
    for name, kind in view.jobs.items():
        q = queue_state(kind, name, view.workloads, view.provisioning_requests)
        findings.append(
            Finding(f"job {name} in its queue", not q.failed, f"{q.state}: {q.detail}".rstrip(": "), q.fix)
        )
    return findings


def doctor(view: ClusterView) -> list[Finding]:
    return [
        *check_nodes(view),
        *check_drivers(view),
        *check_node_health(view),
        *check_health_gate(view),
        *check_hyperpod_health(view),
        *check_gpu_faults(view),
        *check_queues(view),
        *check_device_plugins(view),
        *check_operators(view),
        *check_pod_identity(view),
        *check_pods(view),
        *check_logs(view),
    ]
