"""Cluster operators: NVIDIA and EFA device plugins, the Kubeflow training operator, Kubeflow Trainer v2
with JobSet, KubeRay.

On a cluster the stack did not create, the operators plane decides per operator whether the stack
installs it or reuses the cluster's (account_checks/operator_decisions.py): a reused one is not
installed here (`HelmOperator.enabled` false), and the device plugins it installs select the nodes
the config describes (`gpu_groups`), not labels only the stack's own groups carry. What it installs
there carries the stack's name (`STACK_LABEL`: on each Helm release's Secret, on the training
operator's Deployment), so a later run knows its own operators from others', and the CRDs it applies
stay when it is destroyed: those it applies itself by `retained_crds`, those its Helm releases hold by
Helm's own keep policy (`KEEP_ON_UNINSTALL`, on every cluster). Deleting a CRD deletes every object of its kind.

Every upstream piece is installed from its official source at a pinned version (domain/operators.py
`RELEASES`, `TRAINING_OPERATOR`): Helm charts as real Helm releases (`helm list` shows them; atomic, so
a failed install rolls back), the training operator as its upstream kustomize overlay at a full
commit, KubeRay's CRDs from the commit its chart's tag names. Where the machine running Pulumi reaches
no public source, charts come from a mirror (`operators.chartRepository`) and the manifests from a
copy of GitHub's files (`operators.manifestMirror`), at the same versions and commits. Operators run on the system nodes and wait only for them, never for GPU node groups;
the device plugins' DaemonSets start on GPU nodes whenever those join.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from conventions import (
    EFA_LABEL,
    GPU_PRESENT_LABEL,
    GPU_TOLERATION,
    HEALTH_STARTUP_TOLERATION,
    PART_OF,
    STACK_LABEL,
)
from domain.operators import (
    INSTANCE_TYPE_NODE_LABEL,
    RELEASES,
    TRAINING_OPERATOR_CERT_SECRET,
    TRAINING_OPERATOR_DEPLOYMENT,
    HelmChart,
    kuberay_crd_files,
    training_operator_location,
)

HELM_TIMEOUT_SECONDS = 600
# A Helm post-renderer (tools/helm-keep-on-uninstall) every release runs through: it marks what
# `helm uninstall` must leave `helm.sh/resource-policy: keep`, which Helm reads from the release's
# stored manifest (helm v3.18 pkg/action/uninstall.go filterManifestsToKeep). The CRDs: Kueue's and
# Trainer's charts ship theirs as templates, which an uninstall would delete with every object of their
# kinds, other stacks' included. Aggregated ClusterRoles: kube-controller-manager recreates one the
# uninstall deletes, and the uninstall then waits for it to its timeout (the script says how). The
# provider runs it by this path, relative to the project's directory, the provider's working
# directory (pulumi sdk/go/common/resource/plugin/plugin.go ExecPlugin: cmd.Dir = the context's Pwd),
# so the path in the state is the same on every machine.
KEEP_ON_UNINSTALL = "./tools/helm-keep-on-uninstall"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"


def force_crd_apply(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """Resource transform: a cluster whose CRDs Helm installed (the stack before it applied them)
    holds their fields under Helm's manager; server-side apply takes them over instead of
    failing on the conflict."""
    if args.type_ != CRD_TYPE:
        return None
    props = copy.deepcopy(args.props)
    meta = props.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), "pulumi.com/patchForce": "true"}
    return pulumi.ResourceTransformResult(props=props, opts=args.opts)


# The JobSet subchart as git holds it names a staging image at `main`; the published 0.12.0 chart
# names the release image (kubernetes-sigs/jobset hack/helm-chart-package.sh rewrites image.repository,
# tag and pullPolicy when it packages). The stack pins the published values, so what runs is the
# release whichever copy of the chart renders.
JOBSET_IMAGE = {"repository": "registry.k8s.io/jobset/jobset", "tag": "v0.12.0", "pullPolicy": "IfNotPresent"}


def retained_crds(provider: k8s.Provider):
    """Resource transform, on a cluster the stack did not create: a CRD the stack applies stays when
    the stack stops installing its operator or is destroyed (deleting a CRD deletes every object of
    its kind in the cluster: the owner's, other stacks' and other tools' included); it is labelled
    trainstack's (`PART_OF`), so that a later install, this stack's or another's, knows a kept CRD
    as one it may take over; and it is applied through `provider`, which takes over a kept one
    instead of answering AlreadyExists (components/attached_cluster.py crd_provider)."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != CRD_TYPE:
            return None
        props = copy.deepcopy(args.props)
        meta = props.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **PART_OF}
        kept = pulumi.ResourceOptions(retain_on_delete=True, provider=provider)
        return pulumi.ResourceTransformResult(props=props, opts=pulumi.ResourceOptions.merge(args.opts, kept))

    return transform


