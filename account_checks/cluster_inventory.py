"""What a cluster the stack did not create already runs, read before anything is registered on it,
and what the stack does per operator: install its own, reuse the cluster's, or stop.

A SageMaker HyperPod cluster runs the training operator and both device plugins from the start, and
many clusters run KubeRay or Kueue. Installing a second copy fails: pulumi-kubernetes creates with a
plain POST (AlreadyExists), and Helm refuses objects another release owns
(helm pkg/action/validate.go, existingResourceConflict: the meta.helm.sh/release-name annotation). So
the stack reads the CRDs, operator Deployments, device-plugin DaemonSets and Helm releases (Helm 3
keeps each as a Secret `sh.helm.release.v1.<name>.v<N>` labelled owner=helm,
pkg/storage/driver/secrets.go) through the official Kubernetes client, and per operator
(`operators.<key>.mode`) reuses what is there when it serves what the stack's jobs need, or stops
with one sentence naming what is there and the switch that decides.

What the stack installed itself, it records in a ConfigMap in its namespace (`OWN_RECORD`): a later
run finds its own operators there and keeps managing them instead of taking them for someone else's.
"""

from __future__ import annotations

import base64
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pulumi
from kubernetes import client
from kubernetes import config as kube_config

from components.operators import INSTANCE_TYPE_NODE_LABEL, OWN_RECORD, RELEASES
from components.queueing import KUEUE_API
from config import PROJECT, StackConfig
from conventions import TRAINING_NAMESPACE

HELM_OWNER_LABEL = "owner=helm"
HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"
HELM_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"


@dataclass(frozen=True)
class Signs:
    """How an operator shows on a cluster, and what the stack's jobs need of it."""

    what: str  # as a sentence names it
    kind: str  # its workload's kind
    image: str  # a part of its container image's name
    crds: dict[str, tuple[str, tuple[str, ...]]]  # CRD -> (version served, spec fields the stack sets)


# The fields the stack's manifests set (components/jobs.py, components/queueing.py), and the one Kueue
# sets to hold a job (runPolicy.suspend, spec.suspend): a CRD without them drops them silently.
SIGNS = {
    "trainingOperator": Signs(
        "the Kubeflow training operator",
        "Deployment",
        "training-operator",
        {
            "pytorchjobs.kubeflow.org": (
                "v1",
                ("elasticPolicy.rdzvBackend", "elasticPolicy.rdzvConf", "nprocPerNode", "runPolicy.suspend"),
            )
        },
    ),
    "kuberay": Signs(
        "KubeRay",
        "Deployment",
        "kuberay/operator",
        {
            "rayjobs.ray.io": (
                "v1",
                (
                    "submissionMode",
                    "submitterPodTemplate",
                    "shutdownAfterJobFinishes",
                    "backoffLimit",
                    "suspend",
                    # Token auth: a KubeRay before 1.5.1 drops it silently and leaves the head open.
                    "rayClusterSpec.authOptions.mode",
                ),
            ),
            "rayclusters.ray.io": (
                "v1",
                ("headGroupSpec", "workerGroupSpecs", "suspend", "authOptions.mode"),
            ),
        },
    ),
    "kueue": Signs(
        "Kueue",
        "Deployment",
        "kueue/kueue",
        {
            f"{plural}.kueue.x-k8s.io": (KUEUE_API.rpartition("/")[2], ())
            for plural in ("clusterqueues", "localqueues", "resourceflavors", "workloads")
        },
    ),
    "nvidiaDevicePlugin": Signs("the NVIDIA device plugin", "DaemonSet", "k8s-device-plugin", {}),
    "efaDevicePlugin": Signs("the EFA device plugin", "DaemonSet", "aws-efa-k8s-device-plugin", {}),
}
# Read and reported, never installed by the stack: a node health agent (EKS's, or HyperPod's).
MONITORING_IMAGES = ("eks-node-monitoring-agent", "health-monitoring-agent")
CRD_NAMES = tuple(name for s in SIGNS.values() for name in s.crds)


