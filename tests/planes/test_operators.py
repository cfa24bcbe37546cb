"""Cluster operators under the mock engine: what is installed where, pinned sources, values that
exist in the charts, placement, and dependency edges (system nodes only, never GPU nodes)."""

from __future__ import annotations

import re
from typing import Any

import pulumi
import pytest
import yaml
from support.paths import shared_dir
from support.plans import plan

from components.operators import training_operator_bundle
from config.schema import ConfigError
from domain.operators import RELEASES, TRAINING_OPERATOR
from offline.plan import manifest_of

RELEASE = "kubernetes:helm.sh/v3:Release"
DIRECTORY = "kubernetes:kustomize/v2:Directory"
NG = "eks:index:ManagedNodeGroup"


def releases(run) -> dict[str, Any]:
    return {r.inputs["name"]: r for r in run.by_type(RELEASE)}


def chart_dir(release: str) -> Any:
    chart = next(c for c in RELEASES.values() if c.release == release)
    return shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"


QUEUEING = {"kueue", "cluster-autoscaler"}


def test_dev_installs_gpu_plugin_kuberay_trainer_and_training_operator_but_no_efa_plugin(dev_plan):
    assert set(releases(dev_plan)) == {
        "nvidia-device-plugin",
        "kuberay-operator",
        "kubeflow-trainer",
        *QUEUEING,
    }
    assert len(dev_plan.by_type(DIRECTORY)) == 1


def test_prod_with_efa_adds_the_efa_plugin(prod_plan):
    assert set(releases(prod_plan)) == {
        "nvidia-device-plugin",
        "kuberay-operator",
        "kubeflow-trainer",
        "aws-efa-k8s-device-plugin",
        *QUEUEING,
    }


def test_every_operator_can_be_turned_off():
    off = {"enabled": False}
    run = plan(
        "prod",
        operators={
            "nvidiaDevicePlugin": off,
            "efaDevicePlugin": off,
            "kuberay": off,
            "trainingOperator": off,
            "trainer": off,
            "kueue": off,
            "clusterAutoscaler": off,
        },
        jobs=[],
    )
    assert run.by_type(RELEASE) == [] and run.by_type(DIRECTORY) == []
    assert run.outputs["operators"] == {"trainingOperator": None}
    # Without the autoscaler nothing scales the GPU groups: they keep every node, and no Pod
    # Identity or ProvisioningRequest check is made for it.
    assert run.one(NG, "gpu-p5").inputs["scalingConfig"] == {"minSize": 2, "desiredSize": 2, "maxSize": 2}
    assert not run.by_type("aws:autoscaling/tag:Tag")
    assert "cluster-autoscaler-role" not in {r.name for r in run.resources}
    assert not [r for r in run.resources if r.name.startswith("admissioncheck-")]


def test_releases_are_pinned_real_helm_releases(prod_plan):
    expected = {
        "nvidia-device-plugin": ("https://nvidia.github.io/k8s-device-plugin", "0.20.0", "kube-system"),
        "aws-efa-k8s-device-plugin": ("https://aws.github.io/eks-charts", "v0.5.30", "kube-system"),
        "kuberay-operator": ("https://ray-project.github.io/kuberay-helm/", "1.7.0", "kuberay-system"),
        "cluster-autoscaler": ("https://kubernetes.github.io/autoscaler", "9.59.0", "kube-system"),
    }
    for name, release in releases(prod_plan).items():
        i = release.inputs
        oci = {  # published only as OCI charts: named by their full reference
            "kueue": ("oci://registry.k8s.io/kueue/charts/kueue", "0.19.2", "kueue-system"),
            "kubeflow-trainer": (
                "oci://ghcr.io/kubeflow/charts/kubeflow-trainer",
                "2.3.0",
                "kubeflow-system",
            ),
        }
        if name in oci:
            assert (i["chart"], i["version"], i["namespace"]) == oci[name]
            assert "repositoryOpts" not in i
        else:
            assert (i["repositoryOpts"]["repo"], i["version"], i["namespace"]) == expected[name]
            assert i["chart"] == name
        assert i["atomic"] is True and i["cleanupOnFail"] is True and i["timeout"] == 600
        assert i["createNamespace"] is True


