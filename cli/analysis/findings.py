"""`doctor`'s findings: each rule an EKS training engineer checks (nodes, GPU faults, HyperPod's node
health, queues, device plugins, operators, Pod Identity, pending and crashing pods, NCCL in the
logs), with a fix for each failure."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from cli.analysis.phases import allocatable, node_ready
from cli.analysis.queues import queue_state
from conventions import (
    EFA_RESOURCE,
    GPU_RESOURCE,
    HYPERPOD_CLUSTER_LABEL,
    HYPERPOD_DEEP_HEALTH_LABEL,
    HYPERPOD_DEEP_HEALTH_PASSED,
    HYPERPOD_HEALTH_LABEL,
    HYPERPOD_SCHEDULABLE,
    JOB_LABEL,
    NODE_GROUP_LABEL,
    job_service_account,
)
from stack_outputs import GpuNodeGroup


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class ClusterView:
    """What `doctor` looks at, fetched once."""

    nodes: list[dict]
    daemonsets: list[dict]
    deployments: list[dict]
    crds: list[str]
    webhooks: list[str]
    pods: list[dict]
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> recent log
    previous_logs: dict[str, str] = field(default_factory=dict)  # pod name -> last crashed run
    gpu_groups: dict[str, GpuNodeGroup] = field(default_factory=dict)  # stack outputs: gpuNodeGroups
    jobs: dict[str, str] = field(default_factory=dict)  # the stack's jobs that exist: name -> kind
    workloads: list[dict] = field(default_factory=list)  # Kueue's, one per queued job
    provisioning_requests: list[dict] = field(default_factory=list)
    node_events: list[dict] = field(default_factory=list)


REQUIRED_CRDS = (
    "pytorchjobs.kubeflow.org",
    "rayjobs.ray.io",
    "rayclusters.ray.io",
    "workloads.kueue.x-k8s.io",
    "provisioningrequests.autoscaling.x-k8s.io",
)
# Deployments by the names their manifests and charts give them (release names as the stack sets).
OPERATORS = {
    "training-operator": "Kubeflow training operator",
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


# Node conditions the EKS node monitoring agent sets (False: a fault it found, such as an NVIDIA XID
# error, a GPU off the bus, an EFA link down); node auto repair replaces such nodes.
HEALTH_CONDITIONS = (
    "AcceleratedHardwareReady",
    "NetworkingReady",
    "KernelReady",
    "ContainerRuntimeReady",
    "StorageReady",
)


def check_node_health(view: ClusterView) -> list[Finding]:
    faults = []
    for n in view.nodes:
        for c in n.get("status", {}).get("conditions", []):
            if c.get("type") in HEALTH_CONDITIONS and c.get("status") == "False":
                what = f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
                faults.append(f"{n['metadata']['name']} {c['type']} ({what})")
    return [
        Finding(
            "node health (EKS node monitoring agent)",
            not faults,
            "; ".join(faults) if faults else "no GPU, network, kernel, runtime or storage fault reported",
            "node auto repair replaces a faulty GPU node (gpuNodeGroups[].autoRepair, on by default); the job's "
            "watchdog and torchrun restart it from its newest checkpoint. Without repair: kubectl drain the node"
            if faults
            else "",
        )
    ]


# The node monitoring agent's XID reasons: NvidiaXID<code>Error for the codes it treats as fatal (it
# also sets AcceleratedHardwareReady False, so node repair replaces the node); NvidiaXID<code>Warning,
# an event only, for the rest (often the application's own fault: 13, 31, 43).
XID_EVENT = re.compile(r"^NvidiaXID(\d+)(Error|Warning)$")
NODE_REMOVED = "RemovingNode"  # the node lifecycle controller's event when a Node object goes


def check_gpu_faults(view: ClusterView) -> list[Finding]:
    """XID errors of the last hour (what Kubernetes keeps of events), and which faulty nodes are
    already gone: replaced by node repair (or the autoscaler), so the job only needed its restart."""
    present = {n["metadata"]["name"] for n in view.nodes}
    xids: dict[str, dict[str, int]] = {}
    fatal, removed = set(), set()
    for e in view.node_events:
        name = e.get("involvedObject", {}).get("name", "")
        if m := XID_EVENT.match(e.get("reason", "")):
            codes = xids.setdefault(name, {})
            codes[m.group(1)] = codes.get(m.group(1), 0) + (e.get("count") or 1)
            if m.group(2) == "Error":
                fatal.add(name)
        elif e.get("reason") == NODE_REMOVED:
            removed.add(name)
    if not xids:
        return [Finding("GPU XID errors (last hour)", True, "none reported")]
    replaced = sorted(n for n in fatal if n in removed or n not in present)
    pending = sorted(n for n in fatal if n not in replaced)

    def describe(node: str) -> str:
        codes = ", ".join(f"XID {c}" + (f" x{k}" if k > 1 else "") for c, k in sorted(xids[node].items()))
        state = " (replaced)" if node in replaced else " (awaiting repair)" if node in pending else ""
        return f"{node}: {codes}{state}"

    detail = "; ".join(describe(n) for n in sorted(xids))
    fix = (
        "node auto repair replaces a node with a fatal XID (gpuNodeGroups[].autoRepair); with it off, "
        f"kubectl drain {pending[0]} and terminate its instance"
        if pending
        else ""
    )
    return [Finding("GPU XID errors (last hour)", not pending, detail, fix)]


# HyperPod's node-health-status values other than Schedulable: what each means, and the manual
# action (BatchReplaceClusterNodes / BatchRebootClusterNodes) when the cluster's node recovery is
# None ("Resilience-related Kubernetes labels by SageMaker HyperPod", "Manually quarantine,
# replace, or reboot a node", AWS SageMaker developer guide).
HYPERPOD_STATES = {
    "Unschedulable": ("is running deep health checks", None),
    "UnschedulablePendingReplacement": ("failed a health check and awaits replacement", "replace"),
    "UnschedulablePendingReboot": ("failed a health check and awaits a reboot", "reboot"),
}
INSTANCE_ID = re.compile(r"i-[0-9a-f]{8,17}")


def _pods_on(view: ClusterView, node: str) -> list[str]:
    """The stack's job pods bound to `node`."""
    return sorted(
        p["metadata"]["name"]
        for p in view.pods
        if p.get("spec", {}).get("nodeName") == node and JOB_LABEL in (p["metadata"].get("labels") or {})
    )


