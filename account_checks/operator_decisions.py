"""Per operator, on a cluster the stack did not create: install the stack's own, reuse the
cluster's, or stop with one sentence, decided from what the cluster runs (cluster_inventory).

Installing a second copy fails: pulumi-kubernetes creates with a plain POST (AlreadyExists), and Helm
refuses objects another release owns (helm pkg/action/validate.go, existingResourceConflict: the
meta.helm.sh/release-name annotation). Reusing one fails quietly where it cannot serve the jobs: a
CRD without the fields the jobs set drops them, and a Kueue that does not manage a job's kind lets it
run at once, outside the quota. And an operator the stack installed must never be taken for someone
else's: the program would stop declaring it and the next `pulumi up` would uninstall it, CRDs and
every object of their kinds included. What the stack installed carries its name (`STACK_LABEL`, on
its Helm release's Secret or on the training operator's Deployment), read whatever
`existingCluster.namespace` says; a release or Deployment at the stack's own name without it is
never reused on `auto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import yaml

from account_checks.cluster_access import ClusterAddress, ClusterReader, KubeClients
from account_checks.cluster_inventory import (
    EARLIER_RECORD,
    HELM_NAMESPACE_ANNOTATION,
    HELM_RELEASE_ANNOTATION,
    ClusterInventory,
    config_file,
    describe,
    images,
    read_cluster,
    runs_image,
)
from account_checks.cluster_rights import Right, check_rights
from config import PROJECT, StackConfig
from conventions import PART_OF, STACK_LABEL
from domain.job_kinds import KINDS
from domain.operators import (
    INSTANCE_TYPE_NODE_LABEL,
    KUEUE_API,
    KUEUE_DEFAULT_FRAMEWORKS,
    RELEASES,
    TRAINING_OPERATOR_DEPLOYMENT,
    HelmChart,
)


@dataclass(frozen=True)
class Signs:
    """How an operator shows on a cluster, and what the stack's jobs need of it."""

    what: str  # as a sentence names it
    kind: str  # its workload's kind
    image: str  # its container image's repository, registry left out
    crds: dict[str, tuple[str, tuple[str, ...]]]  # CRD -> (version served, spec fields the stack sets)
    other_images: tuple[str, ...] = ()  # repositories other releases of it run

    def runs(self, workload: dict[str, Any]) -> bool:
        return any(runs_image(workload, i) for i in (self.image, *self.other_images))


