"""Nodes without machines: kwok (sigs.k8s.io/kwok) gives each fake node its conditions and lease and
each pod bound to one its lifecycle (Running; a Job's pods complete), with the stages it ships
(kustomize/stage/{node,pod}/fast). No container runs.

A node is shaped like one of a plan's node groups (offline.nodes.Node): its labels and taints,
allocatable CPU and memory from the instance facts the plan uses (nodeadm's kube-reserved), and 110
pods. Its GPUs and EFA interfaces are hardware a device plugin must advertise: `DevicePlugins`
puts `nvidia.com/gpu` or `vpc.amazonaws.com/efa` on the node only while a pod of that plugin's
DaemonSet runs there, as the kubelet's device manager does when the plugin registers."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import yaml
from kubernetes import client

from conventions import EFA_RESOURCE, GPU_RESOURCE
from offline.nodes import Node
from support.cluster.binaries import binary, module_dir
from support.cluster.processes import Processes

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
HARDWARE_ANNOTATION = "trainstack.test/hardware"  # what the node's devices are, before any plugin
MAX_PODS = 110
STAGES = (
    "node/fast/node-initialize.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)
# The harness's own stages (files beside this one), after kwok's.
OWN_STAGES = (
    "pod-exit-code.yaml",
    "pod-keeps-running.yaml",
    "pod-burn-in-running.yaml",
    "pod-burn-in-result.yaml",
)
# The health gate's burn-in pods (workload/trainer/health_gate.py) run their init containers one after
# another, as a kubelet does (pod-burn-in-running.yaml, pod-burn-in-result.yaml): kwok's pod-ready,
# which ends every init container at once, leaves them be.
BURN_IN_POD = {
    "key": '.metadata.labels["app.kubernetes.io/name"]',
    "operator": "NotIn",
    "values": ["trainstack-burn-in"],
}
READY_STAGES = ("pod-ready", "pod-running-unready")
# The device plugins' image repositories (the last path element), and what each advertises.
PLUGIN_REPOSITORIES = {"k8s-device-plugin": GPU_RESOURCE, "aws-efa-k8s-device-plugin": EFA_RESOURCE}


def start_kwok(
    processes: Processes,
    kubeconfig: Path,
    probed: tuple[str, ...] = (),
    manages: str = "fake",
    name: str = "kwok",
):
    """kwok with its shipped fast stages; pods in the `probed` namespaces start Running but not Ready
    (`probed_stages`): their readiness is the harness's, from their own readiness probes. It manages
    the nodes annotated `KWOK_ANNOTATION: <manages>` (`node_object` makes them "fake"): a second kwok
    of another value is the kubelet of its nodes alone, which a test can freeze (SIGSTOP) as a
    kernel hang freezes a node's kubelet."""
    stages = module_dir("kwok", "sigs.k8s.io/kwok") / "kustomize" / "stage"
    configs = [stages / s for s in STAGES]
    configs += [Path(__file__).parent / s for s in OWN_STAGES]
    if probed:
        configs = probed_stages(configs, probed, processes.log_dir)
    configs = without_burn_ins(configs, processes.log_dir)
    return processes.start(
        name,
        [
            binary("kwok"),
            f"--kubeconfig={kubeconfig}",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={manages}",
            "--node-lease-duration-seconds=40",
            *[f"--config={c}" for c in configs],
        ],
    )


READY_STAGE = "pod/fast/pod-ready.yaml"
# kwok's pod-ready status as it sets it, and the same pod before its readiness probe passes.
READY_LINES = (
    (re.compile(r'status: "True"(\n\s*type: Ready\n)'), r'status: "False"\1'),
    (re.compile(r'status: "True"(\n\s*type: ContainersReady\n)'), r'status: "False"\1'),
    (re.compile(r"(name: \{\{ \.name \| Quote \}\}\n\s*)ready: true(\n\s*restartCount: 0\n\s*state:\n\s*running:)"),
     r"\1ready: false\2"),
)  # fmt: skip


def probed_stages(configs: list[Path], probed: tuple[str, ...], directory: Path) -> list[Path]:
    """kwok's shipped stages, but its pod-ready stage split: as shipped for pods outside `probed`, and
    for pods in those namespaces the same status (Running, the pod's address) with the pod not
    Ready, as a kubelet leaves a container whose readiness probe has not passed yet."""
    found = []
    for path in configs:
        if not str(path).endswith(READY_STAGE):
            found.append(path)
            continue
        stage = yaml.safe_load(path.read_text())
        outside = {"key": ".metadata.namespace", "operator": "NotIn", "values": list(probed)}
        inside = {"key": ".metadata.namespace", "operator": "In", "values": list(probed)}
        shipped = json.loads(json.dumps(stage))
        shipped["spec"]["selector"]["matchExpressions"].append(outside)
        waiting = json.loads(json.dumps(stage))
        waiting["metadata"]["name"] = "pod-running-unready"
        waiting["spec"]["selector"]["matchExpressions"].append(inside)
        template = waiting["spec"]["next"]["statusTemplate"]
        for ready, unready in READY_LINES:
            template, count = ready.subn(unready, template)
            assert count == 1, f"kwok's {READY_STAGE} no longer sets {ready.pattern!r} once"
        waiting["spec"]["next"]["statusTemplate"] = template
        for name, obj in (("pod-ready.yaml", shipped), ("pod-running-unready.yaml", waiting)):
            (directory / name).write_text(yaml.safe_dump(obj, sort_keys=False))
            found.append(directory / name)
    return found


