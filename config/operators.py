"""Operators plane config: which operators the stack installs, at which versions, with which values."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from config.names import PROJECT
from config.schema import Reader, setting

_COMMIT = re.compile(r"[0-9a-f]{40}")
_CHART_VERSION = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?")


@dataclass(frozen=True)
class HelmOperatorConfig:
    enabled: bool = setting("enabled", "Install it (off where the cluster already runs one).", True)
    version: str | None = setting("version", "Chart version (default: the one trainstack pins).", None)
    values: dict[str, Any] = setting("values", "Chart values merged over trainstack's.", factory=dict)


@dataclass(frozen=True)
class TrainingOperatorConfig:
    enabled: bool = setting("enabled", "Install it (off where the cluster already runs one).", True)
    ref: str | None = setting(
        "ref", "Full commit SHA of kubeflow/trainer to install from (default: v1.9.4's).", None
    )


@dataclass(frozen=True)
class OperatorsConfig:
    nvidia_device_plugin: HelmOperatorConfig = setting(
        "nvidiaDevicePlugin", "NVIDIA device plugin (Helm), on GPU nodes.", factory=HelmOperatorConfig
    )
    efa_device_plugin: HelmOperatorConfig = setting(
        "efaDevicePlugin",
        "EFA device plugin (Helm), on EFA nodes; only with an EFA group.",
        factory=HelmOperatorConfig,
    )
    training_operator: TrainingOperatorConfig = setting(
        "trainingOperator",
        "Kubeflow training operator v1 (PyTorchJob), on system nodes.",
        factory=TrainingOperatorConfig,
    )
    kuberay: HelmOperatorConfig = setting(
        "kuberay", "KubeRay operator (Helm; RayJob, RayCluster), on system nodes.", factory=HelmOperatorConfig
    )
    kueue: HelmOperatorConfig = setting(
        "kueue",
        "Kueue (Helm): queues and all-or-nothing admission of every job, on system nodes. Off only where "
        "the cluster runs Kueue 0.19 with the PyTorchJob integration on.",
        factory=HelmOperatorConfig,
    )
    cluster_autoscaler: HelmOperatorConfig = setting(
        "clusterAutoscaler",
        "Kubernetes cluster autoscaler (Helm): scales GPU groups from minNodes per job, on system nodes.",
        factory=HelmOperatorConfig,
    )

    def runs(self, job_kind: str) -> tuple[str, bool]:
        """The operator that runs a job kind, by its config key, and whether it is installed."""
        if job_kind == "PyTorchJob":
            return "trainingOperator", self.training_operator.enabled
        return "kuberay", self.kuberay.enabled


def check_operators(o: OperatorsConfig, r: Reader) -> None:
    k = f"{PROJECT}:operators"
    if o.training_operator.ref is not None and not _COMMIT.fullmatch(o.training_operator.ref):
        r.problem(
            f"{k}.trainingOperator.ref",
            o.training_operator.ref,
            "not a full commit SHA (a tag or branch can move)",
            "40 lowercase hex digits",
        )
    for key, op in (
        ("nvidiaDevicePlugin", o.nvidia_device_plugin),
        ("efaDevicePlugin", o.efa_device_plugin),
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
