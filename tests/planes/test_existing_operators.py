"""The `existing` template on a cluster that already runs operators (rendered from the real charts in
../shared/charts): each operator is reused when it serves the stack's jobs, or the plan stops with
one sentence naming what is there and the switch; no object of the stack collides with one already
there; a second run keeps what the first installed; the device plugins the stack installs select
the nodes the config describes."""

from __future__ import annotations

import pytest
import yaml
from support.charts import render
from support.cluster_objects import (
    GPU_OPERATOR_DEPLOY_LABEL,
    GPU_OPERATOR_PLUGIN,
    as_facts,
    charts,
    hyperpod_dependencies,
    installed,
    keys,
)
from support.plans import EXISTING_CLUSTER, plan, stack_values

from account_checks.operator_decisions import TRAINJOB_CRD, TRAINJOB_FRAMEWORK, ClusterOperatorsError, selects
from components.jobs.kinds import KINDS
from config import ConfigError, parse_config
from conventions import STACK_LABEL
from domain.operators import KUBERAY_CRDS
from offline.engine import run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
DIRECTORY = "kubernetes:kustomize/v2:Directory"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
SECRET_PATCH = "kubernetes:core/v1:SecretPatch"
# The template's group as a HyperPod cluster's nodes carry it: the `ml.` type in the label.
HYPERPOD_GROUP = {
    "name": "p5",
    "instanceType": "p5.48xlarge",
    "nodeCount": 2,
    "efa": True,
    "nodeSelector": {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"},
}


def releases(run) -> set[str]:
    return {r.inputs["name"] for r in run.by_type(RELEASE)}


def stack_objects(run) -> set[tuple[str, str | None, str]]:
    """What the plan would create on the cluster: its own objects, its Helm releases as Helm renders
    them, and KubeRay's CRDs it applies."""
    made = set()
    for r in run.resources:
        meta = r.inputs.get("metadata") if r.custom and r.type.startswith("kubernetes:") else None
        if isinstance(meta, dict) and "name" in meta:
            made.add((r.type.rsplit(":", 1)[1], meta.get("namespace"), meta["name"]))
    for name in releases(run):
        made |= keys(render(run, name))
    if run.by_type(CONFIG_GROUP):
        made |= {("CustomResourceDefinition", None, f"{plural}.ray.io") for plural in KUBERAY_CRDS}
    return made


def decision_lines(run) -> list[str]:
    (report,) = [m for m in run.messages if m.startswith("Cluster operators")]
    return report.splitlines()[1:]


@pytest.fixture(scope="module")
def hyperpod():
    return hyperpod_dependencies()


def test_a_hyperpod_cluster_keeps_its_training_operator_and_device_plugins(hyperpod):
    run = plan(
        "existing",
        facts={**EXISTING_CLUSTER, **as_facts("hyperpod", hyperpod)},
        gpuNodeGroups=[HYPERPOD_GROUP],
    )
    assert run.by_type(DIRECTORY) == []
    assert releases(run) == {"kuberay-operator", "kueue"}  # no TrainJob: no Trainer
    lines = decision_lines(run)
    assert lines[0].startswith(
        "  reuse    trainingOperator: found Deployment kubeflow/hyperpod-dependencies-training-operators "
        "(image kubeflow/training-operator:v1-855e096, Helm release hyperpod-dependencies in kube-system)"
    )
    assert lines[3].startswith(
        "  reuse    nvidiaDevicePlugin: found DaemonSet kube-system/hyperpod-dependencies"
    )
    assert lines[4].startswith(
        "  reuse    efaDevicePlugin: found DaemonSet kube-system/hyperpod-dependencies"
    )
    # The PyTorchJob waits on no operator of the stack's: the cluster's runs it.
    (job,) = run.by_type("kubernetes:kubeflow.org/v1:PyTorchJob")
    assert not any(d.endswith("training-operator") for d in job.dependencies)
    assert stack_objects(run) & keys(hyperpod) == set()
    # What it installs carries its name, on each release's Secret: a later run knows its own.
    owned = {r.inputs["metadata"]["name"]: r.inputs["metadata"] for r in run.by_type(SECRET_PATCH)}
    assert owned == {
        "sh.helm.release.v1.kuberay-operator.v1": {
            "name": "sh.helm.release.v1.kuberay-operator.v1",
            "namespace": "kuberay-system",
            "labels": {STACK_LABEL: "existing"},
        },
        "sh.helm.release.v1.kueue.v1": {
            "name": "sh.helm.release.v1.kueue.v1",
            "namespace": "kueue-system",
            "labels": {STACK_LABEL: "existing"},
        },
    }


def test_installing_over_hyperpods_training_operator_stops_with_one_sentence(hyperpod):
    registered = []
    values = stack_values(
        "existing", gpuNodeGroups=[HYPERPOD_GROUP], operators={"trainingOperator": {"mode": "install"}}
    )
    with pytest.raises(ClusterOperatorsError) as err:
        run_program(
            "existing",
            values,
            facts={**EXISTING_CLUSTER, **as_facts("hyperpod", hyperpod)},
            registered=registered,
        )
    (line,) = [x for x in str(err.value).splitlines() if x.startswith("  - ")]
    assert line == (
        "  - trainstack:operators.trainingOperator.mode = install: the cluster already runs the Kubeflow "
        "training operator (Deployment kubeflow/hyperpod-dependencies-training-operators (image "
        "kubeflow/training-operator:v1-855e096, Helm release hyperpod-dependencies in kube-system); "
        "CRD pytorchjobs.kubeflow.org); a second one would collide with it; allowed: reuse or auto (use it "
        "as it is), or remove it from the cluster first"
    )
    # Read and decided before any plane: nothing but the AWS provider was registered.
    assert [r.type for r in registered] == ["pulumi:providers:aws"]


def test_device_plugins_that_miss_the_configured_nodes_stop_the_plan(hyperpod):
    """HyperPod's plugins select `ml.` types: a group described by the EC2 type is not among them."""
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts={**EXISTING_CLUSTER, **as_facts("hyperpod", hyperpod)})
    assert (
        "trainstack:operators.nvidiaDevicePlugin.mode = auto: the cluster runs the NVIDIA device plugin "
        "(DaemonSet kube-system/hyperpod-dependencies-nvidia-device-plugin" in str(err.value)
    )
    assert (
        "but none of its DaemonSets selects gpuNodeGroups p5's nodes "
        "(node.kubernetes.io/instance-type=p5.48xlarge; none is up to read its own labels); allowed: install "
        "after removing it" in str(err.value)
    )


