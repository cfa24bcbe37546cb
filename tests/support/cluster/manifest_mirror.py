"""`operators.manifestMirror` as a user fills it (docs/operators.md), from what this machine holds at the
commits the stack pins: the training operator's `manifests/` from its Go module (the module's zip is
the tree of the tag whose commit the module's origin names, checked against TRAINING_OPERATOR), and
KubeRay's CRDs from its chart in ../shared (the chart's crds/, byte for byte the files at the commit
KUBERAY_CRD_COMMITS names)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from domain.operators import RELEASES, kuberay_crd_files
from domain.operators import TRAINING_OPERATOR as SOURCE
from offline.nodes import charts_dir
from support.cluster.binaries import TOOLS, module_dir

MODULE = "github.com/kubeflow/training-operator"


def module_commit(folder: str, module: str) -> str:
    """The commit the module's version was cut from, as the proxy's origin record in its .info names it."""
    done = subprocess.run(
        ["go", "mod", "download", "-json", module],
        cwd=TOOLS / folder,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    info = json.loads(Path(json.loads(done.stdout)["Info"]).read_text())
    return info["Origin"]["Hash"]


def filled_mirror(directory: Path) -> Path:
    commit = module_commit("training-operator", MODULE)
    assert commit == SOURCE.commit, f"{MODULE} is built at {commit}, the stack pins {SOURCE.commit}"
    trainer = directory / SOURCE.slug / SOURCE.commit
    trainer.mkdir(parents=True)
    shutil.copytree(module_dir("training-operator", MODULE) / "manifests", trainer / "manifests")
    for path in trainer.rglob("*"):  # the module cache's files are read-only
        path.chmod(0o755 if path.is_dir() else 0o644)
    chart = RELEASES["kuberay"]
    crds = charts_dir() / f"{chart.chart}-{chart.version}" / "crds"
    for file in kuberay_crd_files(chart.version, str(directory)):  # where the stack reads them
        target = Path(file)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(crds / target.name, target)
    return directory
