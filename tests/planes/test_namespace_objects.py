"""A namespace the stack does not own (a cluster it did not create): what the stack makes there is known
from the config before anything is registered, read by name, and refused with one sentence where an
object of that name is the owner's or another stack's; everything it makes there carries its name
(trainstack.dev/stack); its default deny selects its own jobs' pods (test_network_policies.py). The real API server answers the
same reads on the tier: tests/cluster/test_shared_namespace.py."""

from __future__ import annotations

import pytest
from support.cluster.stacks import planned_file
from support.paths import ROOT
from support.plans import EXISTING_CLUSTER, WITH_TRAINJOB, plan, stack_values

from account_checks.namespace_objects import NamespaceObjectsError
from config import parse_config
from conventions import PART_OF, STACK_LABEL
from offline.engine import run_program
from planes.namespace_objects import (
    COLLECTIONS,
    cluster_renames,
    cluster_wide_objects,
    training_namespace_objects,
)

ATTACHED = (
    "Pulumi.existing.yaml",
    "Pulumi.local.yaml",
    "examples/kind.yaml",
    "examples/verl-grpo-existing.yaml",
)
P5_JOB = "llama-1b-fsdp"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"


def in_namespace(run, namespace: str) -> list:
    return [
        r
        for r in run.resources
        if isinstance((r.inputs or {}).get("metadata"), dict)
        and r.inputs["metadata"].get("namespace") == namespace
    ]


@pytest.mark.parametrize("path", ATTACHED)
def test_every_object_the_program_makes_in_the_namespace_is_read_first_and_carries_the_stacks_name(path):
    stack = path.rsplit("/", 1)[-1].split(".")[-2]
    planned = planned_file(stack, ROOT / path)
    namespace = planned.cfg.training_namespace
    made = in_namespace(planned.run, namespace)
    assert made
    listed = set(training_namespace_objects(planned.cfg))
    assert {(r.type.rsplit(":", 1)[-1], r.inputs["metadata"]["name"]) for r in made} <= listed
    assert {kind for kind, _ in listed} <= set(COLLECTIONS)
    for r in made:
        assert r.inputs["metadata"]["labels"][STACK_LABEL] == planned.cfg.stack, r.name
    # The namespace itself is the owner's: a patch that sets nothing, unlabelled.
    (patch,) = planned.run.by_type("kubernetes:core/v1:NamespacePatch")
    assert STACK_LABEL not in (patch.inputs["metadata"].get("labels") or {})


def test_secrets_tracking_and_datasets_are_listed_too():
    values = stack_values(
        "existing",
        tracking={"mode": "external", "uri": "https://mlflow.example.com"},
        datasets=[{"name": "c4", "source": "allenai/c4", "config": "en", "maxTokens": 1000000}],
        jobs=[
            {
                "name": P5_JOB,
                "kind": "PyTorchJob",
                "nodeGroup": "p5",
                "nodes": 2,
                "model": "1b",
                "wait": "none",
                "secretEnv": {"WANDB_API_KEY": "k"},
                "dataset": "c4",
            }
        ],
    )
    values["trainstack:trackingToken"] = "t"
    values["trainstack:hfToken"] = "hf_x"
    secret_keys = ["trainstack:trackingToken", "trainstack:hfToken", "trainstack:jobs"]
    run = run_program("existing", values, secret_keys, facts=EXISTING_CLUSTER)
    cfg = parse_config("existing", values, frozenset(secret_keys))
    listed = set(training_namespace_objects(cfg))
    made = {(r.type.rsplit(":", 1)[-1], r.inputs["metadata"]["name"]) for r in in_namespace(run, "training")}
    assert {k for k, _ in made} >= {
        "Secret",
        "ServiceAccount",
        "Job",
        "PyTorchJob",
        "NetworkPolicy",
        "LocalQueue",
    }
    assert made <= listed


def obj(kind: str, name: str, labels: dict | None = None, namespace: str = "training") -> dict:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "labels": labels or {}}}


def stopped(objects: list[dict]) -> list[str]:
    registered: list = []
    with pytest.raises(NamespaceObjectsError) as err:
        run_program(
            "existing",
            stack_values("existing"),
            facts={**EXISTING_CLUSTER, "cluster-objects:namespace": objects},
            registered=registered,
        )
    # Read before any plane: nothing but the AWS provider was registered.
    assert [r.type for r in registered] == ["pulumi:providers:aws"]
    return [line.removeprefix("  - ") for line in str(err.value).splitlines()[1:]]


def test_a_users_object_of_a_name_the_stack_makes_stops_the_run_before_anything_is_registered():
    (line,) = stopped([obj("ServiceAccount", f"job-{P5_JOB}")])
    assert line == (
        f"ServiceAccount training/job-{P5_JOB} is not trainstack's (no app.kubernetes.io/part-of=trainstack "
        "label), and the stack would make one of that name: rename what the stack names so (a job or node "
        "group, in trainstack:jobs or gpuNodeGroups) or give the stack a namespace of its own "
        "(trainstack:existingCluster.namespace)"
    )


