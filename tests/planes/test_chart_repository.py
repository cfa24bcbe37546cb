"""`operators.chartRepository`: every chart the stack installs comes from one mirror, under its upstream
chart name and version, for a cluster that reaches no public chart repository (charts copied into
ECR, an Artifactory, or the tier's local repository). Helm names an OCI chart by its full reference
and a repository chart by name beside the repository's URL (pulumi-kubernetes helm.v3.Release:
`chart`, `repositoryOpts.repo`)."""

from __future__ import annotations

import pytest
from support.config_rules import problems
from support.plans import plan

from domain.operators import RELEASES

RELEASE = "kubernetes:helm.sh/v3:Release"
ECR = "oci://123456789012.dkr.ecr.us-east-1.amazonaws.com/charts"


def charts(run) -> dict[str, tuple[str, str | None, str]]:
    return {
        r.inputs["name"]: (
            r.inputs["chart"],
            (r.inputs.get("repositoryOpts") or {}).get("repo"),
            r.inputs["version"],
        )
        for r in run.by_type(RELEASE)
    }


def test_an_oci_mirror_serves_every_chart_by_its_full_reference():
    found = charts(plan("prod", operators={"chartRepository": f"{ECR}/"}))
    assert {
        "kueue",
        "kubeflow-trainer",
        "kuberay-operator",
        "nvidia-device-plugin",
        "cluster-autoscaler",
    } <= set(found)
    for chart in RELEASES.values():
        if chart.release in found:
            assert found[chart.release] == (f"{ECR}/{chart.chart}", None, chart.version)


def test_a_helm_repository_mirror_serves_every_chart_by_name():
    mirror = "https://charts.example.com/trainstack"
    found = charts(plan("dev", operators={"chartRepository": mirror}))
    for chart in RELEASES.values():
        if chart.release in found:
            assert found[chart.release] == (chart.chart, mirror, chart.version)


def test_without_a_mirror_each_chart_comes_from_its_upstream_repository():
    found = charts(plan("dev"))
    assert found["kueue"] == ("oci://registry.k8s.io/kueue/charts/kueue", None, "0.19.2")
    assert found["kuberay-operator"] == (
        "kuberay-operator",
        "https://ray-project.github.io/kuberay-helm/",
        "1.7.0",
    )


@pytest.mark.parametrize("value", ["registry.example.com/charts", "s3://bucket/charts", "oci://"])
def test_a_mirror_helm_cannot_read_is_refused_with_its_key(value):
    (found,) = [p for p in problems(operators={"chartRepository": value}) if "chartRepository" in p]
    assert found.startswith(
        f'trainstack:operators.chartRepository = "{value}": not a chart repository Helm can read'
    )
