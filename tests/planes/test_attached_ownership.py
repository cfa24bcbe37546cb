"""On a cluster the stack did not create, what the stack installed stays its own from run to run,
whatever `existingCluster.namespace` says (its name is a label on each Helm release's Secret and on
the training operator's Deployment, never a record in a namespace); an operator the stack installed
never drops to "reuse" (the next `up` would uninstall it, CRDs and every object of their kinds
included); the CRDs it applies there outlive it; and the namespace is used where it exists, never
created with a POST or deleted."""

from __future__ import annotations

import copy

import pulumi
import pytest
from support.charts import load
from support.cluster_objects import as_facts, charts, installed
from support.crds import CRD_FILES
from support.paths import shared_dir
from support.plans import EXISTING_CLUSTER, WITH_TRAINJOB, plan, stack_values

from account_checks.operator_decisions import ClusterOperatorsError
from components.operators import CRD_TYPE
from conventions import PART_OF
from domain.operators import RELEASES
from offline.engine import run_program

RELEASE = "kubernetes:helm.sh/v3:Release"
SECRET_PATCH = "kubernetes:core/v1:SecretPatch"
DIRECTORY = "kubernetes:kustomize/v2:Directory"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
# The training operator's Deployment as its v1.9.4 bundle makes it (manifests/base/deployment.yaml, the
# standalone overlay's tag).
TRAINING_OPERATOR = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "training-operator", "namespace": "kubeflow", "labels": {"control-plane": "kubeflow-training-operator"}},
    "spec": {
        "selector": {"matchLabels": {"control-plane": "kubeflow-training-operator"}},
        "template": {
            "metadata": {"labels": {"control-plane": "kubeflow-training-operator"}},
            "spec": {"containers": [{"name": "training-operator", "image": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489"}]},
        },
    },
}  # fmt: skip


def left_on_the_cluster(run, labelled: bool = True) -> list[dict]:
    """What `run`'s `pulumi up` leaves on the cluster: each Helm release as Helm installs it, its
    Secret labelled as the run's SecretPatch says (server-side apply), and the training operator's
    PyTorchJob CRD and its Deployment as the run's transforms make it."""
    cluster = []
    for reg in run.by_type(RELEASE):
        chart = next(c for c in RELEASES.values() if c.release == reg.inputs["name"])
        cluster += installed(
            charts() / f"{chart.chart}-{chart.version}",
            chart.release,
            chart.namespace,
            reg.inputs.get("values"),
        )
    patches = {
        (p.inputs["metadata"]["namespace"], p.inputs["metadata"]["name"]): p
        for p in run.by_type(SECRET_PATCH)
    }
    for o in cluster:
        patch = patches.get((o["metadata"].get("namespace"), o["metadata"]["name"])) if labelled else None
        if o["kind"] == "Secret" and patch is not None:
            o["metadata"]["labels"] |= patch.inputs["metadata"]["labels"]
    for reg in run.by_type(DIRECTORY):
        crd = shared_dir("crds", "TRAINSTACK_CRDS_DIR") / CRD_FILES["PyTorchJob"]
        cluster.append(load(crd))
        props = copy.deepcopy(TRAINING_OPERATOR)
        for transform in reg.transforms if labelled else []:
            args = pulumi.ResourceTransformArgs(
                False, "kubernetes:apps/v1:Deployment", "d", props, pulumi.ResourceOptions()
            )
            props = (transform(args) or args).props
        cluster.append(props)
    return cluster


@pytest.fixture(scope="module")
def first():
    run = plan("existing", jobs=WITH_TRAINJOB, facts=EXISTING_CLUSTER)
    return run, left_on_the_cluster(run)


def decision_lines(run) -> list[str]:
    (report,) = [m for m in run.messages if m.startswith("Cluster operators")]
    return report.splitlines()[1:]


def test_a_second_run_keeps_what_the_first_installed(first):
    run, cluster = first
    assert {r.inputs["name"] for r in run.by_type(RELEASE)} == {
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "kuberay-operator",
        "kueue",
        "kubeflow-trainer",
    }
    second = plan(
        "existing", jobs=WITH_TRAINJOB, facts={**EXISTING_CLUSTER, **as_facts("first-run", cluster)}
    )
    assert {(r.type, r.name) for r in second.resources} == {(r.type, r.name) for r in run.resources}
    assert all(line.lstrip().startswith(("install", "node monitoring")) for line in decision_lines(second))


def test_a_changed_namespace_keeps_every_operator_the_stack_installed(first):
    """The namespace the config check tells HyperPod users to change: with a record kept in the old
    one, each operator of the stack's looked like someone else's and was uninstalled."""
    run, cluster = first
    moved = plan(
        "existing",
        jobs=WITH_TRAINJOB,
        facts={**EXISTING_CLUSTER, **as_facts("first-run", cluster)},
        existingCluster={"eksClusterName": "ml-platform", "namespace": "ml-jobs"},
    )
    kept = {RELEASE, DIRECTORY, CONFIG_GROUP, SECRET_PATCH}
    assert {(r.type, r.name) for r in moved.resources if r.type in kept} == {
        (r.type, r.name) for r in run.resources if r.type in kept
    }
    assert [line.split(":")[0].split()[0] for line in decision_lines(moved)][:-1] == ["install"] * 7


def test_an_operator_the_stack_installed_but_did_not_label_is_never_reused_on_auto(first):
    """A first `up` that stopped between installing the releases and labelling them: each release at
    the stack's own name stops the plan with a sentence instead of being reused (and uninstalled)."""
    run, _ = first
    unlabelled = left_on_the_cluster(run, labelled=False)
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", jobs=WITH_TRAINJOB, facts={**EXISTING_CLUSTER, **as_facts("unlabelled", unlabelled)})
    problems = [line for line in str(err.value).splitlines() if line.startswith("  - ")]
    assert [p.split(" = ")[0] for p in problems] == [
        "  - trainstack:operators.trainingOperator.mode",
        "  - trainstack:operators.kuberay.mode",
        "  - trainstack:operators.kueue.mode",
        "  - trainstack:operators.nvidiaDevicePlugin.mode",
        "  - trainstack:operators.efaDevicePlugin.mode",
        "  - trainstack:operators.trainer.mode",
        "  - trainstack:operators.trainer.jobsetMode",
    ]
    assert problems[2] == (
        "  - trainstack:operators.kueue.mode = auto: the cluster has Helm release kueue in kueue-system under "
        "the stack's own name, labelled by no stack, and a second install under that name fails; allowed: "
        "reuse (use it as it is), or, if this stack installed it, label it trainstack.dev/stack=existing "
        "(on a Helm release, its latest sh.helm.release.v1 Secret)"
    )


def test_what_an_earlier_release_recorded_in_its_configmap_is_the_stacks_own_and_gets_labelled(first):
    """The release before the ownership labels recorded what it installed in ConfigMap
    trainstack-operators of the stack's namespace, and labelled nothing: the next `up` reads that
    record, installs each recorded operator again as its own (no manual step), and labels its
    release's Secret; the record goes with the ConfigMap the program no longer makes."""
    run, _ = first
    unlabelled = left_on_the_cluster(run, labelled=False)
    keys = (
        "trainingOperator",
        "kuberay",
        "kueue",
        "nvidiaDevicePlugin",
        "efaDevicePlugin",
        "trainer",
        "jobset",
    )
    record = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "trainstack-operators", "namespace": "training"},
        "data": dict.fromkeys(keys, "installed"),
    }
    upgraded = plan(
        "existing",
        jobs=WITH_TRAINJOB,
        facts={**EXISTING_CLUSTER, **as_facts("earlier", [*unlabelled, record])},
    )
    lines = decision_lines(upgraded)[:-1]
    assert [line.split()[0] for line in lines] == ["install"] * 7
    assert all("recorded as the stack's own in ConfigMap trainstack-operators" in line for line in lines)
    labelled = {p.inputs["metadata"]["name"] for p in upgraded.by_type(SECRET_PATCH)}
    assert "sh.helm.release.v1.kueue.v1" in labelled
    # The record is read in the stack's namespace only: elsewhere it is someone else's ConfigMap.
    elsewhere = {**record, "metadata": {**record["metadata"], "namespace": "kube-system"}}
    with pytest.raises(ClusterOperatorsError):
        plan(
            "existing",
            jobs=WITH_TRAINJOB,
            facts={**EXISTING_CLUSTER, **as_facts("earlier", [*unlabelled, elsewhere])},
        )


