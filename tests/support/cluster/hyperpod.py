"""A SageMaker HyperPod cluster as the harness makes one (../shared/reference/hyperpod-eks.md): the
HyperPod dependencies chart installed with a real `helm install`, release `hyperpod-dependencies` in
kube-system with the umbrella's own values, as HyperPod installs it before anyone deploys.

The umbrella (aws/sagemaker-hyperpod-cli helm_chart/HyperPodHelmChart, ../shared/charts) names three
remote dependencies that ../shared/charts does not hold. It is copied to a temporary folder, never
into the repository, with its dependencies reduced to what is there: every local subchart (those
enabled by default render, as on HyperPod: the training operators, the MPI operator, the health
monitoring agent, the Neuron device plugin, HyperPod's RBAC), and in place of the remote ones:
  - nvidia-device-plugin 0.16.1 -> nvidia-device-plugin-0.20.0 (the nearest chart here);
  - aws-efa-k8s-device-plugin 0.5.20 -> aws-efa-k8s-device-plugin-v0.5.30 (the nearest chart here);
  - cert-manager v1.18.2 -> left out (off by default: `cert-manager.enabled: false`).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from offline.nodes import charts_dir
from support.charts import documents, load, run_helm
from support.cluster.objects import Objects

CHART = "sagemaker-hyperpod-dependencies-0.1.0"
RELEASE, NAMESPACE = "hyperpod-dependencies", "kube-system"
# Remote dependency -> the nearest chart of ../shared/charts that stands in for it, and its version.
SUBSTITUTES = {
    "nvidia-device-plugin": ("nvidia-device-plugin-0.20.0", "0.20.0"),
    "aws-efa-k8s-device-plugin": ("aws-efa-k8s-device-plugin-v0.5.30", "v0.5.30"),
}
LEFT_OUT = {"cert-manager"}
# The training-operators subchart's Deployment, whose image (kubeflow/training-operator:v1-855e096) is
# a v1.7 build: the harness runs training-operator v1.7.0 (tools/cluster/training-operator-hyperpod)
# with the chart's arguments, every scheme of its list included.
TRAINING_OPERATOR = ("kubeflow", "hyperpod-dependencies-training-operators")
TRAINING_OPERATOR_PROGRAM = "training-operator-v1.7"

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name


def umbrella(directory: Path) -> Path:
    """The dependencies chart with its dependencies reduced to what is here (module docstring)."""
    chart = directory / "hyperpod-dependencies"
    shutil.copytree(charts_dir() / CHART, chart)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    values = yaml.safe_load((chart / "values.yaml").read_text())
    kept = []
    for dep in meta["dependencies"]:
        name = dep["name"]
        if name in LEFT_OUT:
            assert values[name]["enabled"] is False, f"{name} is on by default: it cannot be left out"
            continue
        if not dep["repository"].startswith("file://"):
            folder, version = SUBSTITUTES[name]
            shutil.copytree(charts_dir() / folder, chart / "charts" / name)
            dep |= {"version": version, "repository": f"file://charts/{name}"}
        kept.append(dep)
    meta["dependencies"] = kept
    (chart / "Chart.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    return chart


@dataclass
class HyperPodDependencies:
    """The release as installed: every object it made (its manifest, and the CRDs of its crds/)."""

    keys: list[Key]

    def snapshot(self, objects: Objects) -> dict[Key, tuple[str, str] | None]:
        """Each object's (uid, resourceVersion) now; None where it is gone."""
        found = {}
        for key in self.keys:
            api_version, kind, namespace, name = key
            live = objects.get(api_version, kind, name, namespace or None)
            found[key] = (live["metadata"]["uid"], live["metadata"]["resourceVersion"]) if live else None
        return found


def install(kubeconfig: Path, directory: Path) -> HyperPodDependencies:
    """`helm install` of the umbrella, as HyperPod's setup runs it; its objects as Helm reports them."""
    chart = umbrella(directory)
    at = ("--namespace", NAMESPACE, "--kubeconfig", str(kubeconfig))
    run_helm("install", RELEASE, str(chart), *at)
    manifest = run_helm("get", "manifest", RELEASE, *at)
    # CRDs of crds/ folders are installed once and are not part of the release's manifest.
    crds = [load(p) for p in sorted(chart.glob("charts/*/crds/*.yaml"))]
    objs = documents(manifest) + crds
    keys = []
    for o in objs:
        cluster_scoped = o["kind"] in (
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
        )
        namespace = "" if cluster_scoped else o["metadata"].get("namespace") or NAMESPACE
        keys.append((o["apiVersion"], o["kind"], namespace, o["metadata"]["name"]))
    return HyperPodDependencies(keys)