def test_another_stacks_queue_and_job_stop_it_too():
    team_a = {**PART_OF, STACK_LABEL: "team-a"}
    lines = stopped([obj("LocalQueue", "p5", team_a), obj("PyTorchJob", P5_JOB, team_a)])
    assert [line.split(" is ")[0] for line in lines] == [
        "LocalQueue training/p5",
        f"PyTorchJob training/{P5_JOB}",
    ]
    assert all(" is stack team-a's (trainstack.dev/stack=team-a)," in line for line in lines)


def test_the_stacks_own_objects_and_the_previous_releases_pass():
    own = {**PART_OF, STACK_LABEL: "existing"}
    previous = dict(PART_OF)  # the release before this one labelled no stack
    elsewhere = obj("ServiceAccount", f"job-{P5_JOB}", namespace="kubeflow")  # another namespace's
    run = plan(
        "existing",
        facts={
            **EXISTING_CLUSTER,
            "cluster-objects:namespace": [
                obj("LocalQueue", "p5", own),
                obj("PyTorchJob", P5_JOB, previous),
                elsewhere,
            ],
        },
    )
    assert run.by_type("kubernetes:kubeflow.org/v1:PyTorchJob")


def test_each_name_is_read_alone_as_metadata_in_the_namespace_only():
    run = plan("existing", facts=EXISTING_CLUSTER)
    # (Besides the earlier release's ownership record, a ConfigMap of trainstack's own: read whole.)
    reads = [
        r
        for r in run.cluster_requests
        if "/namespaces/training/" in r.path and not r.path.endswith("/configmaps/trainstack-operators")
    ]
    assert {r.path for r in reads} >= {
        f"/apis/kubeflow.org/v1/namespaces/training/pytorchjobs/{P5_JOB}",
        f"/api/v1/namespaces/training/serviceaccounts/job-{P5_JOB}",
        "/apis/kueue.x-k8s.io/v1beta2/namespaces/training/localqueues/p5",
    }
    assert all("as=PartialObjectMetadata;" in r.accept for r in reads)


def test_on_its_own_cluster_nothing_is_read_or_labelled_with_the_stacks_name():
    run = plan("dev")
    assert not [
        r for r in in_namespace(run, "training") if STACK_LABEL in (r.inputs["metadata"].get("labels") or {})
    ]


CLUSTER_WIDE = ("ResourceFlavor", "ClusterQueue", "ClusterTrainingRuntime", "Topology", "AdmissionCheck")


def cluster_wide(run) -> dict[tuple[str, str], dict]:
    return {
        (r.type.rsplit(":", 1)[-1], r.inputs["metadata"]["name"]): r.inputs
        for r in run.resources
        if r.custom and r.type.rsplit(":", 1)[-1] in CLUSTER_WIDE
    }


def test_two_stacks_on_one_cluster_share_no_cluster_wide_name_and_every_reference_follows():
    """Team A and team B, the same config (the same group names) on one cluster: each queue, flavor and
    runtime carries its stack's name, so neither stack's `destroy` removes the other's; the
    LocalQueue, the ClusterQueue's flavors and the TrainJob's runtime name the stack's own."""
    runs = {
        stack: run_program(stack, stack_values("existing", jobs=WITH_TRAINJOB), facts=EXISTING_CLUSTER)
        for stack in ("team-a", "team-b")
    }
    names = {stack: {name for _, name in cluster_wide(run)} for stack, run in runs.items()}
    assert names["team-a"] == {"trainstack-team-a-system", "trainstack-team-a-p5"}
    assert not names["team-a"] & names["team-b"]
    run = runs["team-b"]
    cfg = parse_config("team-b", stack_values("existing", jobs=WITH_TRAINJOB))
    renames = cluster_renames(cfg)
    read_first = {(kind, renames[name]) for kind, name in cluster_wide_objects(cfg)}
    assert set(cluster_wide(run)) <= read_first  # all read first
    for inputs in cluster_wide(run).values():
        assert inputs["metadata"]["labels"][STACK_LABEL] == "team-b"
    (queue,) = [r for r in run.by_type(LOCAL_QUEUE) if r.inputs["metadata"]["name"] == "p5"]
    assert queue.inputs["spec"]["clusterQueue"] == "trainstack-team-b-p5"
    p5 = cluster_wide(run)[("ClusterQueue", "trainstack-team-b-p5")]
    flavors = [f["name"] for g in p5["spec"]["resourceGroups"] for f in g["flavors"]]
    assert flavors == ["trainstack-team-b-system", "trainstack-team-b-p5"]
    (trainjob,) = run.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert trainjob.inputs["spec"]["runtimeRef"]["name"] == "trainstack-team-b-p5"
    # The resources keep their Pulumi names: only the objects sent carry the stack's.
    assert {r.name for r in run.resources if r.type.endswith(":ClusterQueue")} == {
        "clusterqueue-trainstack-system",
        "clusterqueue-trainstack-p5",
    }


def test_on_its_own_cluster_the_names_are_the_groups():
    names = {name for _, name in cluster_wide(plan("dev"))}
    assert "trainstack-system" in names and not any(n.startswith("trainstack-dev-") for n in names)