def test_reuse_of_what_the_stack_installed_stops_and_anothers_is_reused(first):
    _, cluster = first
    facts = {**EXISTING_CLUSTER, **as_facts("first-run", cluster)}
    with pytest.raises(ClusterOperatorsError) as err:
        plan("existing", jobs=WITH_TRAINJOB, facts=facts, operators={"kuberay": {"mode": "reuse"}})
    assert (
        "  - trainstack:operators.kuberay.mode = reuse: Helm release kuberay-operator in kuberay-system is this "
        "stack's own (trainstack.dev/stack=existing), and reusing it would uninstall it; allowed: auto or install"
    ) in str(err.value).splitlines()
    # The same cluster seen from another stack: every operator is someone else's, and serves it.
    other = run_program("team-b", stack_values("existing", jobs=WITH_TRAINJOB), facts=facts)
    assert other.by_type(RELEASE) == [] and other.by_type(DIRECTORY) == []
    assert all(line.lstrip().startswith(("reuse", "node monitoring")) for line in decision_lines(other))


def kept(reg) -> list:
    return [t for t in reg.transforms if getattr(t, "__qualname__", "").startswith("retained_crds.")]


def test_the_crds_the_stack_applies_outlive_it_on_a_cluster_it_did_not_create(first, dev_plan):
    """Kept on destroy, labelled trainstack's, and applied through the attached cluster's provider
    that takes a kept one over (upsertExistingObjects), not the one every other object goes through."""
    run, _ = first
    (crd_provider,) = [p for p in run.by_type("pulumi:providers:kubernetes") if p.name.endswith("-k8s-crds")]
    assert crd_provider.inputs["upsertExistingObjects"] == "true"
    for reg in [*run.by_type(DIRECTORY), *run.by_type(CONFIG_GROUP)]:
        (transform,) = kept(reg)
    assert all(not kept(r) for r in dev_plan.resources)
    crd = pulumi.ResourceTransformArgs(
        True, CRD_TYPE, "c", {"metadata": {"name": "rayjobs.ray.io"}}, pulumi.ResourceOptions()
    )
    result = transform(crd)
    assert result.opts.retain_on_delete is True
    assert result.opts.provider is not None
    assert result.props["metadata"]["labels"] == PART_OF
    deployment = pulumi.ResourceTransformArgs(
        True, "kubernetes:apps/v1:Deployment", "d", {}, pulumi.ResourceOptions()
    )
    assert transform(deployment) is None


