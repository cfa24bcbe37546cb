"""The nodes a plan's node groups would bring and the DaemonSets that would land on them.

A node group of the stack's own EKS cluster gives its node's labels and taints (EKS applies them
when the node registers); for a group the cluster autoscaler sizes, the autoscaler decides to scale
up from a template node it builds out of the Auto Scaling group's node-template tags (labels,
taints, extended resources) and the instance type, so both are built. A cluster the stack did not
create has nodes described by config (`gpuNodeGroups[].nodeSelector`, `existingCluster.systemNodes`).
Allocatable CPU and memory come from domain/catalog.py, less what kubelet reserves on EKS.

DaemonSets come from a real `helm template` of the charts in ../shared/charts with the values the
plan passes: the Helm releases of the device plugins, and the EKS add-ons the stack installs
(node monitoring agent with its DCGM server, FSx and Mountpoint CSI nodes) with their
configuration values. Each chart is rendered once per set of values.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from config import PROJECT_ROOT
from conventions import (
    AUTOSCALER_STARTUP_TAINT_PREFIX,
    EFA_LABEL,
    EFA_RESOURCE,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    HYPERPOD_HEALTHY_LABELS,
    NODE_GROUP_LABEL,
    NODE_TEMPLATE_TAG,
    SYSTEM_GROUP,
)
from domain.catalog import catalog_instance, is_sagemaker_type
from offline.engine import PlanRun, Registration
from offline.predicates import Amounts, pod_requests

NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
ASG_TAG = "aws:autoscaling/tag:Tag"
ADDON = "aws:eks/addon:Addon"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
EKS_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}

# Releases whose charts run DaemonSets on the nodes, and the extended resource each advertises.
DAEMONSET_RELEASES = ("nvidia-device-plugin", "aws-efa-k8s-device-plugin")
ADVERTISES = {"nvidia-device-plugin": GPU_RESOURCE, "aws-efa-k8s-device-plugin": EFA_RESOURCE}
# A device plugin the cluster already runs (reused, not installed), known by its image.
PLUGIN_IMAGES = {"k8s-device-plugin": GPU_RESOURCE, "aws-efa-k8s-device-plugin": EFA_RESOURCE}
# EKS add-ons that run DaemonSets, and the chart (in ../shared/charts) each add-on installs.
ADDON_CHARTS = {
    "eks-node-monitoring-agent": "eks-node-monitoring-agent-1.7.0",
    "aws-fsx-csi-driver": "aws-fsx-csi-driver-1.17.0",
    "aws-mountpoint-s3-csi-driver": "aws-mountpoint-s3-csi-driver-2.7.0",
}


@dataclass
class Node:
    """One node of a group, as the scheduler (or, for `template`, the autoscaler) sees it."""

    group: str
    instance_type: str | None
    max_nodes: int
    labels: dict[str, str]
    taints: list[dict]
    allocatable: Amounts  # cpu and memory; extended resources only once a device plugin runs
    extended: Amounts = field(default_factory=dict)  # what the hardware has for device plugins to advertise
    template: Node | None = None  # the autoscaler's template node, for an autoscaled group
    described: str = ""  # how the node was found, for the summary


def eks_allocatable(vcpus: int, memory_gib: float, max_pods: int = 110) -> Amounts:
    """Allocatable on an EKS AL2023 node: kubelet's kube-reserved CPU (6% of the first core, 1% of
    the second, 0.5% of the next two, 0.25% of the rest) and memory (255Mi + 11Mi per pod), and
    the 100Mi hard eviction threshold. max_pods: 110 assumed (the ENI-based figure is lower on
    small types, so this reserves at least as much as EKS)."""
    cores = [60, 10, 5, 5] + [2.5] * max(0, vcpus - 4)
    cpu = vcpus * 1000 - sum(cores[:vcpus])
    memory = memory_gib - (255 + 11 * max_pods + 100) / 1024
    return {"cpu": cpu, "memory": round(memory, 3)}


def well_known_labels(instance_type: str | None) -> dict[str, str]:
    labels = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    if instance_type:
        labels["node.kubernetes.io/instance-type"] = instance_type
    return labels


def _hardware(instance_type: str, efa: bool) -> Amounts:
    t = catalog_instance(instance_type)
    found: Amounts = {}
    if t is None:
        return found
    if t.has_nvidia_gpus:
        found[GPU_RESOURCE] = t.gpus
    if efa and t.efa_supported:
        found[EFA_RESOURCE] = t.max_efa_interfaces
    return found


def _instance_type(run: PlanRun, managed: Registration) -> str | None:
    types = managed.inputs.get("instanceTypes") or []
    if types:
        return types[0]
    prefix = f"{managed.inputs.get('nodeGroupName')}-"
    for lt in run.by_type(LAUNCH_TEMPLATE):
        if lt.inputs.get("namePrefix") == prefix:
            return lt.inputs.get("instanceType")
    return None


def _template_node(tags: dict[str, str], instance_type: str, real: Node) -> Node:
    """What the autoscaler's AWS provider builds from the Auto Scaling group's tags."""
    labels = well_known_labels(instance_type)
    taints, extended = [], {}
    for key, value in tags.items():
        rest = key.removeprefix(NODE_TEMPLATE_TAG + "/")
        if rest.startswith("label/"):
            labels[rest.removeprefix("label/")] = value
        elif rest.startswith("taint/"):
            taint_value, _, effect = value.rpartition(":")
            taints.append({"key": rest.removeprefix("taint/"), "value": taint_value, "effect": effect})
        elif rest.startswith("resources/"):
            extended[rest.removeprefix("resources/")] = int(value)
    return Node(real.group, instance_type, real.max_nodes, labels, taints, dict(real.allocatable), extended)


def eks_nodes(run: PlanRun) -> list[Node]:
    """The nodes of the stack's own managed node groups."""
    managed = {r.urn: r for r in run.by_type(MANAGED_NODE_GROUP)}
    tags: dict[str, dict[str, str]] = {}
    for t in run.by_type(ASG_TAG):
        tags.setdefault(t.inputs["autoscalingGroupName"], {})[t.inputs["tag"]["key"]] = t.inputs["tag"][
            "value"
        ]
    nodes = []
    for ng in run.by_type(NODE_GROUP):
        parent = managed.get(ng.parent or "")
        inputs = {**(parent.inputs if parent else {}), **ng.inputs}
        instance_type = _instance_type(run, parent) if parent else None
        labels = dict(inputs.get("labels") or {})
        group = labels.get(NODE_GROUP_LABEL, SYSTEM_GROUP)
        # A startup taint (the health gate's) is gone once the node is let in, and only then do
        # jobs land: the node as they find it, as the autoscaler's templates also drop it.
        taints = [
            {
                "key": t["key"],
                "value": t.get("value", ""),
                "effect": EKS_EFFECTS.get(t["effect"], t["effect"]),
            }
            for t in inputs.get("taints") or []
            if not t["key"].startswith(AUTOSCALER_STARTUP_TAINT_PREFIX)
        ]
        node_name = inputs.get("nodeGroupName", ng.name)
        labels = {**well_known_labels(instance_type), "eks.amazonaws.com/nodegroup": node_name, **labels}
        t = catalog_instance(instance_type or "")
        node = Node(
            group,
            instance_type,
            int((inputs.get("scalingConfig") or {}).get("maxSize", 1)),
            labels,
            taints,
            eks_allocatable(t.vcpus, t.memory_gib) if t else {},
            _hardware(instance_type, EFA_LABEL in labels) if t else {},
        )
        asg = (((inputs.get("resources") or [{}])[0].get("autoscalingGroups") or [{}])[0]).get("name")
        if asg in tags and instance_type:
            node.template = _template_node(tags[asg], instance_type, node)
        node.described = f"{instance_type} x{node.max_nodes}" + (
            ", from the ASG's node-template tags" if node.template else ""
        )
        nodes.append(node)
    return nodes


