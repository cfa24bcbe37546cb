"""On a SageMaker HyperPod cluster without a training operator, the one the stack installs is v1.8.1:
AWS names training operator 1.7.0-1.8.1 for HyperPod's job auto-resume (issue #47). Elsewhere v1.9.4."""

from __future__ import annotations

from support.plans import EXISTING_CLUSTER, stack_values

from domain.operators import TRAINING_OPERATOR, TRAINING_OPERATOR_HYPERPOD
from offline.engine import run_program

HYPERPOD_CLUSTER = {
    "eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}
}


def training_operator_url(run) -> str:
    (directory,) = run.by_type("kubernetes:kustomize/v2:Directory")
    return directory.inputs["directory"]


def test_a_hyperpod_cluster_without_one_gets_the_version_auto_resume_supports():
    # An empty cluster (no HyperPod dependencies chart): the stack installs the operator.
    run = run_program("hyperpod", stack_values("hyperpod"), ["trainstack:hfToken"], facts=HYPERPOD_CLUSTER)
    assert training_operator_url(run) == (
        "https://github.com/kubeflow/trainer.git//manifests/overlays/standalone"
        "?ref=0f8735faade3651dfe44e45c6fbc30fa9152641d"
    )
    assert TRAINING_OPERATOR_HYPERPOD.version == "v1.8.1"


def test_other_clusters_get_v1_9_4():
    run = run_program("existing", stack_values("existing"), facts=EXISTING_CLUSTER)
    assert training_operator_url(run) == TRAINING_OPERATOR.url()
    assert TRAINING_OPERATOR.version == "v1.9.4"
