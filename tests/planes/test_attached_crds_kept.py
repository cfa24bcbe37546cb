"""On a cluster the stack did not create, the CRDs its Helm releases install outlive the releases.

Kueue 0.19.2 and Trainer 2.3.0 ship their CRDs as chart templates, so `helm uninstall` (what a
`pulumi destroy`, or turning the operator off, runs: pulumi-kubernetes helm_release.go Delete) would
delete them, and with them every ClusterQueue, Workload, TrainJob and runtime in the cluster, other
stacks' included. Helm keeps what its stored manifest marks `helm.sh/resource-policy: keep` (helm
v3.18 pkg/action/uninstall.go filterManifestsToKeep); the stored manifest is the post-renderer's output
(pkg/action/action.go renderResources). So each such release runs through tools/helm-keep-crds, here
with the real helm on the charts of ../shared/charts and the values the plan passes."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.charts import documents, helm
from support.paths import ROOT, shared_dir
from support.plans import EXISTING_CLUSTER, plan

from components.operators import KEEP_CRDS
from domain.operators import RELEASES

RELEASE = "kubernetes:helm.sh/v3:Release"
POLICY = "helm.sh/resource-policy"


@pytest.fixture(scope="module")
def attached():
    return plan("existing", facts=EXISTING_CLUSTER)


def rendered(reg, post_render: bool) -> list[dict]:
    """`helm template` of the release's chart with the plan's values, and (`post_render`) its output
    through the post-renderer as Helm v3 runs one (helm v3.18 pkg/postrender/exec.go: the rendered
    manifests on stdin, what to install on stdout), from the project's directory. The helm here is
    v4, whose `--post-renderer` takes plugins only; the provider embeds Helm v3.18.6."""
    chart = next(c for c in RELEASES.values() if c.release == reg.inputs["name"])
    folder = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"
    argv = [str(helm()), "template", chart.release, str(folder), "--namespace", reg.inputs["namespace"]]
    text = run([*argv, "--values", "-"], json.dumps(reg.inputs.get("values") or {}))
    return documents(run([KEEP_CRDS], text) if post_render else text)


def run(argv: list[str], stdin: str) -> str:
    return subprocess.run(
        argv, input=stdin, cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout


def without_policy(obj: dict) -> dict:
    obj = json.loads(json.dumps(obj))
    annotations = obj["metadata"].get("annotations") or {}
    annotations.pop(POLICY, None)
    if not annotations:
        obj["metadata"].pop("annotations", None)
    return obj


def test_every_release_on_an_attached_cluster_keeps_its_crds_and_none_on_the_stacks_own(attached):
    releases = attached.by_type(RELEASE)
    assert {r.inputs["name"] for r in releases} >= {"kueue", "kubeflow-trainer"}
    assert {r.inputs["name"]: r.inputs.get("postrender") for r in releases} == {
        r.inputs["name"]: KEEP_CRDS for r in releases
    }
    # On its own cluster, destroying the stack destroys the cluster: nothing to keep, nothing changed.
    assert not [r for r in plan("dev").by_type(RELEASE) if r.inputs.get("postrender")]


def test_the_post_renderer_is_an_executable_of_the_repository():
    path = ROOT / KEEP_CRDS
    assert KEEP_CRDS.startswith("./") and path.is_file() and os.access(path, os.X_OK)
    mode = subprocess.run(
        ["git", "ls-files", "--stage", KEEP_CRDS.removeprefix("./")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert mode == "100755"  # a fresh clone can run it


@pytest.mark.parametrize("release", ["kueue", "kubeflow-trainer"])
def test_each_crd_the_chart_renders_is_kept_and_nothing_else_changes(attached, release):
    (reg,) = [r for r in attached.by_type(RELEASE) if r.inputs["name"] == release]
    plain, kept = rendered(reg, post_render=False), rendered(reg, post_render=True)
    crds = [o for o in kept if o["kind"] == "CustomResourceDefinition"]
    assert len(crds) >= 3, release  # Kueue's 10, Trainer's 3
    assert all(o["metadata"]["annotations"][POLICY] == "keep" for o in crds)
    assert [without_policy(o) for o in kept] == plain


CASES = {
    "no annotations": (
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: a.x.io\nspec: {}\n",
        {"helm.sh/resource-policy": "keep"},
    ),
    "annotations of its own": (
        "kind: CustomResourceDefinition\nmetadata:\n  labels:\n    app: x\n  annotations:\n"
        "    controller-gen.kubebuilder.io/version: v0.20.1\n  name: b.x.io\n",
        {"controller-gen.kubebuilder.io/version": "v0.20.1", "helm.sh/resource-policy": "keep"},
    ),
    "empty annotations": (
        "kind: CustomResourceDefinition\nmetadata:\n  annotations: {}\n  name: c.x.io\n",
        {"helm.sh/resource-policy": "keep"},
    ),
    "already kept": (
        "kind: CustomResourceDefinition\nmetadata:\n  annotations:\n    helm.sh/resource-policy: keep\n  name: d.x.io\n",
        {"helm.sh/resource-policy": "keep"},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_the_post_renderer_on_each_shape_of_metadata(case):
    text, annotations = CASES[case]
    other = "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    a: b\n"
    done = subprocess.run(
        [str(ROOT / KEEP_CRDS)], input=text + other, capture_output=True, text=True, check=True
    )
    crd, config_map = documents(done.stdout)
    assert crd["metadata"]["annotations"] == annotations
    assert config_map == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "annotations": {"a": "b"}},
    }
    assert done.stdout.endswith(other)
