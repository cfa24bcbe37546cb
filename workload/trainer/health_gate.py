"""The health gate: no GPU node of a burnt-in group takes training until it has proven itself, and a
node whose hardware fails while it trains is taken out at once.

Each round, over the stack's GPU nodes (`--nodes`):
  - a node that still carries the startup taint (conventions.HEALTH_STARTUP_TAINT_KEY) and whose
    device plugin advertises its GPUs gets a burn-in pod, bound to it, whose init containers run
    the steps in order and stop at the first fatal one (trainer.burn_in: inventory and Xids, EFA,
    NVLink; NVIDIA's DCGM diagnostics; nccl-tests' all-reduce against the group's floor);
  - a finished burn-in is judged from its containers' termination messages. Passed: the startup
    taint goes, the node is labelled passed with its result, the pod is deleted and the node's
    all-reduce figure joins its group's calibration. Failed: the NoExecute taint valued by the
    severity takes the startup taint's place, the node is labelled failed, an Event says why, and
    its Auto Scaling group replaces it (instance health Unhealthy), unless more of the group is
    failing than the breaker allows, which the Event then says instead;
  - a node the EKS node monitoring agent finds faulty (AcceleratedHardwareReady False: an Xid it
    treats as fatal, a row remap failure, NVLink errors) gets the NoExecute taint at once, so its
    job's pods leave it and the gang restarts on other nodes; node repair replaces it.

Floors are data: the group's figures of its healthy nodes, kept in a ConfigMap this controller owns
(`--floors`), of which `--floor-fraction` of the median is the floor once CALIBRATION_NODES passed;
before that the published figure the stack passes in, else none (the figure is recorded).

    python -m trainer.health_gate --nodes trainstack.dev/role=gpu --namespace trainstack-system \\
        --groups '{"p5": {...}}' --image <training image> --dcgm-image <DCGM image>
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import statistics
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime

from trainer import kube_api
from trainer.health_checks import XID_SEVERITY, worst

# conventions.py's, which a test holds equal: the image carries the trainer, not the stack.
STARTUP_TAINT_KEY = "startup-taint.cluster-autoscaler.kubernetes.io/trainstack-gate"
FAILED_TAINT_KEY = "status-taint.cluster-autoscaler.kubernetes.io/trainstack-unhealthy"
MODE_LABEL = "trainstack.dev/health-mode"
HEALTH_LABEL = "trainstack.dev/health"
RESULT_ANNOTATION = "trainstack.dev/health-result"
# What becomes of a failed node: its group replaces it (`asked`), once the breaker lets it
# (`held` until then), or EKS node repair does (`repair`: a fault the monitoring agent found).
REMEDY_ANNOTATION = "trainstack.dev/health-remedy"
NODE_GROUP_LABEL = "trainstack.dev/node-group"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
STARTUP_TOLERATION = {"key": STARTUP_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# A failed burn-in stays on its node to be read (its steps' logs) after the NoExecute taint, which
# would otherwise have it evicted at once.
FAILED_TOLERATION = {"key": FAILED_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}

POD_NAME = "trainstack-burn-in"
POD_NODE_LABEL = "trainstack.dev/burn-in-node"
# What a burn-in pod checks: its node alone, or two fresh nodes together (`pair`).
POD_STEP_LABEL = "trainstack.dev/burn-in-step"
PAIR_NAME = "trainstack-burn-in-pair"
# On a node of an EFA group that passed its own steps: since when it waits for a fresh partner.
PAIR_SINCE_ANNOTATION = "trainstack.dev/health-pair-since"
PAIR_PARTNER_ANNOTATION = "trainstack.dev/pair-partner"
PAIR_RANK_ANNOTATION = "trainstack.dev/pair-rank"
# A node waits this long for another fresh node of its group, then is let in on its own steps.
PAIR_WAIT_SECONDS = 180
PAIR_PORT = 29500
PAIR_DEADLINE_SECONDS = 900
# The floor a burn-in was given and where it came from, on its pod: the verdict names both.
FLOOR_ANNOTATION = "trainstack.dev/floor-gbps"
FLOOR_SOURCE_ANNOTATION = "trainstack.dev/floor-source"
# The steps whose termination messages carry a verdict, in the pod's order; `dcgm` itself only runs
# NVIDIA's program and leaves its JSON for `dcgm-verdict`.
JUDGED_STEPS = ("checks", "dcgm-verdict", "nccl")
RESULTS = "/results"
CALIBRATION_NODES = 3  # a group's floor is its own once this many nodes passed
CALIBRATION_KEPT = 16
# A node whose device plugin has not advertised its GPUs this long after it registered cannot train.
DEVICE_WAIT_SECONDS = 600
# The EKS node monitoring agent's condition and its reasons for a fatal Xid (NvidiaXID<code>Error).
HARDWARE_CONDITION = "AcceleratedHardwareReady"
_AGENT_XID = re.compile(r"NvidiaXID(\d+)Error")
EVENT_COMPONENT = "trainstack-health-gate"

log = logging.getLogger("health_gate")


@dataclass(frozen=True)
class Group:
    """What the stack says of one GPU group (components/health_gate.py writes it)."""

    gpus: int
    efa: int
    nvlink: bool
    dcgm_level: int
    floor_fraction: float
    published_bus_gbps: float | None
    nodes: int  # the most the group holds: the breaker's base
    mode: str  # burnIn | passive
    deadline_seconds: int  # a burn-in not finished by then failed
    efa_env: dict[str, str] = field(default_factory=dict)  # what a job's pods on the group set for EFA

    @classmethod
    def read(cls, data: dict) -> Group:
        return cls(
            data["gpus"],
            data["efa"],
            data["nvlink"],
            data["dcgmLevel"],
            data["floorFraction"],
            data.get("publishedBusGbps"),
            data["nodes"],
            data["mode"],
            data["deadlineSeconds"],
            data.get("efaEnv") or {},
        )

    @property
    def pairs(self) -> bool:
        """Two fresh nodes of an EFA group also run an all-reduce between them, over EFA."""
        return self.efa > 0 and self.nodes >= 2


@dataclass(frozen=True)
class Verdict:
    passed: bool
    severity: str  # MONITOR for a pass
    summary: str
    checks: list[dict] = field(default_factory=list)
    bus_gbps: float | None = None


def floor(figures: list[float], group: Group) -> tuple[float | None, str]:
    """The all-reduce floor for a group's next node and where it comes from."""
    if len(figures) >= CALIBRATION_NODES:
        return round(
            group.floor_fraction * statistics.median(figures), 2
        ), f"calibrated on {len(figures)} nodes"
    if group.published_bus_gbps:
        return round(group.floor_fraction * group.published_bus_gbps, 2), "published"
    return None, "none yet"