def p5_node(name: str, **labels: str) -> dict:
    base = {"node.kubernetes.io/instance-type": "p5.48xlarge", "kubernetes.io/hostname": name}
    return {"kind": "Node", "metadata": {"name": name, "labels": {**base, **labels}}}


def nvidia_decision(nodes: list[dict]):
    run = plan(
        "existing", facts={**EXISTING_CLUSTER, **as_facts("gpu-operator", [GPU_OPERATOR_PLUGIN, *nodes])}
    )
    return next(line for line in decision_lines(run) if "nvidiaDevicePlugin" in line), run


def test_the_gpu_operators_plugin_is_reused_where_it_serves_the_groups_nodes_as_they_are_labelled():
    """Its DaemonSet selects a label the config never describes; the group's nodes carry it, so the
    plugin serves them and the stack installs no second one."""
    line, run = nvidia_decision([p5_node(f"p5-{i}", **{GPU_OPERATOR_DEPLOY_LABEL: "true"}) for i in range(2)])
    assert line.lstrip().startswith(
        "reuse    nvidiaDevicePlugin: found DaemonSet kube-system/nvidia-device-plugin-daemonset"
    )
    assert "nvidia-device-plugin" not in {r.inputs["name"] for r in run.by_type(RELEASE)}


def test_a_plugin_that_misses_a_node_of_the_group_names_that_node():
    nodes = [p5_node("p5-0", **{GPU_OPERATOR_DEPLOY_LABEL: "true"}), p5_node("p5-1")]
    with pytest.raises(ClusterOperatorsError) as err:
        nvidia_decision(nodes)
    assert "but none of its DaemonSets selects gpuNodeGroups p5's nodes p5-1; allowed: install" in str(
        err.value
    )


def kueue_managing(*frameworks: str) -> dict:
    """The Kueue chart's values with its commented-out `frameworks` entries turned on."""
    values = yaml.safe_load((charts() / "kueue-0.19.2" / "values.yaml").read_text())
    config = values["managerConfig"]["controllerManagerConfigYaml"]
    for framework in frameworks:
        config = config.replace(f'#  - "{framework}"', f'  - "{framework}"')
    return {"managerConfig": {"controllerManagerConfigYaml": config}}


@pytest.mark.parametrize(
    ("key", "chart", "release", "namespace"),
    [
        ("kuberay", "kuberay-operator-1.7.0", "ray", "ray-system"),
        ("kueue", "kueue-0.19.2", "platform-kueue", "kueue-system"),
    ],
)
def test_a_clusters_own_operator_is_reused_or_stops_when_told_to_install(key, chart, release, namespace):
    values = kueue_managing("kubeflow.org/pytorchjob") if key == "kueue" else None
    there = installed(charts() / chart, release, namespace, values)
    facts = {**EXISTING_CLUSTER, **as_facts(key, there)}
    run = plan("existing", facts=facts)
    (line,) = [x for x in decision_lines(run) if f" {key}: " in x]
    assert line.startswith(f"  reuse    {key}: found Deployment {namespace}/")
    if key == "kuberay":
        assert "kuberay-operator" not in releases(run) and run.by_type(CONFIG_GROUP) == []
        assert stack_objects(run) & keys(there) == set()
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts=facts, operators={key: {"mode": "install"}})
    assert f"trainstack:operators.{key}.mode = install: the cluster already runs " in str(err.value)
    assert f"Helm release {release} in {namespace}" in str(err.value)