def check_hyperpod_health(view: ClusterView) -> list[Finding]:
    """HyperPod's health agents label each of its nodes (and taint an unhealthy one with the same
    key, NoSchedule); the stack's jobs there require Schedulable. Nothing on a cluster without them."""
    nodes = [n for n in view.nodes if HYPERPOD_HEALTH_LABEL in (n["metadata"].get("labels") or {})]
    if not nodes:
        return []
    faults, fixes = [], []
    for n in nodes:
        name, labels = n["metadata"]["name"], n["metadata"]["labels"]
        state = labels[HYPERPOD_HEALTH_LABEL]
        tainted = [t for t in n.get("spec", {}).get("taints") or [] if t.get("key") == HYPERPOD_HEALTH_LABEL]
        if state == HYPERPOD_SCHEDULABLE and not tainted:
            continue
        meaning, action = HYPERPOD_STATES.get(state, (f"is {state}", None))
        if tainted:
            t = tainted[0]
            meaning += (
                f", tainted {t['key']}={t.get('value', '')}:{t.get('effect', '')} (no new pod lands there)"
            )
        pods = _pods_on(view, name)
        faults.append(f"{name} {meaning}" + (f"; job pods on it: {', '.join(pods)}" if pods else ""))
        if action:
            instance = INSTANCE_ID.search(name)
            cluster = labels.get(HYPERPOD_CLUSTER_LABEL, "<cluster>")
            fixes.append(
                f"HyperPod's automatic node recovery will {action} {name}; with node recovery None: "
                f"aws sagemaker batch-{action}-cluster-nodes --cluster-name {cluster} "
                f"--node-ids {instance.group(0) if instance else '<instance id>'}"
            )
        elif state == "Unschedulable":
            fixes.append(f"wait for the deep health checks on {name} (label {HYPERPOD_DEEP_HEALTH_LABEL})")
    if faults:
        fixes.append(
            "a PyTorchJob with auto-resume restarts from its newest checkpoint once the node is back; "
            "`trainstack status` shows where it is"
        )
    healthy = len(nodes) - len(faults)
    found = [
        Finding(
            "node health (HyperPod)",
            not faults,
            f"{healthy}/{len(nodes)} Schedulable" + (f"; {'; '.join(faults)}" if faults else ""),
            "; ".join(fixes),
        )
    ]
    deep = {n["metadata"]["name"]: n["metadata"]["labels"].get(HYPERPOD_DEEP_HEALTH_LABEL) for n in nodes}
    failed = sorted(name for name, status in deep.items() if status == "Failed")
    running = sorted(name for name, status in deep.items() if status == "InProgress")
    passed = sum(status == HYPERPOD_DEEP_HEALTH_PASSED for status in deep.values())
    detail = f"{passed}/{len(nodes)} passed"
    if running:
        detail += f"; in progress on {', '.join(running)} (not available to jobs until they finish)"
    if failed:
        detail += f"; failed on {', '.join(failed)}"
    found.append(
        Finding(
            "deep health checks (HyperPod)",
            not failed,
            detail,
            "HyperPod reboots or replaces a node that failed them (see node health); a job with "
            "hyperpod.deepHealthCheck: required waits for nodes that passed"
            if failed
            else "",
        )
    )
    return found


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
        *check_node_health(view),
        *check_hyperpod_health(view),
        *check_gpu_faults(view),
        *check_queues(view),
        *check_device_plugins(view),
        *check_operators(view),
        *check_pod_identity(view),
        *check_pods(view),
        *check_logs(view),
    ]
