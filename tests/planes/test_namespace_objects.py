"""A namespace the stack does not own (a cluster it did not create): what the stack makes there is known
from the config before anything is registered, read by name, and refused with one sentence where an
object of that name is the owner's or another stack's; everything it makes there carries its name
(trainstack.dev/stack); its default deny selects its own jobs' pods (test_network_policies.py). The real API server answers the
same reads on the tier: tests/cluster/test_shared_namespace.py."""

from __future__ import annotations

import pytest
from support.cluster.stacks import planned_file
from support.paths import ROOT
from support.plans import EXISTING_CLUSTER, plan, stack_values

from account_checks.namespace_objects import NamespaceObjectsError
from config import parse_config
from conventions import PART_OF, STACK_LABEL
from offline.engine import run_program
from planes.namespace_objects import COLLECTIONS, training_namespace_objects

ATTACHED = (
    "Pulumi.existing.yaml",
    "Pulumi.local.yaml",
    "examples/kind.yaml",
    "examples/verl-grpo-existing.yaml",
)
P5_JOB = "llama-1b-fsdp"


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
    reads = [r for r in run.cluster_requests if "/namespaces/training/" in r.path]
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
