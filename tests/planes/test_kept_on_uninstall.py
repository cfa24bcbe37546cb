"""What `helm uninstall` must leave of the stack's Helm releases: their CRDs and aggregated ClusterRoles.

Kueue 0.19.2 and Trainer 2.3.0 ship their CRDs as chart templates, so `helm uninstall` (what a
`pulumi destroy`, or turning the operator off, runs: pulumi-kubernetes helm_release.go Delete) would
delete them, and with them every ClusterQueue, Workload, TrainJob and runtime in the cluster, other
stacks' included. And Kueue's aggregated ClusterRoles come back after the uninstall deletes them
(kube-controller-manager's aggregation controller applies them from its cache), so the uninstall's
wait for them runs to its timeout. Helm keeps what its stored manifest marks
`helm.sh/resource-policy: keep` (helm v3.18 pkg/action/uninstall.go filterManifestsToKeep); the stored
manifest is the post-renderer's output (pkg/action/action.go renderResources). So every release runs
through tools/helm-keep-on-uninstall, here with the real helm on the charts of ../shared/charts and
the values the plan passes; tests/cluster/test_installed_operators.py runs it on the real engine."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support.charts import documents, helm
from support.paths import ROOT, shared_dir
from support.plans import EXISTING_CLUSTER, WITH_TRAINJOB, plan

from components.operators import KEEP_ON_UNINSTALL
from domain.operators import RELEASES

RELEASE = "kubernetes:helm.sh/v3:Release"
POLICY = "helm.sh/resource-policy"


@pytest.fixture(scope="module")
def attached():
    return plan("existing", jobs=WITH_TRAINJOB, facts=EXISTING_CLUSTER)


def rendered(reg, post_render: bool) -> list[dict]:
    """`helm template` of the release's chart with the plan's values, and (`post_render`) its output
    through the post-renderer as Helm v3 runs one (helm v3.18 pkg/postrender/exec.go: the rendered
    manifests on stdin, what to install on stdout), from the project's directory. The helm here is
    v4, whose `--post-renderer` takes plugins only; the provider embeds Helm v3.18.6."""
    chart = next(c for c in RELEASES.values() if c.release == reg.inputs["name"])
    folder = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"
    argv = [str(helm()), "template", chart.release, str(folder), "--namespace", reg.inputs["namespace"]]
    text = run([*argv, "--values", "-"], json.dumps(reg.inputs.get("values") or {}))
    return documents(run([KEEP_ON_UNINSTALL], text) if post_render else text)


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


def test_every_release_runs_through_the_post_renderer(attached):
    for run in (attached, plan("prod")):
        releases = run.by_type(RELEASE)
        assert {r.inputs["name"] for r in releases} >= {"kueue", "kubeflow-trainer"}
        assert {r.inputs["name"]: r.inputs.get("postrender") for r in releases} == {
            r.inputs["name"]: KEEP_ON_UNINSTALL for r in releases
        }


def test_the_post_renderer_is_an_executable_of_the_repository():
    path = ROOT / KEEP_ON_UNINSTALL
    assert KEEP_ON_UNINSTALL.startswith("./") and path.is_file() and os.access(path, os.X_OK)
    mode = subprocess.run(
        ["git", "ls-files", "--stage", KEEP_ON_UNINSTALL.removeprefix("./")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[0]
    assert mode == "100755"  # a fresh clone can run it


@pytest.mark.parametrize(
    ("release", "crds", "aggregated"),
    [("kueue", 11, {"kueue-batch-admin-role", "kueue-batch-user-role"}), ("kubeflow-trainer", 3, set())],
)
def test_each_crd_and_aggregated_role_the_chart_renders_is_kept_and_nothing_else_changes(
    attached, release, crds, aggregated
):
    (reg,) = [r for r in attached.by_type(RELEASE) if r.inputs["name"] == release]
    plain, kept = rendered(reg, post_render=False), rendered(reg, post_render=True)
    marked = {
        (o["kind"], o["metadata"]["name"])
        for o in kept
        if (o["metadata"].get("annotations") or {}).get(POLICY) == "keep"
    }
    found = {(o["kind"], o["metadata"]["name"]) for o in plain if o["kind"] == "CustomResourceDefinition"}
    assert len(found) == crds
    roles = {
        ("ClusterRole", o["metadata"]["name"])
        for o in plain
        if o["kind"] == "ClusterRole" and "aggregationRule" in o
    }
    assert roles == {("ClusterRole", name) for name in aggregated}
    assert marked == found | roles
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
    "aggregated role": (
        "kind: ClusterRole\nmetadata:\n  labels:\n    app: x\n  name: batch-admin\naggregationRule:\n"
        "  clusterRoleSelectors:\n  - matchLabels:\n      x: 'true'\n",
        {"helm.sh/resource-policy": "keep"},
    ),
    "comments after metadata and kind": (
        "kind: CustomResourceDefinition  # a comment\nmetadata: # another\n  name: e.x.io\n",
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
        [str(ROOT / KEEP_ON_UNINSTALL)], input=text + other, capture_output=True, text=True, check=True
    )
    crd, config_map = documents(done.stdout)
    assert crd["metadata"]["annotations"] == annotations
    assert config_map == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "annotations": {"a": "b"}},
    }
    assert done.stdout.endswith(other)