def test_the_training_namespace_is_used_where_it_exists_and_never_deleted(first, dev_plan):
    """pulumi-kubernetes creates with a POST (AlreadyExists on a namespace the owner made, such as
    HyperPod's `kubeflow`) and deletes what it created: on a cluster the stack did not create, the
    namespace is a patch that sets nothing (apply: used if there, made if not; deleted: let go)."""
    run, _ = first
    assert run.by_type("kubernetes:core/v1:Namespace") == []
    (namespace,) = run.by_type("kubernetes:core/v1:NamespacePatch")
    assert namespace.inputs["metadata"] == {"name": "training"}
    account = run.one("kubernetes:core/v1:ServiceAccount", "training-pods-llama-1b-fsdp-service-account")
    assert namespace.urn in account.dependencies or namespace.urn in account.property_dependencies.get(
        "metadata", []
    )
    assert dev_plan.one("kubernetes:core/v1:Namespace", "training-pods-namespace")


def test_jobset_is_judged_by_trainers_release_not_by_the_training_operators_deployment():
    """JobSet comes with Trainer's release (its subchart): the user's own training operator at the
    stack's name, reused, says nothing of JobSet, which the stack installs with Trainer."""
    crd = load(shared_dir("crds", "TRAINSTACK_CRDS_DIR") / CRD_FILES["PyTorchJob"])
    users = [crd, copy.deepcopy(TRAINING_OPERATOR)]
    run = plan(
        "existing",
        jobs=WITH_TRAINJOB,
        facts={**EXISTING_CLUSTER, **as_facts("users", users)},
        operators={"trainingOperator": {"mode": "reuse"}},
    )
    lines = {line.split(":")[0].split()[-1]: line.split()[0] for line in decision_lines(run)[:-1]}
    assert lines["trainingOperator"] == "reuse"
    assert lines["trainer"] == lines["jobset"] == "install"
    assert run.by_type(DIRECTORY) == []


def test_a_trainer_the_stack_installed_stays_when_its_last_trainjob_goes(first):
    """Others may reuse it: the stack keeps its Trainer (and JobSet) when no TrainJob of its own
    needs it any longer, and removes it only when told (operators.trainer.enabled: false)."""
    _, cluster = first
    facts = {**EXISTING_CLUSTER, **as_facts("first-run", cluster)}
    pytorch_only = [WITH_TRAINJOB[0]]
    kept = plan("existing", jobs=pytorch_only, facts=facts)
    (trainer,) = [r for r in kept.by_type(RELEASE) if r.inputs["name"] == "kubeflow-trainer"]
    assert trainer.inputs["values"]["jobset"]["install"] is True
    lines = {line.split(":")[0].split()[-1]: line for line in decision_lines(kept)[:-1]}
    assert lines["trainer"].lstrip().startswith("install  trainer: found the stack's own, kept")
    removed = plan("existing", jobs=pytorch_only, facts=facts, operators={"trainer": {"enabled": False}})
    assert "kubeflow-trainer" not in {r.inputs["name"] for r in removed.by_type(RELEASE)}


def test_trainer_installed_without_a_trainjob_brings_jobset_with_it():
    run = plan("existing", facts=EXISTING_CLUSTER, operators={"trainer": {"mode": "install"}})
    (trainer,) = [r for r in run.by_type(RELEASE) if r.inputs["name"] == "kubeflow-trainer"]
    assert trainer.inputs["values"]["jobset"]["install"] is True
