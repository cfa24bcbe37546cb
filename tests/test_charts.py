"""The operators' Helm charts rendered for real (`helm template`, from ../shared/charts) with the
values the stack passes: a misspelt or misplaced values key is silently ignored by Helm, so what
counts is what the rendered objects say."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, shared_dir

from components.operators import RELEASES
from conventions import EFA_LABEL, GPU_PRESENT_LABEL, GPU_TOLERATION, SYSTEM_NODE_LABEL

RELEASE = "kubernetes:helm.sh/v3:Release"


def helm() -> Path:
    path = Path(os.environ.get("TRAINSTACK_HELM") or ROOT / ".tools" / "helm")
    if not path.is_file():
        pytest.skip(f"no helm at {path}: `make .tools/helm` fetches it (or set TRAINSTACK_HELM)")
    return path


def render(run, release: str, tmp_path: Path) -> list[dict]:
    """`helm template` of the chart the plan installs as `release`, with the plan's values, as Helm
    would install it (CRDs included unless the release skips them)."""
    (reg,) = [r for r in run.by_type(RELEASE) if r.inputs["name"] == release]
    chart = next(c for c in RELEASES.values() if c.release == release)
    assert reg.inputs["version"] == chart.version
    chart_dir = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"
    values = tmp_path / f"{release}.yaml"
    values.write_text(yaml.safe_dump(reg.inputs.get("values") or {}))
    argv = [
        str(helm()),
        "template",
        release,
        str(chart_dir),
        "-f",
        str(values),
        "--namespace",
        reg.inputs["namespace"],
    ]
    if not reg.inputs.get("skipCrds"):
        argv.append("--include-crds")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def pod_spec(objects: list[dict], kind: str, name: str | None = None) -> dict:
    (workload,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return workload["spec"]["template"]["spec"]


def test_nvidia_device_plugin_runs_on_gpu_nodes_only(prod_plan, tmp_path):
    objects = render(prod_plan, "nvidia-device-plugin", tmp_path)
    # The plugin, and (0.20) its MPS control daemon, which runs only where MPS is configured.
    daemons = {o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet"}
    assert daemons == {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"}
    gpu_nodes = [{"matchExpressions": [{"key": GPU_PRESENT_LABEL, "operator": "In", "values": ["true"]}]}]
    for name in daemons:
        spec = pod_spec(objects, "DaemonSet", name)
        assert GPU_TOLERATION in spec["tolerations"]
        affinity = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert affinity["nodeSelectorTerms"] == gpu_nodes


def test_efa_device_plugin_runs_on_efa_gpu_nodes(prod_plan, tmp_path):
    spec = pod_spec(render(prod_plan, "aws-efa-k8s-device-plugin", tmp_path), "DaemonSet")
    assert spec["nodeSelector"] == {EFA_LABEL: "true"}
    assert GPU_TOLERATION in spec["tolerations"]


def test_kuberay_runs_on_system_nodes_and_leaves_its_crds_to_the_stack(dev_plan, tmp_path):
    objects = render(dev_plan, "kuberay-operator", tmp_path)
    assert pod_spec(objects, "Deployment")["nodeSelector"] == SYSTEM_NODE_LABEL
    # The stack applies the CRDs from the same tag (operators-kuberay-crds): Helm installs none.
    assert not [o for o in objects if o["kind"] == "CustomResourceDefinition"]
