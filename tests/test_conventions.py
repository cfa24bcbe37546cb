"""The names the stack writes onto the cluster are the names `trainstack` reads back: one module
(`conventions.py`) holds them, the stack and the command both import it, and the command's package
carries it."""

from __future__ import annotations

import ast
import tomllib

from support.paths import ROOT
from support.plans import plan

import conventions
from offline.plan import manifest_of


def first_party_imports(folder: str) -> set[str]:
    """Top-level project modules the files of `folder` import."""
    local = {p.stem for p in ROOT.glob("*.py")} | {p.name for p in ROOT.iterdir() if p.is_dir()}
    found = set()
    for path in (ROOT / folder).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
    return found & local


def test_the_command_package_carries_every_project_module_it_imports():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packaged = set(setup["packages"]) | set(setup.get("py-modules", []))
    assert first_party_imports("cli") == {"cli", "conventions", "stack_outputs"}
    assert first_party_imports("cli") <= packaged


def test_the_command_reads_the_labels_the_stack_writes():
    run = plan("dev", jobs=[{"name": "llm", "kind": "PyTorchJob", "nodeGroup": "gpu"}])
    (job,) = [manifest_of(r)[1] for r in run.resources if r.name == "job-llm" and r.custom]
    pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    assert pod["metadata"]["labels"][conventions.JOB_LABEL] == "llm"
    assert pod["spec"]["nodeSelector"] == {**conventions.GPU_NODE_LABEL, conventions.NODE_GROUP_LABEL: "gpu"}
    assert job["metadata"]["labels"][conventions.QUEUE_LABEL] == "gpu"
    assert pod["spec"]["serviceAccountName"] == conventions.job_service_account("llm")
    assert job["metadata"]["namespace"] == conventions.TRAINING_NAMESPACE
