"""Operators plane config: which operators the stack installs, at which versions, with which values."""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config.names import PROJECT
from config.schema import Reader, setting
from domain.job_kinds import KINDS
from domain.operators import (
    KUBERAY_CRD_COMMITS,
    RELEASES,
    kuberay_crd_files,
    training_operator_location,
)

_COMMIT = re.compile(r"[0-9a-f]{40}")
_CHART_REPOSITORY = re.compile(r"(oci|https?)://[^\s/]+(/\S*)?")
_CHART_VERSION = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?")
# What the stack does with an operator on a cluster it did not create (on its own cluster it installs).
MODES = ("auto", "install", "reuse")
_MODE_DOC = (
    "On a cluster trainstack did not create: auto reuses the one the cluster runs when it serves what the "
    "stack's jobs need, else installs; install always installs (stops if the cluster runs one); reuse "
    "never installs (stops if the cluster runs none, or one the jobs cannot use)."
)


@dataclass(frozen=True)
class HelmOperatorConfig:
    enabled: bool = setting("enabled", "Install it (off where the cluster already runs one).", True)
    version: str | None = setting("version", "Chart version (default: the one trainstack pins).", None)
    values: dict[str, Any] = setting("values", "Chart values merged over trainstack's.", factory=dict)


@dataclass(frozen=True)
class ClusterOperatorConfig(HelmOperatorConfig):
    """An operator a cluster may already run (a HyperPod cluster runs several from the start)."""

    enabled: bool = setting("enabled", "Run it at all (off: no job of its kind).", True)
    mode: str = setting("mode", _MODE_DOC, "auto")


@dataclass(frozen=True)
class TrainingOperatorConfig:
    enabled: bool = setting("enabled", "Run it at all (off: no PyTorchJob).", True)
    mode: str = setting("mode", _MODE_DOC, "auto")
    ref: str | None = setting(
        "ref",
        "Full commit SHA of kubeflow/trainer to install from (default: v1.9.4's; v1.8.1's on SageMaker "
        "HyperPod nodes, the newest AWS names for auto-resume).",
        None,
    )


@dataclass(frozen=True)
class TrainerConfig(ClusterOperatorConfig):
    """Kubeflow Trainer v2 (TrainJob), whose chart brings JobSet, the API its TrainJobs run on."""

    enabled: bool = setting("enabled", "Run it at all (off: no TrainJob).", True)
    jobset_mode: str = setting(
        "jobsetMode",
        "JobSet, which the Trainer chart installs beside it (its subchart). " + _MODE_DOC,
        "auto",
    )


@dataclass(frozen=True)
class OperatorsConfig:
    nvidia_device_plugin: ClusterOperatorConfig = setting(
        "nvidiaDevicePlugin", "NVIDIA device plugin (Helm), on GPU nodes.", factory=ClusterOperatorConfig
    )
    efa_device_plugin: ClusterOperatorConfig = setting(
        "efaDevicePlugin",
        "EFA device plugin (Helm), on EFA nodes; only with an EFA group.",
        factory=ClusterOperatorConfig,
    )
    training_operator: TrainingOperatorConfig = setting(
        "trainingOperator",
        "Kubeflow training operator v1 (PyTorchJob), on system nodes.",
        factory=TrainingOperatorConfig,
    )
    trainer: TrainerConfig = setting(
        "trainer",
        "Kubeflow Trainer v2 (Helm, with JobSet; TrainJob), on system nodes.",
        factory=TrainerConfig,
    )
    kuberay: ClusterOperatorConfig = setting(
        "kuberay",
        "KubeRay operator (Helm; RayJob, RayCluster), on system nodes.",
        factory=ClusterOperatorConfig,
    )
    kueue: ClusterOperatorConfig = setting(
        "kueue",
        "Kueue (Helm): queues and all-or-nothing admission of every job, on system nodes. Off only where "
        "the cluster runs Kueue 0.19 with the PyTorchJob integration on.",
        factory=ClusterOperatorConfig,
    )
    cluster_autoscaler: HelmOperatorConfig = setting(
        "clusterAutoscaler",
        "Kubernetes cluster autoscaler (Helm): scales GPU groups from minNodes per job, on system nodes.",
        factory=HelmOperatorConfig,
    )
    chart_repository: str | None = setting(
        "chartRepository",
        "Where every chart comes from instead of its upstream repository, each under its own chart name and "
        "version: an OCI registry (oci://<host>/<path>, e.g. charts mirrored into ECR) or a Helm repository "
        "(https://...), for clusters that reach no public chart repository.",
        None,
    )
    manifest_mirror: str | None = setting(
        "manifestMirror",
        "A folder on the machine that runs Pulumi holding the GitHub files the stack applies itself, under "
        "the paths raw.githubusercontent.com serves them (<owner>/<repo>/<commit>/<path>): the training "
        "operator's kustomize overlay and base (kubeflow/trainer/<commit>/manifests/) and KubeRay's CRDs "
        "(ray-project/kuberay/<commit>/helm-chart/kuberay-operator/crds/), for a runner that reaches no GitHub; "
        "a relative path is from the project's folder. docs/operators.md says how to fill it.",
        None,
    )

    def on_any_cluster(self) -> dict[str, ClusterOperatorConfig | TrainingOperatorConfig]:
        """The operators a cluster may already run, by config key."""
        return {
            "trainingOperator": self.training_operator,
            "trainer": self.trainer,
            # Its chart's subchart: run whenever Trainer is, installed or reused on its own.
            "jobset": ClusterOperatorConfig(enabled=self.trainer.enabled, mode=self.trainer.jobset_mode),
            "kuberay": self.kuberay,
            "kueue": self.kueue,
            "nvidiaDevicePlugin": self.nvidia_device_plugin,
            "efaDevicePlugin": self.efa_device_plugin,
        }

    def runs(self, job_kind: str) -> tuple[str, bool]:
        """The operator that runs a job kind, by its config key, and whether it is installed."""
        key = KINDS[job_kind].operator
        return key, self.on_any_cluster()[key].enabled