def test_a_reused_kueue_must_manage_every_kind_the_stack_submits():
    """The 0.19.2 chart's defaults leave PyTorchJob out, and Kueue gives a kind it does not manage a
    no-op webhook: the job would start at once, outside the quota, and `wait: admitted` would wait on
    a condition nothing sets."""
    there = installed(charts() / "kueue-0.19.2", "platform-kueue", "kueue-system")
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts={**EXISTING_CLUSTER, **as_facts("kueue", there)})
    (line,) = [x for x in str(err.value).splitlines() if x.startswith("  - ")]
    assert line.endswith(
        "but its Configuration (ConfigMap kueue-system/platform-kueue-manager-config, key "
        "controller_manager_config.yaml) does not manage kubeflow.org/pytorchjob, which the stack's jobs are, "
        "and Kueue lets a kind it does not manage run at once, outside the quota; allowed: add "
        "kubeflow.org/pytorchjob to its integrations.frameworks and restart it, or install"
    )
    assert line.startswith("  - trainstack:operators.kueue.mode = auto: the cluster runs Kueue (Deployment ")
    # A Ray job needs ray.io/rayjob, which the chart's defaults manage.
    ray = {"name": "ray-train", "kind": "RayJob", "nodeGroup": "p5", "nodes": 1, "model": "1b", "steps": 10}
    run = plan("existing", facts={**EXISTING_CLUSTER, **as_facts("kueue", there)}, jobs=[ray])
    assert "kueue" not in releases(run)


def test_a_reused_kueue_cannot_take_trainjobs_in_the_up_that_installs_trainer():
    """Kueue started before the TrainJob API refuses every TrainJob until its poll finds that API
    (up to 2 minutes), and pulumi-kubernetes does not retry a refused create: the first `up` would
    install Trainer and then fail on the job. On a cluster that runs Trainer already, the same Kueue
    is reused."""
    kueue = installed(charts() / "kueue-0.19.2", "platform-kueue", "kueue-system")
    trainjob = {
        "name": "llama",
        "kind": "TrainJob",
        "nodeGroup": "p5",
        "nodes": 1,
        "model": "1b",
        "steps": 10,
    }
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts={**EXISTING_CLUSTER, **as_facts("kueue", kueue)}, jobs=[trainjob])
    (line,) = [x for x in str(err.value).splitlines() if x.startswith("  - ")]
    assert line.startswith("  - trainstack:operators.kueue.mode = auto: the cluster runs Kueue (Deployment ")
    assert line.endswith(
        "but the TrainJob API is not served yet (this `up` would install Trainer), and a Kueue started before "
        "that API sets its TrainJob integration up only when it next polls for it, up to 2 minutes later, "
        "refusing every TrainJob until then (its webhook asks Trainer's runtimes, which that integration "
        "loads); allowed: a first `pulumi up` with no TrainJob in trainstack:jobs (it installs Trainer), then "
        "the TrainJobs once Kueue is restarted or 2 minutes have passed; or install"
    )
    trainer = installed(charts() / "kubeflow-trainer-2.3.0", "platform-trainer", "kubeflow-system")
    facts = {**EXISTING_CLUSTER, **as_facts("kueue", kueue), **as_facts("trainer", trainer)}
    run = plan("existing", facts=facts, jobs=[trainjob])
    (line,) = [x for x in decision_lines(run) if " kueue: " in x]
    assert line.startswith("  reuse    kueue: found Deployment kueue-system/")


def test_the_cluster_read_names_trainjob_as_the_jobs_wing_does():
    """The account checks sit below the jobs wing and name TrainJob's Kueue integration and CRD
    themselves: the names must stay the ones the wing sends."""
    trainjob = KINDS["TrainJob"]
    assert trainjob.kueue_framework == TRAINJOB_FRAMEWORK
    group = trainjob.api_version.rpartition("/")[0]
    assert f"{trainjob.name.lower()}s.{group}" == TRAINJOB_CRD


def test_the_efa_device_plugin_is_not_taken_for_the_nvidia_one():
    """`aws-efa-k8s-device-plugin` contains `k8s-device-plugin`: told apart by image repository."""
    efa = installed(charts() / "aws-efa-k8s-device-plugin-v0.5.30", "efa", "kube-system")
    run = plan("existing", facts={**EXISTING_CLUSTER, **as_facts("efa", efa)})
    lines = decision_lines(run)
    assert lines[3] == "  install  nvidiaDevicePlugin: found nothing"
    assert lines[4].startswith("  reuse    efaDevicePlugin: found DaemonSet kube-system/")
    assert "nvidia-device-plugin" in releases(run)


