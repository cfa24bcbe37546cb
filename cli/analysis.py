"""What the objects of a running stack mean: job phases, why pods wait, metrics, checks, estimates.

Pure functions over Kubernetes objects as plain dicts (the API's JSON), so each rule is tested on
fixture objects shaped like real ones.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field

from conventions import EFA_RESOURCE, GPU_RESOURCE, NODE_GROUP_LABEL

KINDS = {
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayCluster": ("ray.io", "v1", "rayclusters"),
}
WORKLOADS = ("kueue.x-k8s.io", "v1beta2", "workloads")
PROVISIONING_REQUESTS = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")


@dataclass
class Phase:
    name: str
    failed: bool = False
    done: bool = False


def job_phase(kind: str, obj: dict | None) -> Phase:
    """One word per job, as `kubectl get` would say it, and whether it failed."""
    if obj is None:
        return Phase("NotFound", failed=True)
    status = obj.get("status") or {}
    if kind == "PyTorchJob":
        true = [c["type"] for c in status.get("conditions", []) if c.get("status") == "True"]
        for name in ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created"):
            if name in true:
                return Phase(name, failed=name == "Failed", done=name in ("Failed", "Succeeded"))
        return Phase("Pending")
    if kind == "RayJob":
        job, deployment = (
            status.get("jobStatus") or "PENDING",
            status.get("jobDeploymentStatus") or "Initializing",
        )
        failed = job == "FAILED" or deployment in ("Failed", "ValidationFailed")
        return Phase(f"{job} ({deployment})", failed=failed, done=job in ("SUCCEEDED", "FAILED", "STOPPED"))
    state = status.get("state") or "pending"
    provisioned = any(
        c.get("type") == "RayClusterProvisioned" and c.get("status") == "True"
        for c in status.get("conditions", [])
    )
    name = state if state else ("provisioned" if provisioned else "pending")
    return Phase(name, failed=state == "failed")


def expected_pods(kind: str, obj: dict | None) -> int:
    if obj is None:
        return 0
    spec = obj.get("spec") or {}
    if kind == "PyTorchJob":
        return sum(int(r.get("replicas", 1)) for r in spec.get("pytorchReplicaSpecs", {}).values())
    cluster = spec.get("rayClusterSpec", {}) if kind == "RayJob" else spec
    return 1 + sum(int(g.get("replicas", 0)) for g in cluster.get("workerGroupSpecs", []))


def pod_ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def restarts(pod: dict) -> int:
    return sum(
        int(c.get("restartCount", 0)) for c in pod.get("status", {}).get("containerStatuses", []) or []
    )


def pod_role(pod: dict) -> str:
    """`worker-3`, `head`, `worker-<pod suffix>`: what a log line is prefixed with."""
    labels = pod.get("metadata", {}).get("labels", {})
    if "training.kubeflow.org/replica-type" in labels:
        kind = labels["training.kubeflow.org/replica-type"].lower()
        return f"{kind}-{labels.get('training.kubeflow.org/replica-index', '?')}"
    if "ray.io/node-type" in labels:
        node_type = labels["ray.io/node-type"]
        return "head" if node_type == "head" else f"worker-{pod['metadata']['name'].rsplit('-', 1)[-1]}"
    return pod.get("metadata", {}).get("name", "?")


def pod_rank(pod: dict) -> int | None:
    """The node rank of a PyTorchJob worker (torchrun's ranks on it follow from it)."""
    index = pod.get("metadata", {}).get("labels", {}).get("training.kubeflow.org/replica-index")
    return int(index) if index is not None and str(index).isdigit() else None


def parse_metrics(text: str) -> list[dict]:
    """The trainer's `metrics {json}` records with a step and a loss; malformed lines are skipped."""
    found = []
    for line in text.splitlines():
        _, sep, payload = line.partition("metrics ")
        if not sep:
            continue
        try:
            record = json.loads(payload)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and "loss" in record:
            found.append(record)
    return found


def node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def allocatable(node: dict, resource: str) -> int:
    value = node.get("status", {}).get("allocatable", {}).get(resource, "0")
    try:
        return int(value)
    except ValueError:
        return 0


@dataclass
class GroupStatus:
    """A GPU group now: its nodes (the autoscaler adds them per job, up to `maximum`), how many are
    Ready, and the devices each Ready node advertises."""

    name: str
    nodes: int
    ready: int
    minimum: int
    maximum: int
    gpus: list[int]
    efa: list[int]
    gpus_expected: int
    efa_expected: int

    @property
    def failed(self) -> bool:
        return (
            self.ready < self.minimum
            or any(g < self.gpus_expected for g in self.gpus)
            or any(e < self.efa_expected for e in self.efa)
        )


def group_status(name: str, facts: dict, nodes: list[dict]) -> GroupStatus:
    """`facts`: the stack's outputs for the group. Its nodes carry the stack's group label, or (on a
    cluster the stack did not create) the labels its nodeSelector names."""
    selector = facts.get("nodeSelector") or {NODE_GROUP_LABEL: name}
    mine = [n for n in nodes if selector.items() <= n.get("metadata", {}).get("labels", {}).items()]
    ready = [n for n in mine if node_ready(n)]  # a joining node has no devices yet
    maximum = int(facts.get("nodes", 0))
    return GroupStatus(
        name,
        len(mine),
        len(ready),
        int(facts.get("minNodes", maximum)),
        maximum,
        [allocatable(n, GPU_RESOURCE) for n in ready],
        [allocatable(n, EFA_RESOURCE) for n in ready],
        int(facts.get("gpusPerNode", 0)),
        int(facts.get("efaInterfacesPerNode", 0)),
    )


# --- queues ------------------------------------------------------------------------------------


@dataclass
class QueueState:
    """Where a job is in Kueue: admitted, provisioning (quota held, nodes coming), waiting, evicted,
    finished; `failed` when it waits for something that will not come by itself."""

    state: str
    detail: str
    failed: bool = False
    fix: str = ""


def _conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def _true(conditions: dict[str, dict], kind: str) -> bool:
    return conditions.get(kind, {}).get("status") == "True"


def _owned_by(obj: dict, kind: str, name: str) -> bool:
    return any(
        r.get("kind") == kind and r.get("name") == name for r in obj["metadata"].get("ownerReferences", [])
    )


def _owner_name(obj: dict) -> str:
    refs = obj["metadata"].get("ownerReferences", [])
    return refs[0]["name"] if refs else obj["metadata"]["name"]


def queue_state(kind: str, name: str, workloads: list[dict], requests: list[dict]) -> QueueState:
    workload = next((w for w in workloads if _owned_by(w, kind, name)), None)
    if workload is None:
        return QueueState(
            "not queued",
            "Kueue has no Workload for it: Kueue is not running, or the job lacks its queue label",
            True,
            "kubectl -n kueue-system get pods; the stack labels every job (kueue.x-k8s.io/queue-name)",
        )
    cond = _conditions(workload)
    queue = workload["spec"].get("queueName", "?")
    if _true(cond, "Finished"):
        return QueueState("finished", cond["Finished"].get("message", ""))
    if _true(cond, "Admitted"):
        return QueueState("admitted", f"queue {queue}")
    if _true(cond, "Evicted"):
        why = cond["Evicted"]
        return QueueState(
            "evicted",
            f"{why.get('reason', '')}: {why.get('message', '')}".strip(": "),
            True,
            "its pods were not all Ready in time (queueing.podsReadyTimeoutMinutes): "
            "`trainstack doctor` shows why a pod waits; Kueue requeues it with a backoff",
        )
    if _true(cond, "QuotaReserved"):
        return _provisioning(workload, queue, requests)
    ahead = _ahead(workload, workloads)
    message = cond.get("QuotaReserved", {}).get("message") or "not yet considered by Kueue"
    if ahead:
        return QueueState("waiting", f"behind {', '.join(ahead)} in queue {queue}: {message}")
    return QueueState(
        "waiting",
        f"first in queue {queue}, not admitted: {message}",
        True,
        f"kubectl describe clusterqueue trainstack-{queue} (an inactive queue names what it lacks); "
        "kubectl -n kueue-system logs deploy/kueue-controller-manager",
    )


def _ahead(workload: dict, workloads: list[dict]) -> list[str]:
    """Jobs before it in its queue: holding quota, or waiting since earlier (first in, first out)."""
    queue, created = workload["spec"].get("queueName"), workload["metadata"].get("creationTimestamp", "")
    ahead = []
    for other in workloads:
        if other is workload or other["spec"].get("queueName") != queue:
            continue
        cond = _conditions(other)
        if _true(cond, "Finished"):
            continue
        holding = _true(cond, "QuotaReserved") or _true(cond, "Admitted")
        if holding or other["metadata"].get("creationTimestamp", "") < created:
            ahead.append(_owner_name(other) + (" (running)" if holding else " (waiting)"))
    return sorted(ahead)


def _provisioning(workload: dict, queue: str, requests: list[dict]) -> QueueState:
    """Quota reserved; the admission checks (the ProvisioningRequest) decide when it starts."""
    checks = workload.get("status", {}).get("admissionChecks", [])
    mine = [r for r in requests if _owned_by(r, "Workload", workload["metadata"]["name"])]
    request = max(mine, key=lambda r: r["metadata"].get("creationTimestamp", ""), default=None)
    said = []
    failed = False
    for check in checks:
        state = check.get("state", "Pending")
        said.append(f"{check['name']} {state}" + (f": {check['message']}" if check.get("message") else ""))
        failed |= state in ("Retry", "Rejected")
    if request is not None:
        cond = _conditions(request)
        if _true(cond, "Failed"):
            failed = True
            said.append(
                f"ProvisioningRequest {request['metadata']['name']} failed: {cond['Failed'].get('message', '')}"
            )
        elif "Provisioned" in cond:
            said.append(
                f"ProvisioningRequest {request['metadata']['name']}: {cond['Provisioned'].get('message', '')}"
            )
    detail = f"quota held in queue {queue}, nodes being provisioned" + (
        f"; {'; '.join(said)}" if said else ""
    )
    fix = (
        "the autoscaler could not get the nodes (capacity, quota, the AZ): "
        "kubectl -n kube-system logs deploy/cluster-autoscaler; another instance type, AZ or capacity "
        "reservation; Kueue retries the request with a backoff"
        if failed
        else ""
    )
    return QueueState("provisioning", detail, failed, fix)


# --- doctor ------------------------------------------------------------------------------------


@dataclass
class Check:
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
    gpu_groups: dict[str, dict] = field(default_factory=dict)  # stack outputs: gpuNodeGroups
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


def check_nodes(view: ClusterView) -> list[Check]:
    not_ready = [n["metadata"]["name"] for n in view.nodes if not node_ready(n)]
    return [
        Check(
            "nodes Ready",
            not not_ready and bool(view.nodes),
            f"{len(view.nodes) - len(not_ready)}/{len(view.nodes)} Ready"
            + (f"; not Ready: {', '.join(not_ready)}" if not_ready else ""),
            "kubectl describe node <name>: look at its conditions and the kubelet's events"
            if not_ready or not view.nodes
            else "",
        )
    ]


def check_device_plugins(view: ClusterView) -> list[Check]:
    checks = []
    gpu_nodes = [n for n in view.nodes if NODE_GROUP_LABEL in n.get("metadata", {}).get("labels", {})]
    efa_nodes = [
        n for n in gpu_nodes if n["metadata"]["labels"].get("vpc.amazonaws.com/efa.present") == "true"
    ]
    for fragment, resource in PLUGINS.items():
        sets = [d for d in view.daemonsets if fragment in d["metadata"]["name"]]
        wanted = gpu_nodes if resource == GPU_RESOURCE else efa_nodes
        if not sets:
            if wanted:
                checks.append(
                    Check(
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
                checks.append(
                    Check(
                        f"{ds['metadata']['name']} DaemonSet",
                        False,
                        f"0 pods scheduled on {len(wanted)} node(s) that need it: its node affinity matches none",
                        "the NVIDIA chart selects nvidia.com/gpu.present=true (or NFD labels): label the GPU "
                        "nodes, and tolerate nvidia.com/gpu in the EFA plugin",
                    )
                )
            else:
                checks.append(
                    Check(
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
                checks.append(
                    Check(
                        f"{resource} on {node['metadata']['name']}",
                        False,
                        f"allocatable {allocatable(node, resource)}, the instance type has {expected}",
                        "the device plugin pod on that node is missing or failing: "
                        f"kubectl -n kube-system get pods -o wide --field-selector spec.nodeName={node['metadata']['name']}",
                    )
                )
    return checks


def check_operators(view: ClusterView) -> list[Check]:
    checks = [
        Check(
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
        checks.append(
            Check(
                title,
                ready,
                "ready" if ready else ("not ready" if found else "not installed"),
                ""
                if ready
                else f"kubectl get deploy -A | grep {name}; kubectl describe the deployment's pods",
            )
        )
    webhook = any("training-operator" in w for w in view.webhooks)
    operator_ready = any(c.ok for c in checks if c.name == OPERATORS["training-operator"])
    checks.append(
        Check(
            "training operator webhook",
            webhook and operator_ready,
            "serving" if webhook and operator_ready else "not serving: PyTorchJobs are rejected",
            ""
            if webhook and operator_ready
            else "wait for the training-operator Deployment to be Ready (it writes its own certificates)",
        )
    )
    return checks


def _env_names(pod: dict) -> set[str]:
    return {e.get("name") for c in pod.get("spec", {}).get("containers", []) for e in c.get("env", []) or []}


def check_pod_identity(view: ClusterView) -> list[Check]:
    trainers = [p for p in view.pods if p.get("spec", {}).get("serviceAccountName") == "trainer"]
    if not trainers:
        return []
    missing = [
        p["metadata"]["name"] for p in trainers if "AWS_CONTAINER_CREDENTIALS_FULL_URI" not in _env_names(p)
    ]
    return [
        Check(
            "Pod Identity for training/trainer",
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


def check_pods(view: ClusterView) -> list[Check]:
    checks = []
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
                checks.append(Check(f"pod {name}", False, f"Pending: {why} ({message})", fix))
        for container in status.get("containerStatuses", []) or []:
            reason = (container.get("state", {}).get("waiting") or {}).get("reason", "")
            if reason in ("ImagePullBackOff", "ErrImagePull"):
                checks.append(
                    Check(
                        f"pod {name}",
                        False,
                        f"{reason}: {container.get('image')}",
                        "check the image exists in ECR and the node role may pull it (AmazonEC2ContainerRegistryPullOnly)",
                    )
                )
            elif reason == "CrashLoopBackOff":
                tail = "\n".join(view.previous_logs.get(name, "").splitlines()[-10:])
                checks.append(
                    Check(
                        f"pod {name}",
                        False,
                        f"CrashLoopBackOff ({container.get('restartCount', 0)} restarts); last lines:\n{tail}",
                        f"kubectl -n training logs {name} --previous",
                    )
                )
            elif reason == "CreateContainerConfigError" and "hf-token" in (
                container.get("state", {}).get("waiting", {}).get("message", "")
            ):
                checks.append(
                    Check(
                        "Hugging Face token",
                        False,
                        f"pod {name}: the hf-token Secret is missing",
                        "pulumi config set --secret hfToken <token>, then pulumi up",
                    )
                )
    return checks


def check_logs(view: ClusterView) -> list[Check]:
    checks = []
    efa_groups = {g for g, f in view.gpu_groups.items() if int(f.get("efaInterfacesPerNode", 0))}
    for pod in view.pods:
        name = pod["metadata"]["name"]
        text = view.logs.get(name, "")
        group = pod.get("spec", {}).get("nodeSelector", {}).get(NODE_GROUP_LABEL)
        networks = NCCL_NETWORK.findall(text)
        if group in efa_groups and networks:
            efa = all("libfabric" in n.lower() for n in networks)
            checks.append(
                Check(
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
            checks.append(
                Check(
                    f"collectives in {name}",
                    False,
                    "NCCL watchdog timeout: a rank stopped taking part in a collective",
                    "find the rank that died or hung first (trainstack logs JOB), then check its node and EFA",
                )
            )
        if HF_REJECTED.search(text):
            checks.append(
                Check(
                    "Hugging Face token",
                    False,
                    f"pod {name}: the Hub rejected the token",
                    "pulumi config set --secret hfToken <a token with access>, then pulumi up",
                )
            )
    return checks


# Node conditions the EKS node monitoring agent sets (False: a fault it found, such as an NVIDIA XID
# error, a GPU off the bus, an EFA link down); node auto repair replaces such nodes.
HEALTH_CONDITIONS = (
    "AcceleratedHardwareReady",
    "NetworkingReady",
    "KernelReady",
    "ContainerRuntimeReady",
    "StorageReady",
)


def check_node_health(view: ClusterView) -> list[Check]:
    faults = []
    for n in view.nodes:
        for c in n.get("status", {}).get("conditions", []):
            if c.get("type") in HEALTH_CONDITIONS and c.get("status") == "False":
                what = f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
                faults.append(f"{n['metadata']['name']} {c['type']} ({what})")
    return [
        Check(
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


def check_gpu_faults(view: ClusterView) -> list[Check]:
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
        return [Check("GPU XID errors (last hour)", True, "none reported")]
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
    return [Check("GPU XID errors (last hour)", not pending, detail, fix)]


def check_queues(view: ClusterView) -> list[Check]:
    """Why each job waits, if it does: behind other jobs (fine), or for something that will not
    come by itself (a queue it can never fit, nodes the autoscaler cannot get, pods never ready)."""
    checks = []
    for name, kind in view.jobs.items():
        q = queue_state(kind, name, view.workloads, view.provisioning_requests)
        checks.append(
            Check(f"job {name} in its queue", not q.failed, f"{q.state}: {q.detail}".rstrip(": "), q.fix)
        )
    return checks


def doctor(view: ClusterView) -> list[Check]:
    return [
        *check_nodes(view),
        *check_node_health(view),
        *check_gpu_faults(view),
        *check_queues(view),
        *check_device_plugins(view),
        *check_operators(view),
        *check_pod_identity(view),
        *check_pods(view),
        *check_logs(view),
    ]


# --- estimate ----------------------------------------------------------------------------------


@dataclass
class EstimateRow:
    nodes: int
    tokens_per_s: float
    hours: float
    cost_usd: float


def estimate(
    tokens: float,
    measured_tokens_per_s: float,
    measured_nodes: int,
    hourly_usd_per_node: float,
    max_nodes: int,
    efficiency: float,
) -> list[EstimateRow]:
    """Time and cost to train `tokens` on 1, 2, 4, ... nodes: throughput scales with the node count
    times `efficiency` per doubling away from the measured configuration."""
    rows = []
    nodes = 1
    while nodes <= max_nodes:
        # Fewer nodes than measured scale up by the same rule (less communication per node).
        scale = (nodes / measured_nodes) * efficiency ** math.log2(nodes / measured_nodes)
        tput = measured_tokens_per_s * scale
        hours = tokens / tput / 3600
        rows.append(EstimateRow(nodes, tput, hours, hours * nodes * hourly_usd_per_node))
        nodes *= 2
    return rows
