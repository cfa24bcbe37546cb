"""A cluster whose own Kueue manages other job kinds than the stack's jobs: the real Kueue, started
with its chart's default integrations (kueue v0.19.2 charts/kueue/values.yaml, managerConfig's
integrations.frameworks: ray.io/rayjob among them, kubeflow.org/pytorchjob commented out), read by
the program before an `up` (planes/operators.py existing_operators: account_checks/cluster_inventory.py
read_cluster follows the Deployment's --config file to the ConfigMap it is mounted from, config_file;
account_checks/operator_decisions.py kueue_frameworks and decide_operators). The `existing`
template's PyTorchJob stops the program with one sentence naming that ConfigMap and the kind, since
Kueue lets a kind it does not manage run at once, outside the quota; a RayJob alone reuses that
Kueue. The mock engine's version: tests/planes/test_existing_operators.py
test_a_reused_kueue_must_manage_every_kind_the_stack_submits.

A control plane of its own: the session's runs the stack's Kueue, which manages every kind."""

from __future__ import annotations

import pytest
import yaml
from support.charts import load
from support.cluster.binaries import pinned
from support.cluster.decisions import decide, existing_cluster, existing_config
from support.cluster.harness import OWN_CLUSTER_GROUP

from account_checks.operator_decisions import ClusterOperatorsError, OperatorDecision
from offline.nodes import charts_dir

pytestmark = OWN_CLUSTER_GROUP

PYTORCHJOB, RAYJOB = "kubeflow.org/pytorchjob", "ray.io/rayjob"
# What the harness lays on the cluster from the chart (support/cluster/operators.py, release `kueue`).
FOUND = (
    "Deployment kueue-system/kueue-controller-manager (image registry.k8s.io/kueue/kueue:v0.19.2); "
    "CRD clusterqueues.kueue.x-k8s.io; CRD localqueues.kueue.x-k8s.io; "
    "CRD resourceflavors.kueue.x-k8s.io; CRD workloads.kueue.x-k8s.io"
)
RAY_JOB = {"name": "ray-train", "kind": "RayJob", "nodeGroup": "p5", "nodes": 1, "model": "1b", "steps": 10}


def chart_frameworks() -> tuple[str, ...]:
    """The integrations Kueue's chart configures when its values are left as they are."""
    chart = charts_dir() / f"kueue-{pinned('kueue', 'sigs.k8s.io/kueue').lstrip('v')}"
    values = load(chart / "values.yaml")
    return tuple(
        yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])["integrations"]["frameworks"]
    )


@pytest.fixture(scope="module")
def cluster_kueue(tmp_path_factory):
    """A cluster with its system nodes and its Kueue (the chart's defaults), as its owner runs it."""
    with existing_cluster(tmp_path_factory.mktemp("kueue-cluster")) as (cluster, stack):
        cluster.operators.kueue(
            stack.cfg.existing_cluster.system_nodes.node_selector, frameworks=chart_frameworks()
        )
        yield cluster


def test_the_charts_defaults_leave_pytorchjob_out_and_manage_rayjob():
    """What the scenario rests on, read from the chart the harness renders."""
    frameworks = chart_frameworks()
    assert PYTORCHJOB not in frameworks
    assert RAYJOB in frameworks


def test_a_pytorchjob_stops_the_program_on_a_kueue_that_does_not_manage_it(cluster_kueue):
    with pytest.raises(ClusterOperatorsError) as err:
        decide(existing_config(cluster_kueue))
    problems = [line for line in str(err.value).splitlines() if line.startswith("  - ")]
    assert problems == [
        f"  - trainstack:operators.kueue.mode = auto: the cluster runs Kueue ({FOUND}), but its Configuration "
        "(ConfigMap kueue-system/kueue-manager-config, key controller_manager_config.yaml) does not manage "
        f"{PYTORCHJOB}, which the stack's jobs are, and Kueue lets a kind it does not manage run at once, "
        f"outside the quota; allowed: add {PYTORCHJOB} to its integrations.frameworks and restart it, or install"
    ]


def test_a_rayjob_alone_reuses_that_kueue(cluster_kueue):
    decisions = decide(existing_config(cluster_kueue, jobs=[RAY_JOB]))
    assert decisions["kueue"] == OperatorDecision("kueue", "reuse", FOUND)