def earlier_queue(namespace: str, labels: dict | None = None) -> dict:
    """A ClusterQueue as the release before per-stack names left it: part of trainstack, no stack."""
    return {
        "kind": "ClusterQueue",
        "metadata": {"name": "trainstack-p5", "labels": labels or dict(PART_OF)},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
    }


def test_a_stack_already_running_under_the_earlier_names_keeps_them_and_labels_them():
    """Renaming would replace its queues and runtimes, and with them its running TrainJobs (a
    TrainJob's runtimeRef and a LocalQueue's clusterQueue are immutable): it keeps them."""
    facts = {**EXISTING_CLUSTER, "cluster-objects:earlier": [earlier_queue("training")]}
    run = plan("existing", facts=facts, jobs=WITH_TRAINJOB)
    found = cluster_wide(run)
    assert {name for _, name in found} == {"trainstack-system", "trainstack-p5"}
    assert all(inputs["metadata"]["labels"][STACK_LABEL] == "existing" for inputs in found.values())


def test_another_stacks_earlier_queue_leaves_this_stack_its_own_names():
    facts = {**EXISTING_CLUSTER, "cluster-objects:earlier": [earlier_queue("team-a")]}
    names = {name for _, name in cluster_wide(plan("existing", facts=facts))}
    assert names == {"trainstack-existing-system", "trainstack-existing-p5"}


def test_a_cluster_wide_name_of_the_stacks_held_by_another_stops_the_run():
    taken = {"kind": "ClusterQueue", "metadata": {"name": "trainstack-existing-p5", "labels": {"team": "x"}}}
    (line,) = stopped([taken])
    assert line.startswith(
        "ClusterQueue trainstack-existing-p5 is not trainstack's (no app.kubernetes.io/part-of=trainstack "
        "label), and the stack would make one of that name (a cluster-wide name, the stack's in it)"
    )


def test_a_job_whose_kind_changed_is_named_as_a_relaunch_before_the_up():
    """The job runs as a PyTorchJob of the stack's; the config now makes it a TrainJob: the `up`
    replaces it, and the plan says so first."""
    running = obj("PyTorchJob", P5_JOB, {**PART_OF, STACK_LABEL: "existing"})
    trainjob = {**WITH_TRAINJOB[1], "name": P5_JOB}
    run = plan("existing", facts={**EXISTING_CLUSTER, "cluster-objects:running": [running]}, jobs=[trainjob])
    assert (
        f"PyTorchJob {P5_JOB} is replaced by a TrainJob: the running job stops and resumes from its last "
        "checkpoint (its jobs[].kind changed)"
    ) in run.messages
    # Another stack's job of that name and kind is not this stack's to relaunch.
    theirs = obj("PyTorchJob", P5_JOB, {**PART_OF, STACK_LABEL: "team-a"})
    other = plan("existing", facts={**EXISTING_CLUSTER, "cluster-objects:running": [theirs]}, jobs=[trainjob])
    assert not [m for m in other.messages if "is replaced by" in m]


PROD_CLUSTER = {
    "eks-cluster:trainstack-prod": {
        "version": "1.36",
        "zones": ["us-east-1a", "us-east-1b", "us-east-1c"],
        "nodeGroups": {"trainstack-prod-p5": "us-east-1c:2"},
    }
}


def test_on_the_stacks_own_cluster_a_job_whose_kind_changed_is_named_too():
    """Prod's job ran as a PyTorchJob on the cluster an earlier run made; the template now makes it a
    TrainJob: the plan names the relaunch before the `up` replaces it. Before the cluster exists
    nothing is read."""
    running = obj("PyTorchJob", P5_JOB, PART_OF)
    run = plan("prod", facts={**PROD_CLUSTER, "cluster-objects:running": [running]})
    assert (
        f"PyTorchJob {P5_JOB} is replaced by a TrainJob: the running job stops and resumes from its last "
        "checkpoint (its jobs[].kind changed)"
    ) in run.messages
    assert not [
        m for m in plan("prod", facts={"cluster-objects:running": [running]}).messages if "replaced by" in m
    ]


def test_the_stacks_own_objects_from_earlier_runs_are_its_own_however_they_were_labelled():
    """Its hf-token Secret as this release labels it (the stack's label, before this release without
    the part-of label), and as the release before the labels left it (named with the stack's name, no
    label): both its own, so the next `up` goes on; the same name labelled by another stack stops it."""
    secret = "trainstack-existing-hf-token"
    values = stack_values("existing", hfToken="hf_test")

    def run(labels: dict):
        facts = {**EXISTING_CLUSTER, "cluster-objects:namespace": [obj("Secret", secret, labels)]}
        return run_program("existing", values, ["trainstack:hfToken"], facts=facts)

    for labels in ({STACK_LABEL: "existing"}, {}):
        assert secret in {
            r.inputs["metadata"]["name"] for r in run(labels).by_type("kubernetes:core/v1:Secret")
        }
    with pytest.raises(NamespaceObjectsError, match=f"Secret training/{secret} is stack team-a's"):
        run({STACK_LABEL: "team-a"})
