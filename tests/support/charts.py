"""`helm template` of the upstream charts in ../shared/charts with the values a plan passes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from domain.operators import RELEASES
from support.paths import ROOT, shared_dir

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