def calibrated(kept: list[float], new: float) -> list[float]:
    return [*kept, new][-CALIBRATION_KEPT:]


def may_remediate(failing: int, group: Group, share: float) -> bool:
    """Whether one more failing node may be replaced, `failing` counting it (at least one node)."""
    return failing <= max(1, int(group.nodes * share))


def taints(node: dict) -> list[dict]:
    return list((node.get("spec") or {}).get("taints") or [])


def has_taint(node: dict, key: str) -> bool:
    return any(t.get("key") == key for t in taints(node))


def labels(node: dict) -> dict[str, str]:
    return node["metadata"].get("labels") or {}


def allocatable(node: dict, resource: str) -> int:
    value = ((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")
    return int(value) if str(value).isdigit() else 0


def age_seconds(node: dict, now: datetime) -> float:
    created = datetime.fromisoformat(node["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return (now - created).total_seconds()


def uses_gpus(pod: dict) -> bool:
    """A pod still holding GPUs of its node (not a finished one, not a burn-in)."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/name") == POD_NAME:
        return False
    containers = [*(pod["spec"].get("containers") or []), *(pod["spec"].get("initContainers") or [])]
    return any(GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {}) for c in containers)


def pod_name(node: str) -> str:
    """One burn-in pod per node; a pod's name is a DNS subdomain (253), a label value 63."""
    return f"{POD_NAME}-{node}"[:253]


def node_key(node: str) -> str:
    return node if len(node) <= 63 else hashlib.sha256(node.encode()).hexdigest()[:63]


def with_devices(group: Group) -> dict:
    """What a step that drives the node's GPUs and EFA devices asks for: all of them."""
    devices = {GPU_RESOURCE: str(group.gpus), **({EFA_RESOURCE: str(group.efa)} if group.efa else {})}
    return {"requests": {"cpu": "1", "memory": "4Gi", **devices}, "limits": {"memory": "64Gi", **devices}}


def bound_pod(
    name: str, node: str, step: str, namespace: str, annotations: dict[str, str], deadline: int, spec: dict
) -> dict:
    """A burn-in pod bound to its node: through the startup and GPU taints, and kept there to be read
    after the failed taint; `spec` its volumes and containers."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": POD_NAME,
                "app.kubernetes.io/part-of": "trainstack",
                POD_NODE_LABEL: node_key(node),
                POD_STEP_LABEL: step,
            },
            "annotations": annotations,
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": deadline,
            "tolerations": [STARTUP_TOLERATION, GPU_TOLERATION, FAILED_TOLERATION],
            "automountServiceAccountToken": False,
            **spec,
        },
    }


def floor_annotations(floor_gbps: float | None, source: str) -> dict[str, str]:
    return {FLOOR_ANNOTATION: str(floor_gbps or ""), FLOOR_SOURCE_ANNOTATION: source}


def given_floor(pod: dict) -> tuple[float | None, str]:
    """The floor a burn-in pod was given and where it came from."""
    given = pod["metadata"].get("annotations") or {}
    figure = given.get(FLOOR_ANNOTATION)
    return (float(figure) if figure else None), given.get(FLOOR_SOURCE_ANNOTATION, "")


def burn_in_pod(
    node: str,
    group: Group,
    image: str,
    dcgm_image: str,
    namespace: str,
    floor_gbps: float | None,
    source: str,
) -> dict:
    """The steps as init containers, in order: the kubelet starts each only after the one before
    exited 0, so a fatal step ends the burn-in there."""
    small = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    devices = with_devices(group)
    results = [{"name": "results", "mountPath": RESULTS}]
    checks = ["python", "-m", "trainer.burn_in", "checks", "--gpus", str(group.gpus)]
    checks += ["--efa", str(group.efa)] if group.efa else []
    checks += ["--nvlink"] if group.nvlink else []
    nccl = ["python", "-m", "trainer.burn_in", "nccl", "--gpus", str(group.gpus)]
    nccl += ["--floor", str(floor_gbps)] if floor_gbps else []
    dcgm_verdict = ["python", "-m", "trainer.burn_in", "dcgm-verdict", "--level", str(group.dcgm_level)]
    dcgm_verdict += ["--file", f"{RESULTS}/dcgm.json"]
    # The node's host engine (the node monitoring agent's dcgm-server) may start after the node is
    # let into the burn-in: asked for up to five minutes before the diagnostics run.
    dcgm = (
        'for i in $(seq 60); do dcgmi discovery --host "$HOST_IP" -l >/dev/null 2>&1 && break; sleep 5; done; '
        f'dcgmi diag -r {group.dcgm_level} -j --host "$HOST_IP" > {RESULTS}/dcgm.json; exit 0'
    )
    spec = {
        "volumes": [{"name": "results", "emptyDir": {}}],
        "initContainers": [
            # The kernel's log (/dev/kmsg) is the node's only to a privileged container.
            {
                "name": "checks",
                "image": image,
                "command": checks,
                "securityContext": {"privileged": True},
                "resources": devices,
            },
            {
                "name": "dcgm",
                "image": dcgm_image,
                "command": ["/bin/sh", "-c", dcgm],
                "env": [{"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
                "volumeMounts": results,
                "resources": small,
            },
            {
                "name": "dcgm-verdict",
                "image": image,
                "command": dcgm_verdict,
                "volumeMounts": results,
                "resources": small,
            },
            {"name": "nccl", "image": image, "command": nccl, "resources": devices},
        ],
        "containers": [{"name": "done", "image": image, "command": ["true"], "resources": small}],
    }
    annotations = floor_annotations(floor_gbps, source)
    return bound_pod(pod_name(node), node, "node", namespace, annotations, group.deadline_seconds, spec)


def pair_pod_name(node: str) -> str:
    return f"{PAIR_NAME}-{node}"[:253]


def pair_pod(
    node: str,
    partner: str,
    rank: int,
    group: Group,
    image: str,
    namespace: str,
    floor_gbps: float | None,
    source: str,
    master: str | None,
) -> dict:
    """One of the two pods of a two-node all-reduce over EFA: trainer.preflight under torchrun, rank 0
    on `node` serving the rendezvous at its own address, rank 1 on the other node joining it
    (`master`, rank 0's pod address). Rank 0 writes the report the gate judges."""
    command = ["torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", "--node-rank", str(rank)]
    command += ["--master-addr", master or "$(POD_IP)", "--master-port", str(PAIR_PORT)]
    command += [
        "-m",
        "trainer.preflight",
        "--gpus-per-node",
        str(group.gpus),
        "--efa-per-node",
        str(group.efa),
    ]
    command += ["--size-mb", "2048", "--termination-json"]
    command += ["--min-bus-bandwidth", str(floor_gbps)] if floor_gbps else []
    env = [{"name": k, "value": v} for k, v in sorted(group.efa_env.items())]
    env += [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]
    spec = {
        "containers": [
            {
                "name": "pair",
                "image": image,
                "command": command,
                "env": env,
                "ports": [{"containerPort": PAIR_PORT, "name": "rendezvous"}],
                "resources": with_devices(group),
            }
        ]
    }
    annotations = {
        **floor_annotations(floor_gbps, source),
        PAIR_PARTNER_ANNOTATION: partner,
        PAIR_RANK_ANNOTATION: str(rank),
    }
    return bound_pod(pair_pod_name(node), node, "pair", namespace, annotations, PAIR_DEADLINE_SECONDS, spec)


def pair_verdict(first: dict, second: dict | None) -> Verdict | None:
    """Two nodes' all-reduce, once both pods ended (None while either runs): rank 0's report says
    what was measured; either pod failing fails the pair, which cannot say which node is at fault."""
    phases = [(p.get("status") or {}).get("phase") for p in (first, second) if p is not None]
    if "Failed" not in phases and phases != ["Succeeded", "Succeeded"]:
        return None
    statuses = (first.get("status") or {}).get("containerStatuses") or []
    ended = statuses[0]["state"].get("terminated") if statuses else None
    try:
        report = json.loads((ended or {}).get("message") or "")
    except ValueError:
        report = {}
    bus = report.get("bus_bandwidth_gbps")
    if phases == ["Succeeded", "Succeeded"] and report.get("ok"):
        summary = f"two-node all-reduce {bus} GB/s over {report.get('network')}"
        return Verdict(
            True, "MONITOR", summary, [{"name": "pair", "verdict": "pass", "detail": summary}], bus
        )
    why = "; ".join(report.get("problems") or []) or ", ".join(
        f"{p['metadata']['name']} {(p.get('status') or {}).get('phase')} {(p.get('status') or {}).get('reason', '')}".strip()
        for p in (first, second)
        if p is not None
    )
    summary = f"two-node all-reduce: {why}"
    return Verdict(False, "RESET", summary, [{"name": "pair", "verdict": "fail", "detail": summary}], bus)


def _terminated(pod: dict) -> dict[str, dict]:
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    return {s["name"]: s["state"]["terminated"] for s in statuses if "terminated" in (s.get("state") or {})}


def _checks_of(step: str, message: str) -> list[dict]:
    """A step's checks from its termination message (trainer.burn_in writes them as a list)."""
    try:
        found = json.loads(message)
    except ValueError:
        found = None
    if isinstance(found, list):
        return found
    return [{"name": step, "verdict": "fail", "severity": "REBOOT", "detail": message[:500] or "no result"}]


def verdict_of(pod: dict) -> Verdict | None:
    """The burn-in's verdict once its pod ended; None while it runs."""
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return None
    ended = _terminated(pod)
    checks: list[dict] = []
    for step in JUDGED_STEPS:
        if step in ended:
            checks += _checks_of(step, ended[step].get("message") or "")
    bus = next((c.get("figures", {}).get("busGbps") for c in checks if c["name"] == "nccl"), None)
    bad = [c for c in checks if c["verdict"] == "fail"]
    if phase == "Succeeded" and not bad:
        warned = [f"{c['name']}: {c['detail']}" for c in checks if c["verdict"] == "warn"]
        summary = "passed" + (f" with warnings ({'; '.join(warned)})" if warned else "")
        return Verdict(True, "MONITOR", summary, checks, bus)
    if (
        not bad
    ):  # ended without a judged failure: the deadline, an image that never pulled, a step that crashed
        reason = (pod.get("status") or {}).get("reason") or "a step ended without a result"
        running = [
            s
            for s in ("checks", "dcgm", "dcgm-verdict", "nccl")
            if s not in ended or ended[s].get("exitCode")
        ]
        bad = [
            {
                "name": running[0] if running else "burn-in",
                "verdict": "fail",
                "severity": "REBOOT",
                "detail": f"the burn-in did not finish ({reason})",
            }
        ]
        checks += bad
    severity = worst([c.get("severity", "RESET") for c in bad])
    summary = "; ".join(f"{c['name']}: {c['detail']}" for c in bad)
    return Verdict(False, severity, summary, checks, bus)


def hardware_fault(node: dict) -> tuple[str, str] | None:
    """(severity, why) where the node monitoring agent reports the GPUs faulty; None otherwise."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == HARDWARE_CONDITION and c.get("status") == "False":
            why = f"{c.get('reason', '')}: {c.get('message', '')}".strip(": ")
            codes = [int(x) for x in _AGENT_XID.findall(c.get("reason", "") + " " + c.get("message", ""))]
            severities = [XID_SEVERITY.get(code, "RESET") for code in codes]
            # The agent marks a node not ready only for what it treats as fatal: at least a reset.
            return worst([*severities, "RESET"]), why
    return None


def result_annotation(verdict: Verdict, floor_gbps: float | None, source: str, now: datetime) -> str:
    return json.dumps(
        {
            "verdict": "passed" if verdict.passed else "failed",
            "severity": verdict.severity,
            "summary": verdict.summary[:1500],
            "checks": {c["name"]: c["verdict"] for c in verdict.checks},
            "busGbps": verdict.bus_gbps,
            "floorGbps": floor_gbps,
            "floorSource": source,
            "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
        separators=(",", ":"),
    )


def passed_patch(node: dict, annotation: str) -> list[dict]:
    kept = [t for t in taints(node) if t.get("key") != STARTUP_TAINT_KEY]
    return [
        {"op": "add", "path": "/spec/taints", "value": kept},
        {"op": "add", "path": "/metadata/labels", "value": {**labels(node), HEALTH_LABEL: "passed"}},
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {**(node["metadata"].get("annotations") or {}), RESULT_ANNOTATION: annotation},
        },
    ]


def failed_patch(node: dict, severity: str, annotation: str, remedy: str) -> list[dict]:
    """The NoExecute taint in the startup taint's place: pods leave the node. Its key is one of the
    autoscaler's status taints (cluster-autoscaler utils/taints/taints.go StatusTaintPrefix): the
    node counts as there but filtered out of scale-ups, and the taint is dropped from a template
    made of it (SanitizeTaints), so the group still scales up for the pods it cannot take."""
    kept = [t for t in taints(node) if t.get("key") not in (STARTUP_TAINT_KEY, FAILED_TAINT_KEY)]
    taint = {"key": FAILED_TAINT_KEY, "value": severity, "effect": "NoExecute"}
    annotations = {**(node["metadata"].get("annotations") or {}), RESULT_ANNOTATION: annotation}
    return [
        {"op": "add", "path": "/spec/taints", "value": [*kept, taint]},
        {"op": "add", "path": "/metadata/labels", "value": {**labels(node), HEALTH_LABEL: "failed"}},
        {"op": "add", "path": "/metadata/annotations", "value": {**annotations, REMEDY_ANNOTATION: remedy}},
    ]


def recovered_patch(node: dict, now: datetime) -> list[dict]:
    """A node the monitoring agent failed and node repair rebooted, healthy again: let back in."""
    kept = [t for t in taints(node) if t.get("key") != FAILED_TAINT_KEY]
    note = json.dumps(
        {
            "verdict": "passed",
            "summary": "the node monitoring agent reports its GPUs healthy again (node repair rebooted it)",
            "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )
    annotations = {
        k: v for k, v in (node["metadata"].get("annotations") or {}).items() if k != REMEDY_ANNOTATION
    }
    return [
        {"op": "add", "path": "/spec/taints", "value": kept},
        {"op": "add", "path": "/metadata/labels", "value": {**labels(node), HEALTH_LABEL: "passed"}},
        {"op": "add", "path": "/metadata/annotations", "value": {**annotations, RESULT_ANNOTATION: note}},
    ]


class Instances:
    """A failed node's instance, replaced by its own Auto Scaling group."""

    def __init__(self, session=None):
        import boto3

        self.autoscaling = (session or boto3.session.Session()).client("autoscaling")

    def replace(self, instance: str) -> str:
        """Marks the instance unhealthy; its group terminates it and launches another. Answers the
        group's name, or says it is in none."""
        found = self.autoscaling.describe_auto_scaling_instances(InstanceIds=[instance])[
            "AutoScalingInstances"
        ]
        if not found:
            return f"{instance} is in no Auto Scaling group: left to its owner"
        self.autoscaling.set_instance_health(
            InstanceId=instance, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
        )
        return f"its Auto Scaling group {found[0]['AutoScalingGroupName']} replaces {instance}"


def instance_id(node: dict) -> str | None:
    provider_id = (node.get("spec") or {}).get("providerID") or ""
    return provider_id.rsplit("/", 1)[-1] if provider_id.startswith("aws://") else None


class Gate:
    def __init__(
        self,
        kube: kube_api.Kubernetes,
        instances: Instances | None,
        groups: dict[str, Group],
        namespace: str,
        image: str,
        dcgm_image: str,
        floors: str,
        max_share: float,
    ):
        self.kube, self.instances, self.groups = kube, instances, groups
        self.namespace, self.image, self.dcgm_image, self.floors = namespace, image, dcgm_image, floors
        self.max_share = max_share

    # -- the floors' ConfigMap, which only this controller writes -------------------------------
    def _floors_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps" + (f"/{name}" if name else "")

    def _floors(self) -> tuple[dict | None, dict[str, list[float]]]:
        """The ConfigMap as it is (None before the first figure) and its figures by group."""
        found = self.kube.get(self._floors_path(self.floors))
        return found, {g: json.loads(v) for g, v in ((found or {}).get("data") or {}).items()}

    def figures(self) -> dict[str, list[float]]:
        return self._floors()[1]

    def record(self, group: str, figure: float) -> None:
        found, data = self._floors()
        data[group] = calibrated(data.get(group, []), figure)
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.floors, "namespace": self.namespace},
            "data": {g: json.dumps(v) for g, v in data.items()},
        }
        if found is None:
            self.kube.call("POST", self._floors_path(), body)
        else:
            body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
            self.kube.call("PUT", self._floors_path(self.floors), body)

    # -- one round --------------------------------------------------------------------------------
    def round(self, selector: str, now: datetime) -> list[str]:
        nodes = self.kube.nodes(selector)
        said = self.failed_round(nodes, now)
        for node in nodes:
            try:
                said += self.node_round(node, nodes, now)
            except Exception as err:  # one node's trouble (a changed node, AWS) is not the others'
                said.append(f"node {node['metadata']['name']}: round failed: {err}")
        for group_name, group in self.groups.items():
            if group.mode == "burnIn" and group.pairs:
                said += self.pair_round(group_name, group, nodes, now)
        return said

    def node_round(self, node: dict, nodes: list[dict], now: datetime) -> list[str]:
        said: list[str] = []
        name = node["metadata"]["name"]
        group_name = labels(node).get(NODE_GROUP_LABEL, "")
        group = self.groups.get(group_name)
        if group is None or has_taint(node, FAILED_TAINT_KEY):
            return said
        fault = hardware_fault(node)
        if fault is not None:
            said.append(self.fail(node, nodes, group_name, group, *fault, now, replace=False))
            return said
        if group.mode != "burnIn" or not has_taint(node, STARTUP_TAINT_KEY):
            return said
        if PAIR_SINCE_ANNOTATION in (node["metadata"].get("annotations") or {}):
            return said  # passed its own steps: pair_round has it
        pod = self._pod(pod_name(name))
        if pod is None:
            said.append(self.start(node, group_name, group, self.figures().get(group_name, []), now))
            return said
        verdict = verdict_of(pod)
        if verdict is None:
            return said
        annotation = result_annotation(verdict, *given_floor(pod), now)
        if verdict.passed and group.pairs:
            said.append(self.hold(node, group_name, verdict, annotation, now))
        elif verdict.passed:
            self.kube.patch_node(node, passed_patch(node, annotation))
            if verdict.bus_gbps:
                self.record(group_name, verdict.bus_gbps)
            self._delete(pod_name(name))
            self.kube.node_event(
                node, "TrainstackHealthPassed", f"burn-in {verdict.summary}", EVENT_COMPONENT, "Normal"
            )
            said.append(f"node {name} passed: {verdict.summary}")
        else:
            said.append(
                self.fail(node, nodes, group_name, group, verdict.severity, verdict.summary, now, annotation)
            )
        return said

    # -- two fresh nodes of an EFA group --------------------------------------------------------
    def _pods_path(self, name: str = "") -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods" + (f"/{urllib.parse.quote(name)}" if name else "")

    def _pod(self, name: str) -> dict | None:
        return self.kube.get(self._pods_path(name))

    def _create(self, pod: dict) -> None:
        self.kube.call("POST", self._pods_path(), pod)

    def _delete(self, name: str) -> None:
        self.kube.call("DELETE", self._pods_path(name))

    def hold(self, node: dict, group_name: str, verdict: Verdict, annotation: str, now: datetime) -> str:
        """A node of an EFA group that passed its own steps waits, still tainted, for a fresh partner."""
        name = node["metadata"]["name"]
        if verdict.bus_gbps:
            self.record(group_name, verdict.bus_gbps)
        annotations = {
            **(node["metadata"].get("annotations") or {}),
            RESULT_ANNOTATION: annotation,
            PAIR_SINCE_ANNOTATION: now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        self.kube.patch_node(node, [{"op": "add", "path": "/metadata/annotations", "value": annotations}])
        self._delete(pod_name(name))
        return f"node {name} passed its own steps; waiting up to {PAIR_WAIT_SECONDS} s for a fresh partner"

    def pair_round(self, group_name: str, group: Group, nodes: list[dict], now: datetime) -> list[str]:
        said = []
        held = [
            n
            for n in nodes
            if labels(n).get(NODE_GROUP_LABEL) == group_name
            and has_taint(n, STARTUP_TAINT_KEY)
            and not has_taint(n, FAILED_TAINT_KEY)
            and PAIR_SINCE_ANNOTATION in (n["metadata"].get("annotations") or {})
        ]
        by_name = {n["metadata"]["name"]: n for n in held}
        busy: set[str] = set()
        for n in held:
            first = self._pod(pair_pod_name(n["metadata"]["name"]))
            if first is None:
                continue
            partner = first["metadata"]["annotations"][PAIR_PARTNER_ANNOTATION]
            if (first["metadata"].get("annotations") or {}).get(PAIR_RANK_ANNOTATION) != "0":
                # Rank 1: its partner's rank 0 drives the pair, while that partner still waits.
                if partner in by_name:
                    busy.add(n["metadata"]["name"])
                else:  # the partner failed, left or was let in: this one may pair again
                    self._delete(first["metadata"]["name"])
                continue
            busy.add(n["metadata"]["name"])
            if partner not in by_name:  # the partner failed or left: the pair ends, a new one may form
                self._delete(first["metadata"]["name"])
                continue
            busy.add(partner)
            said += self.run_pair(n, by_name[partner], first, group_name, group, nodes, now)
        waiting = sorted(
            (n for n in held if n["metadata"]["name"] not in busy),
            key=lambda n: n["metadata"]["annotations"][PAIR_SINCE_ANNOTATION],
        )
        while len(waiting) >= 2:
            first, second = waiting.pop(0), waiting.pop(0)
            floor_gbps, source = floor(self.figures().get(f"{group_name}.pair", []), group)
            pod = pair_pod(
                first["metadata"]["name"], second["metadata"]["name"], 0, group, self.image, self.namespace,
                floor_gbps, source, None,
            )  # fmt: skip
            self._create(pod)
            said.append(
                f"nodes {first['metadata']['name']} and {second['metadata']['name']}: two-node all-reduce started "
                f"(floor {floor_gbps or 'none'}: {source})"
            )
        for n in waiting:
            since = datetime.fromisoformat(
                n["metadata"]["annotations"][PAIR_SINCE_ANNOTATION].replace("Z", "+00:00")
            )
            if (now - since).total_seconds() >= PAIR_WAIT_SECONDS:
                note = f"passed its own steps; no fresh partner joined within {PAIR_WAIT_SECONDS} s for the two-node test"
                result = json.dumps(
                    {"verdict": "passed", "summary": note, "at": now.strftime("%Y-%m-%dT%H:%M:%SZ")}
                )
                self.kube.patch_node(n, passed_patch(n, result))
                said.append(f"node {n['metadata']['name']} {note}")
        return said

    def run_pair(
        self,
        node: dict,
        partner: dict,
        first: dict,
        group_name: str,
        group: Group,
        nodes: list[dict],
        now: datetime,
    ) -> list[str]:
        """Rank 1 once rank 0 has its address; the verdict, on both nodes, once they ended."""
        second = self._pod(pair_pod_name(partner["metadata"]["name"]))
        address = (first.get("status") or {}).get("podIP")
        if (
            second is None
            and address
            and (first.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ):
            pod = pair_pod(
                partner["metadata"]["name"], node["metadata"]["name"], 1, group, self.image, self.namespace,
                *given_floor(first), address,
            )  # fmt: skip
            self._create(pod)
            return []
        verdict = pair_verdict(first, second)
        if verdict is None:
            return []
        if second is None:  # rank 0 ended before its partner ran: it alone failed
            _, source = given_floor(first)
            annotation = result_annotation(verdict, None, source, now)
            return [
                self.fail(node, nodes, group_name, group, verdict.severity, verdict.summary, now, annotation)
            ]
        annotation = result_annotation(verdict, *given_floor(first), now)
        said = []
        if verdict.passed:
            if verdict.bus_gbps:
                self.record(f"{group_name}.pair", verdict.bus_gbps)
            for n, pod in ((node, first), (partner, second)):
                self.kube.patch_node(n, passed_patch(n, annotation))
                self._delete(pod["metadata"]["name"])
                said.append(f"node {n['metadata']['name']} passed: {verdict.summary}")
        else:
            for n in (node, partner):
                said.append(
                    self.fail(n, nodes, group_name, group, verdict.severity, verdict.summary, now, annotation)
                )
        return said

    def start(self, node: dict, group_name: str, group: Group, figures: list[float], now: datetime) -> str:
        name = node["metadata"]["name"]
        busy = [p["metadata"]["name"] for p in self.kube.pods_on(name) if uses_gpus(p)]
        if busy:
            # A node that trained before its group was gated (EKS puts a node group's new taint on
            # its running nodes too): let in as it is, never emptied for a burn-in.
            annotation = json.dumps(
                {
                    "verdict": "passed",
                    "summary": f"in service before the gate ({', '.join(busy)}): not burnt in",
                }
            )
            self.kube.patch_node(node, passed_patch(node, annotation))
            return f"node {name}: already training ({', '.join(busy)}), let in without a burn-in"
        gpus = allocatable(node, GPU_RESOURCE)
        efa = allocatable(node, EFA_RESOURCE)
        if gpus < group.gpus or efa < group.efa:
            if age_seconds(node, now) < DEVICE_WAIT_SECONDS:
                return f"node {name}: waiting for its device plugins ({gpus}/{group.gpus} GPUs, {efa}/{group.efa} EFA)"
            why = (
                f"inventory: the device plugins advertise {gpus} of {group.gpus} GPUs and {efa} of {group.efa} "
                f"EFA devices {DEVICE_WAIT_SECONDS} s after the node registered"
            )
            return self.fail(
                node,
                self.kube.nodes(f"{NODE_GROUP_LABEL}={group_name}"),
                group_name,
                group,
                "REBOOT",
                why,
                now,
            )
        floor_gbps, source = floor(figures, group)
        pod = burn_in_pod(name, group, self.image, self.dcgm_image, self.namespace, floor_gbps, source)
        self._create(pod)
        return f"node {name}: burn-in started (DCGM level {group.dcgm_level}, all-reduce floor {floor_gbps or 'none'}: {source})"

    def fail(
        self,
        node: dict,
        nodes: list[dict],
        group_name: str,
        group: Group,
        severity: str,
        why: str,
        now: datetime,
        annotation: str | None = None,
        replace: bool = True,
    ) -> str:
        name = node["metadata"]["name"]
        annotation = annotation or json.dumps(
            {
                "verdict": "failed",
                "severity": severity,
                "summary": why[:1500],
                "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        )
        remedy = "held" if replace else "repair"
        self.kube.patch_node(node, failed_patch(node, severity, annotation, remedy))
        # As the API server now has it: the breaker's count in this round sees it.
        node["metadata"]["labels"] = {**labels(node), HEALTH_LABEL: "failed"}
        node["metadata"]["annotations"] = {
            **(node["metadata"].get("annotations") or {}),
            REMEDY_ANNOTATION: remedy,
        }
        node["metadata"]["resourceVersion"] = None  # patched: read again before the next patch
        outcome = (
            self.remedy(node, nodes, group_name, group)
            if replace
            else "EKS node repair replaces or reboots it (gpuNodeGroups[].autoRepair); let back in if the agent "
            "then reports its GPUs healthy"
        )
        message = f"unhealthy ({severity}): {why}; tainted {FAILED_TAINT_KEY}:NoExecute; {outcome}"
        self.kube.node_event(node, "TrainstackHealthFailed", message, EVENT_COMPONENT)
        return f"node {name} {message}"

    def remedy(self, node: dict, nodes: list[dict], group_name: str, group: Group) -> str:
        """Has the failed node's group replace it, within the breaker: the group's failing nodes
        (this one, those held or being replaced, those node repair has) may be at most its share."""
        failing = sum(
            labels(n).get(HEALTH_LABEL) == "failed" and labels(n).get(NODE_GROUP_LABEL) == group_name
            for n in nodes
        )
        failing = max(failing, 1)
        if not may_remediate(failing, group, self.max_share):
            return (
                f"not replaced: {failing} of the group's {group.nodes} nodes are failing, past the breaker "
                f"({max(1, int(group.nodes * self.max_share))}); a fault this wide is the AMI's, the driver's or "
                "the network's: look at the nodes' results; it is replaced once fewer are failing"
            )
        instance = instance_id(node)
        if not instance or self.instances is None:
            return "it names no EC2 instance: left to its owner"
        outcome = self.instances.replace(instance)
        fresh = self.kube.get(f"/api/v1/nodes/{urllib.parse.quote(node['metadata']['name'])}") or node
        annotations = {**(fresh["metadata"].get("annotations") or {}), REMEDY_ANNOTATION: "asked"}
        self.kube.patch_node(fresh, [{"op": "add", "path": "/metadata/annotations", "value": annotations}])
        return outcome

    def failed_round(self, nodes: list[dict], now: datetime) -> list[str]:
        """Failed nodes again: one the breaker held is replaced once fewer of its group are failing
        (and one whose replacement call failed, asked again); one node repair rebooted whose GPUs the
        agent finds healthy again is let back in."""
        said = []
        for node in nodes:
            group_name = labels(node).get(NODE_GROUP_LABEL, "")
            group = self.groups.get(group_name)
            remedy = (node["metadata"].get("annotations") or {}).get(REMEDY_ANNOTATION)
            if group is None or not has_taint(node, FAILED_TAINT_KEY):
                continue
            name = node["metadata"]["name"]
            if remedy == "repair" and hardware_fault(node) is None:
                self.kube.patch_node(node, recovered_patch(node, now))
                node["metadata"]["labels"] = {**labels(node), HEALTH_LABEL: "passed"}
                self.kube.node_event(
                    node, "TrainstackHealthRecovered", "GPUs healthy again", EVENT_COMPONENT, "Normal"
                )
                said.append(
                    f"node {name} let back in: the node monitoring agent reports its GPUs healthy again"
                )
            elif remedy == "held":
                outcome = self.remedy(node, nodes, group_name, group)
                if not outcome.startswith("not replaced"):
                    self.kube.node_event(
                        node, "TrainstackHealthFailed", f"replaced now: {outcome}", EVENT_COMPONENT
                    )
                    said.append(f"node {name}: {outcome}")
        return said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.health_gate", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", required=True, help="label selector of the stack's GPU nodes")
    parser.add_argument("--namespace", required=True, help="where burn-in pods and the floors live")
    parser.add_argument("--groups", required=True, help="JSON: each GPU group's health settings")
    parser.add_argument("--image", required=True, help="the training image (the burn-in's steps)")
    parser.add_argument("--dcgm-image", required=True)
    parser.add_argument("--floors", default="trainstack-health-floors", help="the calibration ConfigMap")
    parser.add_argument("--max-share", type=float, default=0.2, help="most of a group replaced at once")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between rounds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    groups = {name: Group.read(data) for name, data in json.loads(args.groups).items()}
    gate = Gate(
        kube_api.Kubernetes(),
        Instances(),
        groups,
        args.namespace,
        args.image,
        args.dcgm_image,
        args.floors,
        args.max_share,
    )
    said: set[str] = set()
    while True:
        try:
            for line in gate.round(args.nodes, datetime.now(UTC)):
                if line not in said:
                    log.info(line)
                    said.add(line)
            if len(said) > 10000:  # said once each, for a while: not a record of every round
                said.clear()
        except Exception as err:  # the next round reads everything again
            log.warning("round failed: %s", err)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