@dataclass(frozen=True)
class ClusterInventory:
    """The cluster's objects as its API answers them (JSON), `kind` set on each."""

    objects: tuple[dict[str, Any], ...]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    def crd(self, name: str) -> dict[str, Any] | None:
        return next(
            (c for c in self.of_kind("CustomResourceDefinition") if c["metadata"]["name"] == name), None
        )

    def workloads(self, kind: str, image: str) -> list[dict[str, Any]]:
        return [w for w in self.of_kind(kind) if any(image in c.get("image", "") for c in _containers(w))]

    def own(self) -> dict[str, str]:
        """What the stack recorded it installed, on an earlier run."""
        for m in self.of_kind("ConfigMap"):
            meta = m["metadata"]
            if meta["name"] == OWN_RECORD:  # read from the stack's namespace only (read_cluster)
                return dict(m.get("data") or {})
        return {}

    def helm_releases(self) -> dict[tuple[str, str], str]:
        """(namespace, release) -> its latest status, from Helm's release Secrets."""
        latest: dict[tuple[str, str], tuple[int, str]] = {}
        for s in self.of_kind("Secret"):
            labels = s["metadata"].get("labels") or {}
            if labels.get("owner") != "helm" or "name" not in labels:
                continue
            key = (s["metadata"].get("namespace"), labels["name"])
            version = int(labels.get("version", 0))
            if version >= latest.get(key, (-1, ""))[0]:
                latest[key] = (version, labels.get("status", "unknown"))
        return {k: status for k, (_, status) in latest.items()}


def _containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return ((workload.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


def describe(obj: dict[str, Any]) -> str:
    """One object as a sentence names it: kind, namespace/name, image tag, owning Helm release."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    text = f"{obj['kind']} {where}"
    images = [c["image"] for c in _containers(obj) if c.get("image")]
    if images:
        text += f" (image {images[0]}"
        release = (meta.get("annotations") or {}).get(HELM_RELEASE_ANNOTATION)
        if release:
            namespace = (meta.get("annotations") or {}).get(HELM_NAMESPACE_ANNOTATION, meta.get("namespace"))
            text += f", Helm release {release} in {namespace}"
        text += ")"
    return text


# --- reading the cluster ---------------------------------------------------------------------------


def eks_token(session, cluster_name: str, region: str) -> str:
    """What `aws eks get-token` prints: an STS GetCallerIdentity URL presigned with the cluster's name
    in the x-k8s-aws-id header, base64url without padding, prefixed k8s-aws-v1.
    (aws-cli awscli/customizations/eks/get_token.py: TokenGenerator, STSClientFactory)."""
    sts = session.client("sts", region_name=region, endpoint_url=f"https://sts.{region}.amazonaws.com")

    def keep_id(params, context, **_):
        if "x-k8s-aws-id" in params:
            context["x-k8s-aws-id"] = params.pop("x-k8s-aws-id")

    def add_header(request, **_):
        if "x-k8s-aws-id" in request.context:
            request.headers["x-k8s-aws-id"] = request.context["x-k8s-aws-id"]

    sts.meta.events.register("provide-client-params.sts.GetCallerIdentity", keep_id)
    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    url = sts.generate_presigned_url(
        "get_caller_identity", Params={"x-k8s-aws-id": cluster_name}, ExpiresIn=60, HttpMethod="GET"
    )
    return "k8s-aws-v1." + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


@dataclass(frozen=True)
class ClusterAddress:
    """How the stack reaches the cluster: an EKS endpoint and CA, or a kubeconfig file and context."""

    endpoint: str | None = None
    ca_data: str | None = None
    eks_cluster_name: str | None = None
    region: str | None = None
    kubeconfig_file: str | None = None
    context: str | None = None


def api_client(address: ClusterAddress, session: Callable[[], Any], live: bool) -> client.ApiClient:
    """The official client, authenticated as the stack's provider is. Under the offline plan it has
    no credentials to get: its requests are answered by the offline cluster (offline/engine)."""
    if address.kubeconfig_file is not None:
        if live:
            return kube_config.new_client_from_config(address.kubeconfig_file, context=address.context)
        return client.ApiClient(client.Configuration(host="https://kubeconfig.offline"))
    configuration = client.Configuration(host=address.endpoint)
    if not live:
        return client.ApiClient(configuration)
    token = eks_token(session(), address.eks_cluster_name, address.region)
    configuration.api_key = {"authorization": f"Bearer {token}"}
    # urllib3 reads the CA file at each TLS handshake, so it outlives this call.
    with tempfile.NamedTemporaryFile("wb", prefix="trainstack-ca-", suffix=".crt", delete=False) as ca:
        ca.write(base64.b64decode(address.ca_data))
    configuration.ssl_ca_cert = ca.name
    return client.ApiClient(configuration)


def read_cluster(api: client.ApiClient, namespace: str = TRAINING_NAMESPACE) -> ClusterInventory:
    """The objects the decisions read, as the API answers them. A Helm release Secret holds the
    whole release (manifest and values): only its metadata is kept."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    listed: list[tuple[str, Iterable[Any]]] = [
        ("CustomResourceDefinition", client.ApiextensionsV1Api(api).list_custom_resource_definition().items),
        ("Deployment", apps.list_deployment_for_all_namespaces().items),
        ("DaemonSet", apps.list_daemon_set_for_all_namespaces().items),
        ("Secret", core.list_secret_for_all_namespaces(label_selector=HELM_OWNER_LABEL).items),
        (
            "ConfigMap",
            core.list_namespaced_config_map(namespace, field_selector=f"metadata.name={OWN_RECORD}").items,
        ),
    ]
    objects = []
    for kind, items in listed:
        for item in items:
            obj = api.sanitize_for_serialization(item)
            if kind == "Secret":
                obj = {"metadata": obj["metadata"]}
            elif kind == "CustomResourceDefinition" and obj["metadata"]["name"] not in CRD_NAMES:
                continue
            objects.append({**obj, "kind": kind})
    return ClusterInventory(tuple(objects))


# --- deciding --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorDecision:
    key: str
    action: str  # "install", "reuse" or "off" (not needed, or turned off)
    found: str  # what the cluster runs of it, as a sentence names it ("nothing")
    problem: str | None = None  # the sentence that stops the program


class ClusterOperatorsError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': the cluster already runs operators the stack would collide with or "
            f"cannot use; nothing was created:\n{lines}"
        )


