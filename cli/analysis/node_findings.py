"""`doctor`'s findings on the nodes themselves: the EKS node monitoring agent's health conditions,
GPU faults (NVIDIA XID events, removed nodes), the stack's health gate, and HyperPod's node health
and deep health checks."""

from __future__ import annotations

import json
import re

from cli.analysis.view import ClusterView, Finding
from conventions import (
    HEALTH_FAILED_TAINT_KEY,
    HEALTH_LABEL,
    HEALTH_MODE_LABEL,
    HEALTH_RESULT_ANNOTATION,
    HEALTH_STARTUP_TAINT_KEY,
    HYPERPOD_CLUSTER_LABEL,
    HYPERPOD_DEEP_HEALTH_LABEL,
    HYPERPOD_DEEP_HEALTH_PASSED,
    HYPERPOD_HEALTH_LABEL,
    HYPERPOD_SCHEDULABLE,
    JOB_LABEL,
)

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
# What HyperPod's health monitoring agent found on a node it marks unhealthy: the fault's category and
# its reason, as labels beside node-health-status.
HYPERPOD_FAULT_LABELS = ("sagemaker.amazonaws.com/fault-types", "sagemaker.amazonaws.com/fault-reasons")


def _pods_on(view: ClusterView, node: str) -> list[str]:
    """The stack's job pods bound to `node`."""
    return sorted(
        p["metadata"]["name"]
        for p in view.pods
        if p.get("spec", {}).get("nodeName") == node and JOB_LABEL in (p["metadata"].get("labels") or {})
    )


def check_health_gate(view: ClusterView) -> list[Finding]:
    """The stack's health gate (components/health_gate.py) on the nodes of its gated groups: which are
    still burning in, which failed and why. Nothing on a cluster whose nodes carry no gate."""
    gated = [n for n in view.nodes if HEALTH_MODE_LABEL in (n["metadata"].get("labels") or {})]
    if not gated:
        return []
    burning, failed = [], []
    for n in gated:
        name, labels = n["metadata"]["name"], n["metadata"]["labels"]
        if any(t.get("key") == HEALTH_STARTUP_TAINT_KEY for t in n.get("spec", {}).get("taints") or []):
            burning.append(name)
        elif labels.get(HEALTH_LABEL) == "failed":
            result = json.loads(
                (n["metadata"].get("annotations") or {}).get(HEALTH_RESULT_ANNOTATION) or "{}"
            )
            failed.append(
                f"{name} ({result.get('severity', '?')}: {result.get('summary', 'no result recorded')})"
            )
    detail = f"{len(gated) - len(burning) - len(failed)}/{len(gated)} passed or watched"
    if burning:
        detail += f"; burning in: {', '.join(sorted(burning))} (no job lands there until it passes)"
    if failed:
        detail += f"; failed: {'; '.join(sorted(failed))}"
    fix = (
        "a failed node is tainted and its Auto Scaling group replaces it; the gate's Events on the node "
        f"(reason TrainstackHealthFailed) and its burn-in pod's logs say more; {HEALTH_FAILED_TAINT_KEY} stays "
        "until the node is gone"
        if failed
        else ""
    )
    return [Finding("node health gate", not failed, detail, fix)]


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
        fault = [labels[k] for k in HYPERPOD_FAULT_LABELS if labels.get(k)]
        if fault:
            meaning += f" ({': '.join(fault)})"
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