def check_operators(o: OperatorsConfig, r: Reader) -> None:
    k = f"{PROJECT}:operators"
    if o.chart_repository is not None and not _CHART_REPOSITORY.fullmatch(o.chart_repository):
        r.problem(
            f"{k}.chartRepository",
            o.chart_repository,
            "not a chart repository Helm can read",
            "oci://<host>/<path> (an OCI registry) or https://<host>/<path> (a Helm repository; http:// on a "
            "private network)",
        )
    if o.manifest_mirror is not None and "://" in o.manifest_mirror:
        r.problem(
            f"{k}.manifestMirror",
            o.manifest_mirror,
            "a URL: kustomize reads an overlay from a folder or from git, never from a web server",
            "a folder on the machine that runs Pulumi (an absolute path, or relative to the project's folder)",
        )
    if o.training_operator.ref is not None and not _COMMIT.fullmatch(o.training_operator.ref):
        r.problem(
            f"{k}.trainingOperator.ref",
            o.training_operator.ref,
            "not a full commit SHA (a tag or branch can move)",
            "40 lowercase hex digits",
        )
    for key, op in o.on_any_cluster().items():
        if op.mode not in MODES:
            field = "trainer.jobsetMode" if key == "jobset" else f"{key}.mode"
            r.problem(f"{k}.{field}", op.mode, "not a mode", ", ".join(MODES))
    for key, op in (
        ("nvidiaDevicePlugin", o.nvidia_device_plugin),
        ("efaDevicePlugin", o.efa_device_plugin),
        ("trainer", o.trainer),
        ("kuberay", o.kuberay),
        ("kueue", o.kueue),
        ("clusterAutoscaler", o.cluster_autoscaler),
    ):
        if op.version is not None and not _CHART_VERSION.fullmatch(op.version):
            r.problem(
                f"{k}.{key}.version", op.version, "not a chart version", "an exact version such as 1.7.0"
            )
    version = o.kuberay.version
    if version is not None and _CHART_VERSION.fullmatch(version):
        major, minor = (int(n) for n in version.removeprefix("v").split(".")[:2])
        if (major, minor) < (1, 7):
            r.problem(
                f"{k}.kuberay.version",
                version,
                "the stack applies the CRDs of KubeRay 1.7 (RayCronJob among them); older charts lack them",
                "1.7.0 or later",
            )
        elif version.removeprefix("v") not in KUBERAY_CRD_COMMITS:
            r.problem(
                f"{k}.kuberay.version",
                version,
                "the stack applies the chart's CRDs from the kuberay commit its tag names, and knows none "
                "for this version (domain/operators.py KUBERAY_CRD_COMMITS)",
                ", ".join(KUBERAY_CRD_COMMITS),
            )


def check_manifest_mirror(o: OperatorsConfig, hyperpod: bool, r: Reader) -> None:
    """Each file the stack would read from `operators.manifestMirror` is there, before anything is
    registered: the training operator's overlay (with the base it names) and KubeRay's CRDs, for the
    operators the stack may install (enabled, mode not reuse)."""
    mirror = o.manifest_mirror
    if mirror is None or "://" in mirror:
        return
    wanted: list[str] = []
    may_install = {key: op.enabled and op.mode != "reuse" for key, op in o.on_any_cluster().items()}
    if may_install["trainingOperator"] and (
        o.training_operator.ref is None or _COMMIT.fullmatch(o.training_operator.ref)
    ):
        overlay = training_operator_location(hyperpod, o.training_operator.ref, mirror)
        wanted += [
            f"{overlay}/kustomization.yaml",
            posixpath.normpath(f"{overlay}/../../base/kustomization.yaml"),
        ]
    version = o.kuberay.version or RELEASES["kuberay"].version
    if may_install["kuberay"] and version.removeprefix("v") in KUBERAY_CRD_COMMITS:
        wanted += kuberay_crd_files(version, mirror)
    missing = [f for f in wanted if not Path(f).is_file()]
    if not Path(mirror).is_dir() or missing:
        r.problem(
            f"{PROJECT}:operators.manifestMirror",
            mirror,
            "not a folder" if not Path(mirror).is_dir() else f"lacks {', '.join(missing)}",
            "a folder holding each file at <owner>/<repo>/<commit>/<path>, as raw.githubusercontent.com "
            "serves it (docs/operators.md)",
        )
