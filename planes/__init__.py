"""Compose a stack from its config, plane by plane, as in the architecture diagram (docs/architecture.md):

    account (provider; quotas, AZs, reservations: nothing registered if one fails)
      ->  build plane (bucket, registry, image)  ->  compute plane (VPC, EKS, GPU nodes, pod IAM, storage)
      ->  operators plane (device plugins, training operator, KubeRay)
      ->  queueing plane (Kueue queues per node group, cluster autoscaler)
      ->  tracking plane (MLflow)  ->  jobs plane (PyTorchJob / RayJob / RayCluster, each queued)

On a cluster trainstack did not create (`existingCluster`) the compute plane only attaches: the
provider comes from the named cluster and the node groups are described, not created; a kubeconfig
stack (kind) uses no AWS at all. Each plane gets only what it needs from the one before; each
returns the stack outputs it owns.
"""

from __future__ import annotations

from config import StackConfig
from planes.account import account_checks, aws_account, existing_cluster_checks
from planes.attached import attached_compute_plane
from planes.build import build_plane, local_build_plane
from planes.ci import ci_access, ci_outputs
from planes.compute import compute_plane
from planes.datasets import datasets_plane
from planes.jobs import jobs_plane
from planes.operators import existing_operators, operators_plane
from planes.outputs import outputs
from planes.queueing import queueing_plane
from planes.tracking import tracking_outputs, tracking_plane
from stack_outputs import StackOutputs


def build_stack(cfg: StackConfig) -> StackOutputs:
    if cfg.existing_cluster.named:
        return attached_stack(cfg)
    account = aws_account(cfg)
    facts = account_checks(cfg, account)
    ci = ci_access(cfg, account)
    # Every role from here on carries the CI fence's boundary (CI may create no role without it).
    account = account.with_boundary(ci.boundary if ci else None)
    build = build_plane(cfg, account)
    compute = compute_plane(cfg, account, facts, build.bucket, ci)
    operators = operators_plane(cfg, compute)
    queues = queueing_plane(cfg, compute, operators)
    tracking = tracking_plane(cfg, account, build, compute)
    datasets = datasets_plane(cfg, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking, datasets)
    return outputs(cfg, build, compute, operators, queues, jobs) | tracking_outputs(tracking) | ci_outputs(ci)


def attached_stack(cfg: StackConfig) -> StackOutputs:
    """The same planes on a cluster trainstack did not create: nothing of the cluster is created or
    changed; an EKS one is checked first, a kubeconfig one (kind) uses no AWS account at all."""
    account = aws_account(cfg) if cfg.existing_cluster.uses_aws else None
    if account is not None:
        existing_cluster_checks(cfg, account)
    # What the cluster already runs decides each operator; a stop leaves nothing registered.
    decisions = existing_operators(cfg, account)
    build = build_plane(cfg, account) if account is not None else local_build_plane(cfg)
    compute = attached_compute_plane(cfg, account, build.bucket)
    operators = operators_plane(cfg, compute, decisions)
    queues = queueing_plane(cfg, compute, operators)
    tracking = tracking_plane(cfg, account, build, compute)
    datasets = datasets_plane(cfg, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking, datasets)
    return outputs(cfg, build, compute, operators, queues, jobs) | tracking_outputs(tracking)