@dataclass(frozen=True)
class HelmOperator:
    enabled: bool
    version: str | None
    values: dict[str, Any]
    owner: str | None = None  # on a cluster the stack did not create: the stack's name, labelled on it
    repository: str | None = None  # a mirror every chart comes from (operators.chartRepository)


@dataclass(frozen=True)
class ClusterOperatorsArgs:
    provider: k8s.Provider
    system_nodes: pulumi.Resource | None  # operators wait for these, and only these (None: already there)
    system_selector: dict[str, str]  # where operators run: the system nodes' labels
    any_gpu: bool
    any_efa: bool
    nvidia_device_plugin: HelmOperator
    efa_device_plugin: HelmOperator
    kuberay: HelmOperator
    training_operator_enabled: bool
    training_operator_ref: str | None
    manifest_mirror: str | None = None  # a copy of the GitHub files the stack applies (None: GitHub)
    hyperpod: bool = False  # SageMaker HyperPod nodes: the training operator auto-resume supports
    trainer: HelmOperator | None = None
    jobset_installed: bool = True  # Trainer's chart installs JobSet (False: the cluster runs one)
    kueue: HelmOperator | None = None  # installed by the queueing plane; here as decided
    # A cluster the stack did not create: each GPU group's node labels as the config describes them
    # (EFA groups apart), and the stack's name, labelled on what it installs there.
    gpu_groups: dict[str, dict[str, str]] | None = None
    efa_groups: dict[str, dict[str, str]] | None = None
    owner: str | None = None
    crd_provider: k8s.Provider | None = None  # there: what applies the CRDs it keeps (retained_crds)


def nvidia_device_plugin_values() -> dict[str, Any]:
    # The chart's default affinity wants node-feature-discovery labels, which EKS nodes lack, or
    # nvidia.com/gpu.present=true: GPU node groups carry that label, and the affinity says so alone.
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": GPU_PRESENT_LABEL, "operator": "In", "values": ["true"]}
                            ]
                        }
                    ]
                }
            }
        },
        # The health gate's burn-in needs the node's GPUs advertised before the node is let in.
        "tolerations": [GPU_TOLERATION, HEALTH_STARTUP_TOLERATION],
    }


def efa_device_plugin_values() -> dict[str, Any]:
    # The chart matches every EFA instance type but tolerates nothing: add the GPU taint and the
    # health gate's (its burn-in counts the node's EFA devices), and keep it to nodes whose group
    # has EFA turned on.
    return {"nodeSelector": {EFA_LABEL: "true"}, "tolerations": [GPU_TOLERATION, HEALTH_STARTUP_TOLERATION]}