def described_nodes(run: PlanRun, cfg) -> list[Node]:
    """The nodes of a cluster the stack did not create, as config describes them. Their labels beyond
    the selector and the kubelet's own are unknown: GPU nodes are taken to carry the labels the
    stack's device plugins select by, and a HyperPod (`ml.`) node the labels of a healthy one that
    passed the deep health checks (HyperPod's agents set them)."""
    nodes = []
    system = cfg.existing_cluster.system_nodes
    labels = {**well_known_labels(None), **system.node_selector}
    allocatable = {"cpu": system.cpus * 1000, "memory": system.memory_gib}
    nodes.append(
        Node(
            SYSTEM_GROUP,
            None,
            system.count,
            labels,
            [],
            allocatable,
            described=(f"described: {system.cpus} CPUs, {system.memory_gib} GiB x{system.count}"),
        )
    )
    for name, g in (run.outputs.get("gpuNodeGroups") or {}).items():
        instance_type = g["instanceType"]
        t = catalog_instance(instance_type)  # an `ml.` type: its EC2 hardware
        efa = bool(g.get("efaInterfacesPerNode"))
        labels = {
            **well_known_labels(instance_type),
            **(g.get("nodeSelector") or {}),
            GPU_PRESENT_LABEL: "true",
        }
        if efa:
            labels[EFA_LABEL] = "true"
        if is_sagemaker_type(instance_type):
            labels |= HYPERPOD_HEALTHY_LABELS
        nodes.append(
            Node(
                name,
                instance_type,
                int(g.get("nodes", 1)),
                labels,
                [],
                eks_allocatable(t.vcpus, t.memory_gib) if t else {},
                _hardware(instance_type, efa),
                described=f"{instance_type} x{g.get('nodes', 1)}, described (assumed labelled {GPU_PRESENT_LABEL}"
                + (f", {EFA_LABEL}" if efa else "")
                + ")",
            )
        )
    return nodes


