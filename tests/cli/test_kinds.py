"""The command reads each kind the stack launches through one entry of cli/kinds.py."""

from __future__ import annotations

from typing import get_args

from cli.analysis import phases
from cli.kinds import READERS
from stack_outputs import JobKind


def test_every_kind_the_stack_launches_has_a_reader():
    assert set(READERS) == set(get_args(JobKind))


def test_a_ray_cluster_without_a_state_says_whether_it_is_provisioned():
    """KubeRay sets the RayClusterProvisioned condition before (or without) status.state
    (trainstack status' PyTorchJob, RayJob and RayCluster phases: tests/cli/test_status.py)."""
    provisioned = {"conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}
    assert phases.job_phase("RayCluster", {"status": provisioned}).name == "provisioned"
    assert phases.job_phase("RayCluster", {"status": {}}).name == "pending"


def test_only_a_kind_whose_operator_counts_attempts_adds_the_count():
    failed = {"status": {"failed": 2}}
    assert (
        phases.retry_state("RayJob", failed, "at most 3 attempt(s)")
        == "at most 3 attempt(s); 2 attempt(s) failed so far"
    )
    assert phases.retry_state("PyTorchJob", failed, "bound") == "bound"


def test_expected_pods_come_from_each_kinds_spec():
    ray = {"workerGroupSpecs": [{"replicas": 2}, {"replicas": 1}]}
    assert phases.expected_pods("RayCluster", {"spec": ray}) == 4
    assert phases.expected_pods("RayJob", {"spec": {"rayClusterSpec": ray}}) == 4
    assert (
        phases.expected_pods("PyTorchJob", {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 3}}}})
        == 3
    )
    assert phases.expected_pods("PyTorchJob", None) == 0