def described_nvidia_values(groups: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Nodes the stack did not label: one affinity term per GPU group, its labels as the config
    describes them (ORed terms, ANDed expressions: the scheduler's nodeAffinity)."""
    terms = [
        {"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(labels.items())]}
        for labels in groups.values()
    ]
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        },
        "tolerations": [GPU_TOLERATION],
    }


def described_efa_values(groups: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Nodes the stack did not label: the chart's own affinity (supportedInstanceLabels, ORed per
    key) narrowed to the EFA groups' instance types as their nodes carry them (`ml.` on HyperPod)."""
    types = sorted({labels[INSTANCE_TYPE_NODE_LABEL] for labels in groups.values()})
    return {
        "supportedInstanceLabels": {"keys": [INSTANCE_TYPE_NODE_LABEL], "values": types},
        "tolerations": [GPU_TOLERATION],
    }


def trainer_values(system_selector: dict[str, str], install_jobset: bool) -> dict[str, Any]:
    """Trainer's manager and, unless the cluster runs one, JobSet's controller on the system nodes.
    No runtimes from the chart: the stack's jobs name the stack's own ClusterTrainingRuntime."""
    return {
        "manager": {"nodeSelector": dict(system_selector)},
        "jobset": {
            "install": install_jobset,
            "image": dict(JOBSET_IMAGE),
            "controller": {"nodeSelector": dict(system_selector)},
        },
    }


def kuberay_values(system_selector: dict[str, str]) -> dict[str, Any]:
    return {"nodeSelector": dict(system_selector)}


def merge_values(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's own merge: maps merge key by key, anything else (lists included) is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_values(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def training_operator_bundle(system_selector: dict[str, str], owner: str | None = None):
    """A resource transform on the training operator's bundle. It runs the operator's Deployment on
    the system nodes and, on a cluster the stack did not create, labels it with the stack's name
    (`owner`). It drops the webhook certificate Secret's empty `data`: the API server stores an
    empty map as none, so the state's live object has no `data` while the inputs hold `{}`;
    pulumi-kubernetes diffs the new inputs against the live object pruned to the old inputs
    (provider.go Diff) and `data` of a Secret forces a replacement (diff.go), so every `up` without
    a refresh would delete the certificate the operator's rotator wrote."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        props = args.props
        meta = props.get("metadata") or {}
        named = (meta.get("namespace"), meta.get("name"))
        if args.type_ == "kubernetes:core/v1:Secret" and named == TRAINING_OPERATOR_CERT_SECRET:
            return pulumi.ResourceTransformResult(
                props={k: v for k, v in props.items() if k != "data"}, opts=args.opts
            )
        if args.type_ != "kubernetes:apps/v1:Deployment" or named != TRAINING_OPERATOR_DEPLOYMENT:
            return None
        patched = copy.deepcopy(props)
        pod_spec = patched.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {})
        pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **system_selector}
        if owner is not None:
            labels = patched.setdefault("metadata", {}).setdefault("labels", {})
            labels[STACK_LABEL] = owner
        return pulumi.ResourceTransformResult(props=patched, opts=args.opts)

    return transform


class ClusterOperators(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterOperatorsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:operators:ClusterOperators", name, None, opts)
        self._args = args
        self.releases: dict[str, k8s.helm.v3.Release] = {}
        self.kueue = args.kueue
        if args.any_gpu:  # a CPU-only cluster (kind) has nothing for it to do
            nvidia = (
                described_nvidia_values(args.gpu_groups) if args.gpu_groups else nvidia_device_plugin_values()
            )
            self._helm("nvidiaDevicePlugin", args.nvidia_device_plugin, nvidia)
        if args.any_efa:
            efa = described_efa_values(args.efa_groups) if args.efa_groups else efa_device_plugin_values()
            self._helm("efaDevicePlugin", args.efa_device_plugin, efa)
        self.kuberay_crds = None
        # On a cluster the stack did not create, the CRDs it applies outlive it.
        crd_transforms = [retained_crds(args.crd_provider)] if args.crd_provider is not None else []
        if args.kuberay.enabled:
            self.kuberay_crds = k8s.yaml.v2.ConfigGroup(
                f"{name}-kuberay-crds",
                files=kuberay_crd_files(
                    args.kuberay.version or RELEASES["kuberay"].version, args.manifest_mirror
                ),
                opts=pulumi.ResourceOptions(
                    parent=self, provider=args.provider, transforms=[force_crd_apply, *crd_transforms]
                ),
            )
        self._helm("kuberay", args.kuberay, kuberay_values(args.system_selector), crds=self.kuberay_crds)
        if args.trainer is not None:
            self._helm("trainer", args.trainer, trainer_values(args.system_selector, args.jobset_installed))

        self.installed_charts = {key: RELEASES[key] for key in self.releases}
        self.device_plugins = [r for k, r in self.releases.items() if k.endswith("DevicePlugin")]
        self.kuberay = self.releases.get("kuberay")
        self.trainer = self.releases.get("trainer")
        self.training_operator = None
        self.training_operator_url = None
        if args.training_operator_enabled:
            self.training_operator_url = training_operator_location(
                args.hyperpod, args.training_operator_ref, args.manifest_mirror
            )
            # Its Deployment turns Ready only once its webhook serves: awaiting it (the default)
            # means a PyTorchJob created afterwards is not rejected.
            self.training_operator = k8s.kustomize.v2.Directory(
                f"{name}-training-operator",
                directory=self.training_operator_url,
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=args.provider,
                    depends_on=[*filter(None, [args.system_nodes])],
                    transforms=[training_operator_bundle(args.system_selector, args.owner), *crd_transforms],
                ),
            )
        self.register_outputs(
            {"helmReleases": list(self.installed_charts), "trainingOperator": self.training_operator_url}
        )

    def _helm(
        self,
        key: str,
        operator: HelmOperator,
        values: dict[str, Any],
        crds: pulumi.Resource | None = None,
    ) -> None:
        if not operator.enabled:
            return
        self.releases[key] = helm_release(
            RELEASES[key],
            operator,
            values,
            pulumi.ResourceOptions(
                parent=self,
                provider=self._args.provider,
                depends_on=[*filter(None, [self._args.system_nodes, crds])],
            ),
            skip_crds=crds is not None,  # applied by the stack, so they follow the version
        )


def helm_release(
    chart: HelmChart,
    operator: HelmOperator,
    values: dict[str, Any],
    opts: pulumi.ResourceOptions,
    skip_crds: bool = False,
) -> k8s.helm.v3.Release:
    """A real Helm release of `chart` at its pinned version (or the config's), atomic: a failed
    install rolls back. An OCI chart is named by its full reference, a repository chart by name; a
    mirror (`operator.repository`) serves every chart under its upstream name and version.
    Its CRDs and aggregated ClusterRoles outlive it (`KEEP_ON_UNINSTALL`). With an `owner` (a cluster
    the stack did not create), the release's Secret carries the stack's name (`owner_label`)."""
    repository = operator.repository.rstrip("/") if operator.repository else chart.repository
    oci = repository.startswith("oci://")
    release = k8s.helm.v3.Release(
        chart.release,
        name=chart.release,
        chart=f"{repository}/{chart.chart}" if oci else chart.chart,
        repository_opts=None if oci else {"repo": repository},
        version=operator.version or chart.version,
        namespace=chart.namespace,
        create_namespace=True,
        values=merge_values(values, operator.values),
        atomic=True,
        cleanup_on_fail=True,
        timeout=HELM_TIMEOUT_SECONDS,
        skip_crds=skip_crds,
        postrender=KEEP_ON_UNINSTALL,
        opts=opts,
    )
    if operator.owner is not None:
        owner_label(chart, release, operator.owner, opts)
    return release


def release_secret(release: str, revision: int) -> str:
    """The Secret Helm keeps a release's revision in (helm pkg/storage/storage.go makeKey:
    sh.helm.release.v1.<name>.v<revision>)."""
    return f"sh.helm.release.v1.{release}.v{revision}"


def owner_label(
    chart: HelmChart, release: k8s.helm.v3.Release, owner: str, opts: pulumi.ResourceOptions
) -> k8s.core.v1.SecretPatch:
    """The stack's name as a label on the release's current Secret. pulumi-kubernetes's Release sets
    no labels of its own, so a patch (server-side apply, never deleting the object) adds it; Helm
    reads the labels it does not own back into the release (pkg/storage/driver/secrets.go Query) and
    copies them onto each next revision's Secret (pkg/action/upgrade.go, mergeCustomLabels)."""
    return k8s.core.v1.SecretPatch(
        f"{chart.release}-owner",
        metadata={
            "name": release.status.apply(lambda s: release_secret(chart.release, s.revision)),
            "namespace": chart.namespace,
            "labels": {STACK_LABEL: owner},
        },
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[release])),
    )