def plan_nodes(run: PlanRun, cfg) -> list[Node]:
    """The system group first, then the GPU groups by name (registration order varies)."""
    described = cfg is not None and cfg.existing_cluster.named
    found = described_nodes(run, cfg) if described else eks_nodes(run)
    return sorted(found, key=lambda n: (n.group != SYSTEM_GROUP, n.group))


# --- DaemonSets ----------------------------------------------------------------------------------


@dataclass
class DaemonSet:
    name: str
    source: str  # the release or add-on it comes from
    spec: dict  # its pod template's spec
    advertises: str | None = None

    @property
    def requests(self) -> Amounts:
        return pod_requests(self.spec)


class NotChecked(Exception):
    """The DaemonSets could not be rendered here; the message says why."""


def helm_binary() -> Path:
    named = os.environ.get("TRAINSTACK_HELM")
    for candidate in [named] if named else [PROJECT_ROOT / ".tools" / "helm", shutil.which("helm")]:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise NotChecked(
        f"no helm at {named or PROJECT_ROOT / '.tools' / 'helm'} (`make .tools/helm` fetches it, or set TRAINSTACK_HELM)"
    )


def charts_dir() -> Path:
    path = Path(os.environ.get("TRAINSTACK_CHARTS_DIR") or PROJECT_ROOT.parent / "shared" / "charts")
    if not path.is_dir():
        raise NotChecked(f"no charts at {path} (set TRAINSTACK_CHARTS_DIR)")
    return path


@cache
def template_text(
    helm: str, chart: str, release: str, namespace: str, values: str, crds: bool = False
) -> str:
    """`helm template` of `chart` with `values` (JSON) in `namespace` (with its crds/ folders' CRDs:
    `crds`), rendered once per process for the same arguments. Raises NotChecked."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(values)
        f.flush()
        argv = [helm, "template", release, chart, "-f", f.name, "--namespace", namespace]
        done = subprocess.run(
            [*argv, *(["--include-crds"] if crds else [])],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise NotChecked(f"helm template {Path(chart).name} failed: {done.stderr.strip()[:200]}")
    return done.stdout


@cache
def _render(helm: str, chart: str, release: str, namespace: str, values: str) -> tuple[tuple[str, str], ...]:
    found = []
    text = template_text(helm, chart, release, namespace, values)
    for doc in yaml.load_all(text, Loader=yaml.CSafeLoader):  # libyaml: charts run long
        if doc and doc.get("kind") == "DaemonSet":
            found.append((doc["metadata"]["name"], json.dumps(doc["spec"]["template"]["spec"])))
    return tuple(found)


def render_daemonsets(chart: str, release: str, namespace: str, values: dict) -> list[tuple[str, dict]]:
    """The DaemonSets `helm template` renders from ../shared/charts/<chart> with `values`."""
    path = charts_dir() / chart
    if not path.is_dir():
        raise NotChecked(f"no chart {chart} in {path.parent}")
    rendered = _render(str(helm_binary()), str(path), release, namespace, json.dumps(values, sort_keys=True))
    return [(name, json.loads(spec)) for name, spec in rendered]


def plan_daemonsets(run: PlanRun) -> list[DaemonSet]:
    """Every DaemonSet the plan's releases and add-ons would run. Raises NotChecked."""
    found = []
    # Resources register concurrently: in name order, the same plan reads the same.
    for r in sorted(run.by_type(HELM_RELEASE), key=lambda r: r.name):
        release = r.inputs.get("name", r.name)
        if r.inputs.get("chart") not in DAEMONSET_RELEASES:
            continue
        chart = f"{r.inputs['chart']}-{r.inputs['version']}"
        for name, spec in render_daemonsets(
            chart, release, r.inputs.get("namespace") or "default", r.inputs.get("values") or {}
        ):
            advertises = ADVERTISES[r.inputs["chart"]] if "mps" not in name else None
            found.append(DaemonSet(name, release, spec, advertises))
    for ds in run.cluster_objects:
        if ds.get("kind") != "DaemonSet":
            continue
        spec = ds["spec"]["template"]["spec"]
        images = [c.get("image", "") for c in spec.get("containers", [])]
        advertises = next((r for i in images for key, r in PLUGIN_IMAGES.items() if f"/{key}:" in i), None)
        if "mps" in ds["metadata"]["name"]:  # the NVIDIA chart's MPS daemon shares the plugin's image
            advertises = None
        found.append(DaemonSet(ds["metadata"]["name"], "the cluster's own", spec, advertises))
    for a in sorted(run.by_type(ADDON), key=lambda r: r.name):
        chart = ADDON_CHARTS.get(a.inputs.get("addonName"))
        if not chart:
            continue
        values = json.loads(a.inputs.get("configurationValues") or "{}")
        for name, spec in render_daemonsets(chart, a.inputs["addonName"], "kube-system", values):
            found.append(DaemonSet(name, a.inputs["addonName"], spec))
    return found