def without_burn_ins(configs: list[Path], directory: Path) -> list[Path]:
    """The stages with kwok's pod-ready (and its unready split) not selecting burn-in pods."""
    found = []
    for path in configs:
        stage = yaml.safe_load(path.read_text())
        if stage["metadata"]["name"] not in READY_STAGES:
            found.append(path)
            continue
        stage["spec"]["selector"]["matchExpressions"].append(BURN_IN_POD)
        written = directory / f"{stage['metadata']['name']}-but-burn-ins.yaml"
        written.write_text(yaml.safe_dump(stage, sort_keys=False))
        found.append(written)
    return found


def _quantity(resource: str, amount: float) -> str:
    if resource == "cpu":
        return f"{round(amount)}m"
    if resource == "memory":
        return f"{round(amount * 1024)}Mi"
    return str(int(amount))


def node_object(node: Node, index: int, pod_cidr: str | None = None) -> dict:
    """A kwok node of `node`'s group; kwok gives its pods addresses from `pod_cidr` (its own default
    range when None)."""
    name = f"{node.group}-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {**node.labels, "kubernetes.io/hostname": name},
            "annotations": {KWOK_ANNOTATION: "fake", HARDWARE_ANNOTATION: json.dumps(node.extended)},
        },
        "spec": {"taints": [dict(t) for t in node.taints], **({"podCIDR": pod_cidr} if pod_cidr else {})},
    }


def node_status(node: Node) -> dict:
    amounts = {r: _quantity(r, a) for r, a in node.allocatable.items() if r in ("cpu", "memory")}
    amounts["pods"] = str(MAX_PODS)
    return {"status": {"capacity": dict(amounts), "allocatable": dict(amounts)}}


def create_nodes(
    core: client.CoreV1Api, node: Node, count: int, pod_cidrs: list[str] | None = None
) -> list[str]:
    """`count` kwok nodes of the group; their status carries what kubelet would report. It is sent
    with the node (the API server keeps a new node's status): kwok's node-initialize stage keeps the
    allocatable it finds, and puts its own 1k CPUs and 1Ti where it finds none."""
    names = []
    for i in range(count):
        body = node_object(node, i, pod_cidrs[i] if pod_cidrs else None) | node_status(node)
        core.create_node(body)
        names.append(body["metadata"]["name"])
    return names


def repository(image: str) -> str:
    """An image reference without its digest and tag."""
    name = image.split("@")[0]
    head, _, last = name.rpartition("/")
    return (f"{head}/" if head else "") + last.split(":")[0]


def plugin_resource(pod: dict) -> str | None:
    """The extended resource a running device-plugin pod advertises, by its image's repository."""
    if not any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or []):
        return None
    for c in pod["spec"]["containers"]:
        command = " ".join((c.get("command") or []) + (c.get("args") or []))
        if "mps-control-daemon" in command:  # the NVIDIA chart's MPS daemon shares the plugin's image
            continue
        resource = PLUGIN_REPOSITORIES.get(repository(c["image"]).rsplit("/", 1)[-1])
        if resource:
            return resource
    return None


class DevicePlugins:
    """Keeps each kwok node's extended resources in step with the device plugins running on it.
    It reads the lists as JSON: the client's typed objects (a date parse per timestamp) cost more
    CPU than everything else the harness does between scenarios."""

    def __init__(self, api: client.ApiClient, period: float = 0.5):
        self.core = client.CoreV1Api(api)
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="device-plugins", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _items(self, listed) -> list[dict]:
        return json.loads(listed.data)["items"]

    def sync(self) -> None:
        running: dict[str, set[str]] = {}
        pods = self.core.list_pod_for_all_namespaces(
            field_selector="status.phase=Running", _preload_content=False
        )
        for pod in self._items(pods):
            resource = plugin_resource(pod)
            node = pod["spec"].get("nodeName")
            if resource and node and not pod["metadata"].get("deletionTimestamp"):
                running.setdefault(node, set()).add(resource)
        for n in self._items(self.core.list_node(_preload_content=False)):
            name = n["metadata"]["name"]
            hardware = json.loads((n["metadata"].get("annotations") or {}).get(HARDWARE_ANNOTATION) or "{}")
            have = n.get("status", {}).get("allocatable") or {}
            want = {r: str(int(c)) for r, c in hardware.items() if r in running.get(name, set())}
            gone = [r for r in PLUGIN_RESOURCES if r in have and r not in want]
            if all(have.get(r) == v for r, v in want.items()) and not gone:
                continue
            # A strategic merge patch with null removes a resource the plugin no longer serves.
            amounts = {**want, **dict.fromkeys(gone)}
            self.core.patch_node_status(name, {"status": {"capacity": amounts, "allocatable": amounts}})

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self.sync()
            except Exception:  # the API server may be stopping; the next round retries
                continue


PLUGIN_RESOURCES = tuple(PLUGIN_REPOSITORIES.values())