def group_labels(cfg: StackConfig) -> dict[str, dict[str, str]]:
    """What the config says each GPU group's nodes carry: its instance type and its nodeSelector."""
    return {
        g.name: {INSTANCE_TYPE_NODE_LABEL: g.instance_type, **(g.node_selector or {})}
        for g in cfg.gpu_node_groups
    }


def _term_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm against labels, as the scheduler does (k8s.io/component-helpers
    scheduling/corev1/nodeaffinity: each expression must hold)."""
    for e in term.get("matchExpressions") or []:
        value, op = labels.get(e["key"]), e["operator"]
        if op == "In" and value not in e.get("values", []):
            return False
        if op == "NotIn" and value in e.get("values", []):
            return False
        if op == "Exists" and value is None:
            return False
        if op == "DoesNotExist" and value is not None:
            return False
        if op in ("Gt", "Lt"):
            return False  # no numeric label is configured for a group
    return True


def selects(daemonset: dict[str, Any], labels: dict[str, str]) -> bool:
    pod = daemonset["spec"]["template"]["spec"]
    if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
        return False
    required = ((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms")
    return not terms or any(_term_matches(t, labels) for t in terms)


def _field_missing(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in path.split("."):
        props = node.get("properties") or {}
        if part not in props:
            return not node.get("x-kubernetes-preserve-unknown-fields", False)
        node = props[part]
    return False


def _crd_problem(inventory: ClusterInventory, name: str, version: str, fields: tuple[str, ...]) -> str | None:
    crd = inventory.crd(name)
    if crd is None:
        return f"it has no CRD {name}"
    served = [v for v in crd["spec"]["versions"] if v.get("served")]
    match = next((v for v in served if v["name"] == version), None)
    if match is None:
        return f"CRD {name} serves {', '.join(v['name'] for v in served) or 'no version'}, not {version}"
    spec = (((match.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties") or {}).get(
        "spec"
    ) or {}
    missing = [f for f in fields if _field_missing(spec, f)]
    if missing:
        return f"CRD {name} {version} has no spec.{', spec.'.join(missing)}, which the stack's jobs set"
    return None


def decide(
    key: str, mode: str, needed: bool, inventory: ClusterInventory, cfg: StackConfig
) -> OperatorDecision:
    """Install, reuse or stop, for one operator, from what the cluster runs."""
    signs = SIGNS[key]
    if not needed:
        return OperatorDecision(key, "off", "not read")
    workloads = inventory.workloads(signs.kind, signs.image)
    crds = [inventory.crd(n) for n in signs.crds if inventory.crd(n) is not None]
    there = [describe(o) for o in workloads] + [f"CRD {c['metadata']['name']}" for c in crds]
    found = "; ".join(there) or "nothing"
    if inventory.own().get(key) == "installed":
        return OperatorDecision(key, "install", f"{found} (the stack's own)")
    switch = f"{PROJECT}:operators.{key}.mode"
    chart = RELEASES.get(key)
    if chart is not None and (chart.namespace, chart.release) in inventory.helm_releases():
        # Helm refuses to install a release under a name in use (pkg/action/install.go availableName).
        there.append(f"Helm release {chart.release} in {chart.namespace}")
        found = "; ".join(there)
        if mode == "install" or (mode == "auto" and not workloads):
            return OperatorDecision(
                key,
                "install",
                found,
                f"{switch} = {mode}: the cluster has a Helm release {chart.release} in {chart.namespace} "
                f"the stack did not install ({found}), and Helm refuses a second release of that name; "
                "allowed: reuse (use it as it is), or uninstall it first",
            )
    if not there:
        if mode == "reuse":
            return OperatorDecision(
                key,
                "reuse",
                found,
                f"{switch} = reuse: the cluster runs no {signs.what}; allowed: install or auto",
            )
        return OperatorDecision(key, "install", found)
    if mode == "install":
        return OperatorDecision(
            key,
            "install",
            found,
            f"{switch} = install: the cluster already runs {signs.what} ({found}); a second one would collide "
            "with it; allowed: reuse or auto (use it as it is), or remove it from the cluster first",
        )
    why = _incompatible(key, signs, workloads, inventory, cfg)
    if why is None:
        return OperatorDecision(key, "reuse", found)
    return OperatorDecision(
        key,
        "reuse",
        found,
        f"{switch} = {mode}: the cluster runs {signs.what} ({found}), but {why}; allowed: install after "
        "removing it from the cluster, or reuse once it is upgraded",
    )


def _incompatible(
    key: str, signs: Signs, workloads: list[dict[str, Any]], inventory: ClusterInventory, cfg: StackConfig
) -> str | None:
    if not workloads:
        return f"no {signs.kind} of it runs (only its CRDs are there)"
    for name, (version, fields) in signs.crds.items():
        problem = _crd_problem(inventory, name, version, fields)
        if problem:
            return problem
    if signs.kind == "DaemonSet":
        groups = group_labels(cfg)
        if key == "efaDevicePlugin":
            groups = {g.name: groups[g.name] for g in cfg.gpu_node_groups if g.efa}
        for group, labels in groups.items():
            if not any(selects(w, labels) for w in workloads):
                shown = ", ".join(f"{k}={v}" for k, v in labels.items())
                return f"none of its DaemonSets selects gpuNodeGroups {group}'s nodes ({shown})"
    return None


def needed(cfg: StackConfig) -> dict[str, bool]:
    """Which operators the stack runs at all on this cluster."""
    ops = cfg.operators.on_any_cluster()
    wanted = {key: op.enabled for key, op in ops.items()}
    wanted["nvidiaDevicePlugin"] &= bool(cfg.gpu_node_groups)
    wanted["efaDevicePlugin"] &= any(g.efa for g in cfg.gpu_node_groups)
    return wanted


def decide_operators(cfg: StackConfig, inventory: ClusterInventory) -> dict[str, OperatorDecision]:
    """Every operator's decision; logs them; stops with every problem before anything is registered."""
    ops, wanted = cfg.operators.on_any_cluster(), needed(cfg)
    decisions = {key: decide(key, ops[key].mode, wanted[key], inventory, cfg) for key in SIGNS}
    agents = [
        describe(d)
        for d in inventory.of_kind("DaemonSet")
        if any(i in c.get("image", "") for c in _containers(d) for i in MONITORING_IMAGES)
    ]
    lines = [f"Cluster operators ({len(inventory.helm_releases())} Helm release(s) on the cluster):"]
    for d in decisions.values():
        lines.append(f"  {'FAIL' if d.problem else d.action:7s}  {d.key}: found {d.found}")
    lines.append(f"  node monitoring: {'; '.join(agents) or 'none found'}")
    pulumi.log.info("\n".join(lines))
    problems = [d.problem for d in decisions.values() if d.problem]
    if problems:
        raise ClusterOperatorsError(cfg.stack, problems)
    return decisions


def own_record(decisions: dict[str, OperatorDecision]) -> dict[str, str]:
    """The ConfigMap data that tells a later run which operators are the stack's own."""
    return {key: "installed" for key, d in decisions.items() if d.action == "install"}