@pytest.mark.parametrize("key", sorted(RELEASES))
def test_pinned_versions_match_the_official_charts(key):
    chart = RELEASES[key]
    meta = yaml.safe_load((chart_dir(chart.release) / "Chart.yaml").read_text())
    assert (meta["name"], meta["version"]) == (chart.chart, chart.version)


def test_training_operator_is_the_upstream_overlay_at_a_full_commit(dev_plan):
    (directory,) = dev_plan.by_type(DIRECTORY)
    url = directory.inputs["directory"]
    assert url == (
        "https://github.com/kubeflow/trainer.git//manifests/overlays/standalone"
        "?ref=4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"
    )
    assert "/tree/" not in url  # GitHub's browser form fails in kustomize.v2
    assert TRAINING_OPERATOR.version == "v1.9.4"
    _, manifest = manifest_of(directory)
    assert (
        manifest["commit"] == TRAINING_OPERATOR.commit and manifest["path"] == "manifests/overlays/standalone"
    )


def test_versions_and_values_can_be_overridden():
    ref = "0" * 40
    run = plan(
        "dev",
        operators={
            # A version KUBERAY_CRD_COMMITS knows (the CRDs come from its commit), as written.
            "kuberay": {"version": "v1.7.0", "values": {"resources": {"limits": {"memory": "1Gi"}}}},
            "trainingOperator": {"ref": ref},
        },
    )
    kuberay = releases(run)["kuberay-operator"].inputs
    assert kuberay["version"] == "v1.7.0"
    # Merged over trainstack's own values, not in place of them.
    assert kuberay["values"] == {
        "nodeSelector": {"trainstack.dev/role": "system"},
        "resources": {"limits": {"memory": "1Gi"}},
    }
    assert run.one(DIRECTORY).inputs["directory"].endswith(f"?ref={ref}")


def node_labels(run) -> dict[str, dict[str, str]]:
    return {ng.name: ng.inputs.get("labels", {}) for ng in run.by_type(NG)}


def matches(term: dict, labels: dict[str, str]) -> bool:
    ops = {
        "In": lambda e: labels.get(e["key"]) in e["values"],
        "Exists": lambda e: e["key"] in labels,
    }
    return all(ops[e["operator"]](e) for e in term["matchExpressions"])


def schedules_on(values: dict, labels: dict[str, str]) -> bool:
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return any(matches(t, labels) for t in terms["nodeSelectorTerms"])


def tolerates(tolerations: list[dict], taints: list[dict]) -> bool:
    effect = {
        "NO_SCHEDULE": "NoSchedule",
        "NO_EXECUTE": "NoExecute",
        "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    }
    return all(
        any(
            t["key"] == taint["key"] and t["operator"] == "Exists" and t["effect"] == effect[taint["effect"]]
            for t in tolerations
        )
        for taint in taints
    )


def test_nvidia_plugin_lands_on_every_gpu_node_group_and_nowhere_else(prod_plan):
    """The chart's default affinity needs NFD labels EKS nodes lack: it would schedule no pod."""
    values = releases(prod_plan)["nvidia-device-plugin"].inputs["values"]
    for ng in prod_plan.by_type(NG):
        gpu = "NVIDIA" in ng.inputs["amiType"]
        assert schedules_on(values, ng.inputs["labels"]) is gpu, ng.name
        if gpu:
            assert tolerates(values["tolerations"], ng.inputs["taints"])


def test_chart_default_affinity_would_miss_our_gpu_nodes_without_the_label(prod_plan):
    defaults = yaml.safe_load((chart_dir("nvidia-device-plugin") / "values.yaml").read_text())
    labels = dict(prod_plan.one(NG, "gpu-p5").inputs["labels"])
    assert schedules_on(defaults, labels)  # through nvidia.com/gpu.present=true
    del labels["nvidia.com/gpu.present"]
    assert not schedules_on(defaults, labels)


def test_efa_plugin_lands_only_on_efa_nodes_and_tolerates_the_gpu_taint(prod_plan):
    values = releases(prod_plan)["aws-efa-k8s-device-plugin"].inputs["values"]
    for ng in prod_plan.by_type(NG):
        labels = ng.inputs["labels"]
        on_it = all(labels.get(k) == v for k, v in values["nodeSelector"].items())
        assert on_it is ("vpc.amazonaws.com/efa.present" in labels), ng.name
    assert tolerates(values["tolerations"], prod_plan.one(NG, "gpu-p5").inputs["taints"])


def test_kuberay_and_training_operator_run_on_system_nodes(prod_plan):
    system_labels = prod_plan.one(NG, "eks-system").inputs["labels"]
    assert releases(prod_plan)["kuberay-operator"].inputs["values"]["nodeSelector"] == system_labels
    (directory,) = prod_plan.by_type(DIRECTORY)
    assert [t.__qualname__ for t in directory.transforms] == ["training_operator_bundle.<locals>.transform"]
    # The upstream Deployment as the overlay renders it, patched by the transform the program attached.
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "training-operator", "namespace": "kubeflow"},
        "spec": {"template": {"spec": {"containers": [{"name": "training-operator"}]}}},
    }
    args = pulumi.ResourceTransformArgs(
        custom=True,
        type_="kubernetes:apps/v1:Deployment",
        name="operators-training-operator:kubeflow/training-operator",
        props=deployment,
        opts=pulumi.ResourceOptions(),
    )
    (transform,) = directory.transforms
    patched = transform(args)
    assert patched.props["spec"]["template"]["spec"]["nodeSelector"] == system_labels
    assert deployment["spec"]["template"]["spec"].get("nodeSelector") is None  # not mutated
    other = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:v1:Service", name="x", props={}, opts=pulumi.ResourceOptions()
    )
    assert transform(other) is None
    # On a cluster the stack did not create, its described system nodes.
    assert training_operator_bundle({"pool": "cpu"})(args).props["spec"]["template"]["spec"][
        "nodeSelector"
    ] == {"pool": "cpu"}