# The fields the stack's manifests set (components/jobs.py, components/queueing.py), and the one Kueue
# sets to hold a job (runPolicy.suspend, spec.suspend): a CRD without them drops them silently.
SIGNS = {
    "trainingOperator": Signs(
        "the Kubeflow training operator",
        "Deployment",
        "kubeflow/training-operator",
        {
            "pytorchjobs.kubeflow.org": (
                "v1",
                ("elasticPolicy.rdzvBackend", "elasticPolicy.rdzvConf", "nprocPerNode", "runPolicy.suspend"),
            )
        },
        # v1.9's manifests (manifests/base/deployment.yaml, what the stack installs) moved it to
        # ghcr.io/kubeflow/training-v1/training-operator; HyperPod's chart still runs the old path.
        ("kubeflow/training-v1/training-operator",),
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
    # By repository, not by a part of the name: `aws-efa-k8s-device-plugin` contains `k8s-device-plugin`.
    "nvidiaDevicePlugin": Signs("the NVIDIA device plugin", "DaemonSet", "nvidia/k8s-device-plugin", {}),
    "efaDevicePlugin": Signs("the EFA device plugin", "DaemonSet", "aws-efa-k8s-device-plugin", {}),
    # Trainer v2 and the JobSet its TrainJobs run on (kubeflow/trainer v2.3.0
    # pkg/apis/trainer/v1alpha1; kubernetes-sigs/jobset v0.12.0 api/jobset/v1alpha2).
    "trainer": Signs(
        "Kubeflow Trainer",
        "Deployment",
        "kubeflow/trainer/trainer-controller-manager",
        {
            "trainjobs.trainer.kubeflow.org": (
                "v1alpha1",
                ("runtimeRef", "trainer", "runtimePatches", "suspend"),
            ),
            "clustertrainingruntimes.trainer.kubeflow.org": ("v1alpha1", ("mlPolicy.torch", "template")),
        },
    ),
    "jobset": Signs(
        "JobSet",
        "Deployment",
        "jobset/jobset",
        {"jobsets.jobset.x-k8s.io": ("v1alpha2", ("failurePolicy.rules", "replicatedJobs", "suspend"))},
    ),
}
# Read and reported, never installed by the stack: a node health agent (EKS's, or HyperPod's).
MONITORING_IMAGES = ("eks-node-monitoring-agent", "health-monitoring-agent")
CRD_NAMES = tuple(name for s in SIGNS.values() for name in s.crds)
OPERATOR_IMAGES = tuple(i for s in SIGNS.values() for i in (s.image, *s.other_images))
# Kueue sets a kind's integration up at start only if its API is served, else when a poll backing off
# to every 2 minutes finds it (kueue v0.19.2 pkg/controller/jobframework/setup.go, WaitForAPI); its
# TrainJob webhook validates each TrainJob's PodSets through Trainer's runtimes, which only that
# integration's reconciler loads (pkg/controller/jobs/trainjob: NewReconciler, getChildJobSet), so
# until then it refuses every TrainJob: "unsupported runtime".
TRAINJOB_FRAMEWORK = "trainer.kubeflow.org/trainjob"
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"


def read_operators(
    connect: KubeClients, address: ClusterAddress, stack: str, namespace: str | None = None
) -> ClusterInventory:
    """What the cluster runs of the operators, read through the client `connect` makes; in the
    stack's `namespace`, an earlier release's ownership record."""
    with ClusterReader(connect, address, stack) as reader:
        return read_cluster(reader, CRD_NAMES, OPERATOR_IMAGES, (SIGNS["kueue"].image,), namespace)


def release_of(key: str) -> HelmChart | None:
    """The Helm release an operator comes in (JobSet in Trainer's); None for the training operator."""
    return RELEASES.get("trainer" if key == "jobset" else key)


def mode_key(key: str) -> str:
    """The config key of an operator's mode (JobSet's is its Trainer's `jobsetMode`)."""
    return f"{PROJECT}:operators.trainer.jobsetMode" if key == "jobset" else f"{PROJECT}:operators.{key}.mode"


@dataclass(frozen=True)
class OperatorDecision:
    key: str
    action: str  # "install", "reuse" or "off" (not needed, or turned off)
    found: str  # what the cluster runs of it, as a sentence names it ("nothing")
    problem: str | None = None  # the sentence that stops the program
    unchecked: bool = False  # reused without seeing its workloads (the identity may not list them)


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


def group_members(nodes: list[dict[str, Any]], labels: dict[str, str]) -> list[dict[str, Any]]:
    """The nodes ({name, labels}) that carry every label a group's config describes."""
    return [n for n in nodes if all(n["labels"].get(k) == v for k, v in labels.items())]


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


def kueue_frameworks(deployment: dict[str, Any], inventory: ClusterInventory) -> tuple[tuple[str, ...], str]:
    """The job frameworks a running Kueue manages, and where that was read (a sentence's words)."""
    source = config_file(deployment)
    if source is None:
        return KUEUE_DEFAULT_FRAMEWORKS, "it runs without a --config file, so with Kueue's defaults"
    namespace = deployment["metadata"]["namespace"]
    where = f"its Configuration (ConfigMap {namespace}/{source[0]}, key {source[1]})"
    found = inventory.named("ConfigMap", namespace, source[0])
    if found is None or source[1] not in (found.get("data") or {}):
        return (), f"its Configuration (ConfigMap {namespace}/{source[0]}, key {source[1]}: not there)"
    configured = (yaml.safe_load(found["data"][source[1]]) or {}).get("integrations") or {}
    return tuple(configured.get("frameworks") or KUEUE_DEFAULT_FRAMEWORKS), where


def _own_name(key: str, inventory: ClusterInventory) -> tuple[str, dict[str, str]] | None:
    """What the cluster holds at the stack's own name for this operator (its Helm release, Trainer's
    for JobSet, its subchart; or the training operator's Deployment), as a sentence names it, and its
    labels."""
    chart = release_of(key)
    if chart is not None:
        release = inventory.helm_releases().get((chart.namespace, chart.release))
        return (f"Helm release {release.name} in {release.namespace}", release.labels) if release else None
    if key != "trainingOperator":
        return None
    deployment = inventory.named("Deployment", *TRAINING_OPERATOR_DEPLOYMENT)
    if deployment is None:
        return None
    return describe(deployment), deployment["metadata"].get("labels") or {}


def _owner(key: str, labels: dict[str, str], stack: str, inventory: ClusterInventory) -> str | None:
    """The stack that owns what the cluster holds under the stack's own name for `key`: its label, or,
    unlabelled, this stack where a release before the labels recorded it installed it."""
    owner = labels.get(STACK_LABEL)
    if owner is None and inventory.earlier_record().get(key) == "installed":
        return stack
    return owner


def stack_owns(key: str, stack: str, inventory: ClusterInventory) -> bool:
    """Whether the cluster holds this operator under the stack's own name as the stack's."""
    own = _own_name(key, inventory)
    return own is not None and _owner(key, own[1], stack, inventory) == stack


def _kept_crd(key: str, crd: dict[str, Any]) -> bool:
    """A CRD a trainstack stack kept when its operator went: one it applied itself (labelled
    `PART_OF`: components/operators.py retained_crds), or one its Helm release kept (annotated with the
    stack's release name and namespace, which Helm takes over on installing that release again:
    helm pkg/action/validate.go existingResourceConflict)."""
    meta = crd["metadata"]
    if all((meta.get("labels") or {}).get(k) == v for k, v in PART_OF.items()):
        return True
    chart = release_of(key)
    annotations = meta.get("annotations") or {}
    return chart is not None and (
        annotations.get(HELM_RELEASE_ANNOTATION),
        annotations.get(HELM_NAMESPACE_ANNOTATION),
    ) == (chart.release, chart.namespace)


def _kept(key: str, owned: bool, cfg: StackConfig) -> OperatorDecision:
    """An operator no job of the stack needs now: left off, unless the stack installed it and it is
    still turned on, since uninstalling it would take it from every other stack that reuses it
    (turn it off, operators.<name>.enabled: false, to remove it)."""
    if owned and cfg.operators.on_any_cluster()[key].enabled:
        return OperatorDecision(
            key, "install", "the stack's own, kept though no job of the stack needs it now"
        )
    return OperatorDecision(key, "off", "not read")


def _ownership(
    key: str, mode: str, stack: str, inventory: ClusterInventory, found: str
) -> OperatorDecision | None:
    """The decision where the cluster holds something at the stack's own name: the stack's (its
    label) is installed again, never reused; one without a label is reused only when told."""
    own = _own_name(key, inventory)
    if own is None:
        return None
    name, labels = own
    switch = mode_key(key)
    owner = _owner(key, labels, stack, inventory)
    if owner is not None and STACK_LABEL not in labels:
        # Installed by a release before the ownership labels, which recorded it: this run labels it
        # (helm_release's owner label) and the record goes with the ConfigMap the program no longer makes.
        found = f"{found}; recorded as the stack's own in ConfigMap {EARLIER_RECORD}"
    if owner == stack:
        if mode == "reuse":
            why = (
                f"{switch} = reuse: {name} is this stack's own ({STACK_LABEL}={stack}), and reusing it would "
                "uninstall it; allowed: auto or install"
            )
            return OperatorDecision(key, "install", found, why)
        return OperatorDecision(key, "install", f"{found} (the stack's own)")
    if mode == "reuse" or (mode == "auto" and owner is not None):
        return None  # another's, left as it is where it serves (decide)
    whose = f"stack {owner}'s" if owner else "labelled by no stack"
    return OperatorDecision(
        key,
        "install",
        found,
        f"{switch} = {mode}: the cluster has {name} under the stack's own name, {whose}, and a second "
        f"install under that name fails; allowed: reuse (use it as it is), or, if this stack installed it, "
        f"label it {STACK_LABEL}={stack} (on a Helm release, its latest sh.helm.release.v1 Secret)",
    )


def decide(
    key: str,
    mode: str,
    needed: bool,
    inventory: ClusterInventory,
    cfg: StackConfig,
    frameworks: tuple[str, ...],
) -> OperatorDecision:
    """Install, reuse or stop, for one operator, from what the cluster runs; `frameworks`: the Kueue
    integrations the stack's jobs need."""
    signs = SIGNS[key]
    if not needed:
        return _kept(key, stack_owns(key, cfg.stack, inventory), cfg)
    workloads = [w for w in inventory.of_kind(signs.kind) if signs.runs(w)]
    crds = [inventory.crd(n) for n in signs.crds if inventory.crd(n) is not None]
    there = [describe(o) for o in workloads] + [f"CRD {c['metadata']['name']}" for c in crds]
    unseen = inventory.unseen(signs.kind, tuple(signs.crds))
    found = "; ".join(there) or "nothing"
    if unseen:
        found += f" (the stack's identity may not read {', '.join(unseen)})"
    owned = _ownership(key, mode, cfg.stack, inventory, found)
    if owned is not None:
        return owned
    switch = mode_key(key)
    if crds and not workloads and not unseen and mode != "reuse" and all(_kept_crd(key, c) for c in crds):
        return OperatorDecision(
            key, "install", f"{found}, kept by an earlier install of trainstack's: installed over"
        )
    if not there and unseen:
        if mode == "reuse":
            return OperatorDecision(key, "reuse", found, unchecked=True)
        return OperatorDecision(
            key,
            "install",
            found,
            f"{switch} = {mode}: whether the cluster runs {signs.what} cannot be told, since the stack's identity "
            f"may not read {', '.join(unseen)} (403), and a second one would collide with the cluster's; allowed: "
            f"reuse (the cluster's own, taken unchecked), or an identity that may list Deployments and DaemonSets "
            "in every namespace and read CRDs",
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
    why = _incompatible(key, signs, workloads, inventory, cfg, frameworks)
    if why is None:
        return OperatorDecision(key, "reuse", found, unchecked=not workloads)
    return OperatorDecision(
        key, "reuse", found, f"{switch} = {mode}: the cluster runs {signs.what} ({found}), but {why}"
    )


UPGRADE = "allowed: install after removing it from the cluster, or reuse once it is upgraded"


def _incompatible(
    key: str,
    signs: Signs,
    workloads: list[dict[str, Any]],
    inventory: ClusterInventory,
    cfg: StackConfig,
    wanted: tuple[str, ...],
) -> str | None:
    if not workloads and not inventory.hidden(signs.kind):
        return f"no {signs.kind} of it runs (only its CRDs are there); {UPGRADE}"
    for name, (version, fields) in signs.crds.items():
        problem = _crd_problem(inventory, name, version, fields)
        if problem:
            return f"{problem}; {UPGRADE}"
    if not workloads:
        return None  # its CRDs serve the jobs; its workloads are out of the identity's sight (unchecked)
    if key == "kueue":
        for deployment in workloads:
            frameworks, where = kueue_frameworks(deployment, inventory)
            missing = [f for f in wanted if f not in frameworks]
            if missing:
                return (
                    f"{where} does not manage {', '.join(missing)}, which the stack's jobs are, and Kueue "
                    "lets a kind it does not manage run at once, outside the quota; allowed: add "
                    f"{', '.join(missing)} to its integrations.frameworks and restart it, or install"
                )
        if TRAINJOB_FRAMEWORK in wanted and inventory.crd(TRAINJOB_CRD) is None:
            return (
                "the TrainJob API is not served yet (this `up` would install Trainer), and a Kueue started "
                "before that API sets its TrainJob integration up only when it next polls for it, up to 2 "
                "minutes later, refusing every TrainJob until then (its webhook asks Trainer's runtimes, "
                "which that integration loads); allowed: a first `pulumi up` with no TrainJob in "
                "trainstack:jobs (it installs Trainer), then the TrainJobs once Kueue is restarted or 2 "
                "minutes have passed; or install"
            )
    if signs.kind == "DaemonSet":
        groups = group_labels(cfg)
        if key == "efaDevicePlugin":
            groups = {g.name: groups[g.name] for g in cfg.gpu_node_groups if g.efa}
        nodes = inventory.nodes()
        for group, labels in groups.items():
            # The group's nodes as they are labelled (the GPU Operator selects its own label, which its
            # controller sets); where it has none now, as the config describes them.
            members = group_members(nodes, labels)
            unserved = [n["name"] for n in members if not any(selects(w, n["labels"]) for w in workloads)]
            if members and unserved:
                return (
                    f"none of its DaemonSets selects gpuNodeGroups {group}'s nodes {', '.join(unserved)}; "
                    f"{UPGRADE}"
                )
            if not members and not any(selects(w, labels) for w in workloads):
                shown = ", ".join(f"{k}={v}" for k, v in labels.items())
                return (
                    f"none of its DaemonSets selects gpuNodeGroups {group}'s nodes ({shown}; none is up to read "
                    f"its own labels); {UPGRADE}"
                )
    return None


def needed(cfg: StackConfig) -> dict[str, bool]:
    """Which operators the stack runs at all on this cluster. Trainer and JobSet only where a TrainJob
    needs them, unless their mode says install: both are cluster-wide (webhooks on every TrainJob and
    JobSet of every team), too much to bring to a shared cluster for nothing."""
    ops = cfg.operators.on_any_cluster()
    wanted = {key: op.enabled for key, op in ops.items()}
    wanted["nvidiaDevicePlugin"] &= bool(cfg.gpu_node_groups)
    wanted["efaDevicePlugin"] &= any(g.efa for g in cfg.gpu_node_groups)
    trainjobs = any(KINDS[j.kind].operator == "trainer" for j in cfg.jobs)
    wanted["trainer"] &= trainjobs or ops["trainer"].mode == "install"
    wanted["jobset"] &= wanted["trainer"]  # Trainer's TrainJobs run on it: never one without the other
    return wanted


def decide_operators(
    cfg: StackConfig, inventory: ClusterInventory, frameworks: tuple[str, ...]
) -> dict[str, OperatorDecision]:
    """Every operator's decision; logs them; stops with every problem before anything is registered.
    `frameworks`: the Kueue integrations the stack's jobs need (a reused Kueue must manage each)."""
    ops, wanted = cfg.operators.on_any_cluster(), needed(cfg)
    decisions = {key: decide(key, ops[key].mode, wanted[key], inventory, cfg, frameworks) for key in SIGNS}
    agents = [
        describe(d)
        for d in inventory.of_kind("DaemonSet")
        if any(i in image for image in images(d) for i in MONITORING_IMAGES)
    ]
    lines = [
        f"Cluster operators ({len(inventory.helm_releases())} Helm release(s) in the stack's release namespaces):"
    ]
    for d in decisions.values():
        lines.append(f"  {'FAIL' if d.problem else d.action:7s}  {d.key}: found {d.found}")
    lines.append(f"  node monitoring: {'; '.join(agents) or 'none found'}")
    pulumi.log.info("\n".join(lines))
    unchecked = [d.key for d in decisions.values() if d.unchecked and not d.problem]
    if unchecked:
        pulumi.log.warn(
            f"reused unchecked: {', '.join(unchecked)}: the stack's identity may not list the cluster's Deployments "
            "and DaemonSets, so their images, selectors and Kueue's frameworks were not read (only the CRDs it "
            "may read were checked)"
        )
    problems = [d.problem for d in decisions.values() if d.problem]
    if problems:
        raise ClusterOperatorsError(cfg.stack, problems)
    return decisions


def install_rights(decisions: dict[str, OperatorDecision]) -> list[Right]:
    """The creates that installing the operators decided on takes: each one's workload in its
    namespace, and, for those with CRDs, the CRDs and the cluster roles their controllers run with."""
    rights: list[Right] = []
    for d in decisions.values():
        if d.action != "install":
            continue
        signs = SIGNS[d.key]
        chart = release_of(d.key)
        namespace = chart.namespace if chart else TRAINING_OPERATOR_DEPLOYMENT[0]
        rights.append(Right("create", "apps", f"{signs.kind.lower()}s", namespace))
        if signs.crds:
            rights += [
                Right("create", "apiextensions.k8s.io", "customresourcedefinitions"),
                Right("create", "rbac.authorization.k8s.io", "clusterroles"),
                Right("create", "rbac.authorization.k8s.io", "clusterrolebindings"),
            ]
    return rights


def check_install_rights(
    connect: KubeClients, address: ClusterAddress, stack: str, decisions: dict[str, OperatorDecision]
) -> None:
    """Stops (ClusterRightsError) where the identity may not install what the decisions install."""
    rights = install_rights(decisions)
    if not rights:
        return
    with ClusterReader(connect, address, stack) as reader:
        check_rights(reader, rights, "install the operators it decided to install")
