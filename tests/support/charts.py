"""`helm template` of the upstream charts in ../shared/charts with the values a plan passes, and
YAML read by libyaml (PyYAML's C loader: the CRDs and rendered charts run to megabytes, which the
pure-Python loader takes seconds over)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from domain.operators import RELEASES
from offline.nodes import helm_binary, template_text
from support.paths import ROOT, missing, shared_dir

RELEASE = "kubernetes:helm.sh/v3:Release"


def helm() -> Path:
    path = Path(os.environ.get("TRAINSTACK_HELM") or ROOT / ".tools" / "helm")
    if not path.is_file():
        missing(f"no helm at {path}: `make .tools/helm` fetches it (or set TRAINSTACK_HELM)")
    return path


def run_helm(*args: str, timeout: float = 300) -> str:
    """The real helm (offline.nodes.helm_binary) with `args`: its output, or an error with its own."""
    done = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: {done.stderr}")
    return done.stdout


def documents(text: str) -> list[Any]:
    """Every non-empty document of a YAML stream."""
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d]


def load(path: Path) -> Any:
    """One YAML file."""
    return yaml.load(path.read_text(), Loader=yaml.CSafeLoader)


def helm_template(
    chart: Path, release: str, namespace: str, values: dict | None = None, crds: bool = False
) -> list[dict]:
    """The chart's objects as `helm template` renders them (with its crds/ folders' CRDs: `crds`):
    rendered once per session for the same arguments, fresh objects for each caller."""
    values_json = json.dumps(values or {}, sort_keys=True)
    return documents(template_text(str(helm()), str(chart), release, namespace, values_json, crds))


def render(run, release: str) -> list[dict]:
    """`helm template` of the chart the plan installs as `release`, with the plan's values, as Helm
    would install it (CRDs included unless the release skips them)."""
    (reg,) = [r for r in run.by_type(RELEASE) if r.inputs["name"] == release]
    chart = next(c for c in RELEASES.values() if c.release == release)
    assert reg.inputs["version"] == chart.version
    chart_dir = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"
    return helm_template(
        chart_dir,
        release,
        reg.inputs["namespace"],
        reg.inputs.get("values"),
        crds=not reg.inputs.get("skipCrds"),
    )


def pod_spec(objects: list[dict], kind: str, name: str | None = None) -> dict:
    (workload,) = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    return workload["spec"]["template"]["spec"]