def value_paths(values: Any, prefix: str = "") -> list[str]:
    if not isinstance(values, dict):
        return [prefix]
    return [p for k, v in values.items() for p in value_paths(v, f"{prefix}.{k}" if prefix else k)]


# Maps a chart renders key by key whatever the keys (the autoscaler's extraArgs become flags).
FREE_FORM = ("extraArgs.",)


def unknown_keys(values: dict, chart_values: dict) -> list[str]:
    """Keys set in `values` that the chart does not define. Below a chart value that is an empty
    map, a list or null, keys are the user's own (nodeSelector, tolerations)."""
    unknown = []
    for path in value_paths(values):
        if path.startswith(FREE_FORM):
            continue
        node: Any = chart_values
        for part in path.split("."):
            if not isinstance(node, dict) or not node:
                break  # free-form from here on
            if part not in node:
                unknown.append(path)
                break
            node = node[part]
    return unknown


def chart_values(release: str) -> dict:
    """The chart's values.yaml, each subchart's under its name (how Helm passes them down)."""
    found = yaml.safe_load((chart_dir(release) / "values.yaml").read_text())
    for sub in sorted((chart_dir(release) / "charts").glob("*/values.yaml")):
        found[sub.parent.name] = {**yaml.safe_load(sub.read_text()), **(found.get(sub.parent.name) or {})}
    return found


def test_every_values_key_exists_in_the_chart(prod_plan):
    """Helm ignores a misspelt values key silently; the chart's own values.yaml is the reference."""
    for name, release in releases(prod_plan).items():
        assert unknown_keys(release.inputs["values"], chart_values(name)) == [], name


def test_the_values_check_catches_a_misspelt_key():
    chart_values = yaml.safe_load((chart_dir("kuberay-operator") / "values.yaml").read_text())
    assert unknown_keys({"nodeSelecter": {"a": "b"}, "nodeSelector": {"x": "y"}}, chart_values) == [
        "nodeSelecter.a"
    ]


def test_operators_wait_for_system_nodes_and_never_for_gpu_nodes(prod_plan):
    system = prod_plan.one(NG, "eks-system").urn
    provider = prod_plan.one("pulumi:providers:kubernetes").urn
    gpu_groups = {ng.urn for ng in prod_plan.by_type(NG) if "NVIDIA" in ng.inputs["amiType"]}
    gpu_groups |= {r.urn for r in prod_plan.by_type("trainstack:compute:GpuNodeGroup")}
    for op in [*prod_plan.by_type(RELEASE), *prod_plan.by_type(DIRECTORY)]:
        assert system in op.dependencies and provider in op.dependencies, op.name
        assert not gpu_groups & set(op.dependencies), op.name


CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"