def test_a_release_under_the_stacks_name_that_the_stack_did_not_install_stops():
    there = installed(charts() / "kuberay-operator-1.7.0", "kuberay-operator", "kuberay-system")
    crds_only = [o for o in there if o["kind"] in ("CustomResourceDefinition", "Secret")]
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts={**EXISTING_CLUSTER, **as_facts("kuberay", crds_only)})
    assert (
        "  - trainstack:operators.kuberay.mode = auto: the cluster has Helm release kuberay-operator in "
        "kuberay-system under the stack's own name, labelled by no stack, and a second install under that "
        "name fails; allowed: reuse (use it as it is), or, if this stack installed it, label it "
        "trainstack.dev/stack=existing (on a Helm release, its latest sh.helm.release.v1 Secret)"
    ) in str(err.value).splitlines()


def test_reuse_of_an_operator_the_cluster_lacks_stops():
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts=EXISTING_CLUSTER, operators={"kuberay": {"mode": "reuse"}})
    assert (
        "trainstack:operators.kuberay.mode = reuse: the cluster runs no KubeRay; allowed: install or auto"
        in str(err.value)
    )


def test_an_old_training_operator_without_the_fields_the_jobs_set_stops(hyperpod):
    old = []
    for o in hyperpod:
        if o["metadata"]["name"] == "pytorchjobs.kubeflow.org":
            spec = o["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            del spec["properties"]["elasticPolicy"]
        old.append(o)
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", facts={**EXISTING_CLUSTER, **as_facts("old", old)}, gpuNodeGroups=[HYPERPOD_GROUP])
    assert (
        "but CRD pytorchjobs.kubeflow.org v1 has no spec.elasticPolicy.rdzvBackend, spec.elasticPolicy.rdzvConf, "
        "which the stack's jobs set" in str(err.value)
    )


def test_installed_device_plugins_select_the_nodes_the_config_describes():
    """On nodes the stack did not label, the plugins the stack installs select the groups' own
    labels (nodeSelector, instance type), not nvidia.com/gpu.present or efa.present."""
    run = plan(
        "existing",
        facts=EXISTING_CLUSTER,
        gpuNodeGroups=[
            HYPERPOD_GROUP,
            {
                **HYPERPOD_GROUP,
                "name": "a10",
                "instanceType": "g6.xlarge",
                "efa": False,
                "nodeSelector": {"pool": "a10"},
            },
        ],
    )
    p5 = {"node.kubernetes.io/instance-type": "ml.p5.48xlarge"}
    a10 = {"node.kubernetes.io/instance-type": "g6.xlarge", "pool": "a10"}
    nvidia = [o for o in render(run, "nvidia-device-plugin") if o["kind"] == "DaemonSet"]
    device_plugin = next(d for d in nvidia if d["metadata"]["name"] == "nvidia-device-plugin")
    assert selects(device_plugin, p5) and selects(device_plugin, a10)
    assert not selects(device_plugin, {"node.kubernetes.io/instance-type": "p5.48xlarge"})
    (efa,) = [o for o in render(run, "aws-efa-k8s-device-plugin") if o["kind"] == "DaemonSet"]
    assert selects(efa, p5) and not selects(efa, a10)


def test_an_operator_mode_outside_the_three_is_refused_with_its_key():
    with pytest.raises(
        ConfigError,
        match=r'trainstack:operators\.kueue\.mode = "adopt": not a mode; allowed: auto, install, reuse',
    ):
        parse_config("existing", stack_values("existing", operators={"kueue": {"mode": "adopt"}}))


def test_trainer_and_jobset_come_to_an_attached_cluster_only_for_a_trainjob():
    """Both are cluster-wide (their webhooks judge every team's TrainJobs and JobSets): the `existing`
    template, whose only job is a PyTorchJob, installs neither; a TrainJob brings both, and
    `mode: install` brings Trainer without one."""

    def releases(**overrides) -> set[str]:
        run = plan("existing", facts=EXISTING_CLUSTER, **overrides)
        return {r.inputs["name"] for r in run.by_type(RELEASE)}

    assert "kubeflow-trainer" not in releases()
    trainjob = {
        "name": "tj",
        "kind": "TrainJob",
        "nodeGroup": "p5",
        "nodes": 2,
        "model": "1b",
        "wait": "none",
    }
    run = plan("existing", facts=EXISTING_CLUSTER, jobs=[trainjob])
    (trainer,) = [r for r in run.by_type(RELEASE) if r.inputs["name"] == "kubeflow-trainer"]
    assert trainer.inputs["values"]["jobset"]["install"] is True
    assert "kubeflow-trainer" in releases(operators={"trainer": {"mode": "install"}})