def test_kuberay_crds_follow_the_chart_version(dev_plan):
    """Helm never upgrades a chart's crds/: the stack applies them, from the commit the chart's
    tag names (ray-project/kuberay v1.7.0 is 59d663ae...), never from the tag, which can move."""
    from domain.operators import KUBERAY_CRDS

    crds = dev_plan.one(CONFIG_GROUP, "operators-kuberay-crds")
    release = releases(dev_plan)["kuberay-operator"]
    assert release.inputs["skipCrds"] is True
    assert crds.urn in release.dependencies
    files = crds.inputs["files"]
    commit = "59d663aeec13760646da3db9c1cf8cfe883e30b7"
    assert files == [
        f"https://raw.githubusercontent.com/ray-project/kuberay/{commit}/helm-chart/kuberay-operator/crds/ray.io_{n}.yaml"
        for n in KUBERAY_CRDS
    ]
    # The same files the pinned chart ships in crds/.
    assert sorted(f.rsplit("/", 1)[1] for f in files) == sorted(
        p.name for p in (chart_dir("kuberay-operator") / "crds").iterdir()
    )
    # A chart version whose commit the stack does not know is refused before anything is planned.
    with pytest.raises(ConfigError, match=r'operators\.kuberay\.version = "1\.7\.1": .* knows none'):
        plan("dev", operators={"kuberay": {"version": "1.7.1"}})
    off = plan("dev", operators={"kuberay": {"enabled": False}}, jobs=[])
    assert "operators-kuberay-crds" not in {r.name for r in off.by_type(CONFIG_GROUP)}


def test_every_fetched_manifest_is_named_by_commit(dev_plan):
    """CRDs and kustomize manifests come from a full commit SHA, never a tag or branch: a tag can
    be pushed again and would change what a second `pulumi up` applies."""
    from domain.operators import KUBERAY_CRD_COMMITS

    commit = re.compile(r"[0-9a-f]{40}")
    assert KUBERAY_CRD_COMMITS["1.7.0"] == "59d663aeec13760646da3db9c1cf8cfe883e30b7"  # tag v1.7.0
    assert all(commit.fullmatch(c) for c in KUBERAY_CRD_COMMITS.values())
    assert TRAINING_OPERATOR.commit == "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7"  # tag v1.9.4
    for url in dev_plan.one(CONFIG_GROUP, "operators-kuberay-crds").inputs["files"]:
        assert commit.fullmatch(url.split("/ray-project/kuberay/")[1].split("/")[0]), url
    ref = dev_plan.one(DIRECTORY).inputs["directory"].rsplit("?ref=", 1)[1]
    assert commit.fullmatch(ref)


def test_crds_are_applied_over_helms_field_manager():
    from components.operators import force_crd_apply

    crd = pulumi.ResourceTransformArgs(
        custom=True,
        type_="kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition",
        name="rayjobs",
        props={"metadata": {"name": "rayjobs.ray.io"}},
        opts=pulumi.ResourceOptions(),
    )
    done = force_crd_apply(crd)
    assert done.props["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}
    other = pulumi.ResourceTransformArgs(
        custom=True, type_="kubernetes:core/v1:ConfigMap", name="x", props={}, opts=pulumi.ResourceOptions()
    )
    assert force_crd_apply(other) is None


def test_the_webhook_certificate_secret_is_applied_without_its_empty_data(prod_plan):
    """The overlay's secretGenerator makes the Secret with `data: {}`, which the API server stores as
    none: kept in the inputs, every `up` without a refresh would see `data` added and replace the
    Secret, deleting the certificate the operator's rotator wrote."""
    (directory,) = prod_plan.by_type(DIRECTORY)
    (transform,) = directory.transforms
    generated = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "training-operator-webhook-cert", "namespace": "kubeflow"},
        "type": "Opaque",
        "data": {},
    }
    args = pulumi.ResourceTransformArgs(
        custom=True,
        type_="kubernetes:core/v1:Secret",
        name="operators-training-operator:kubeflow/training-operator-webhook-cert",
        props=generated,
        opts=pulumi.ResourceOptions(),
    )
    assert transform(args).props == {k: v for k, v in generated.items() if k != "data"}
    someone_elses = pulumi.ResourceTransformArgs(
        custom=True,
        type_="kubernetes:core/v1:Secret",
        name="x",
        props={**generated, "metadata": {"name": "other", "namespace": "kubeflow"}},
        opts=pulumi.ResourceOptions(),
    )
    assert transform(someone_elses) is None
