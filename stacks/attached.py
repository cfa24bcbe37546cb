"""A stack on a cluster trainstack did not create (`existingCluster`): the same planes, but the
compute plane only attaches (the provider comes from the named cluster and the node groups are
described, not created); nothing of the cluster is created or changed. An EKS cluster is checked
first; a kubeconfig stack (kind) uses no AWS account at all."""

from __future__ import annotations

import pulumi

from account_checks.hyperpod_cluster import resolve_hyperpod
from account_checks.world import World
from components.ownership import labelled_as_stack, scoped_cluster_names
from config import StackConfig
from planes.account import aws_account, existing_cluster_checks
from planes.attached import attached_compute_plane
from planes.build import build_plane, local_build_plane
from planes.datasets import datasets_plane
from planes.jobs import jobs_plane
from planes.namespace_objects import check_stack_rights, shared_cluster_names
from planes.operators import existing_operators, operators_plane
from planes.outputs import outputs
from planes.queueing import queueing_plane
from planes.tracking import tracking_outputs, tracking_plane
from stack_outputs import StackOutputs


def attached_stack(cfg: StackConfig, world: World) -> StackOutputs:
    # A HyperPod cluster by its own name: its EKS cluster, asked of SageMaker first.
    cfg = resolve_hyperpod(cfg, world.session(cfg))
    account = aws_account(cfg) if cfg.existing_cluster.uses_aws else None
    if account is not None:
        existing_cluster_checks(cfg, account, world)
    # What the identity may do there, then what the cluster already runs, decides each operator; a
    # stop leaves nothing registered.
    check_stack_rights(cfg, account, world)
    decisions = existing_operators(cfg, account, world)
    renames = shared_cluster_names(cfg, account, world)
    # Everything the stack makes in a namespace others may use, and cluster-wide, carries its name.
    pulumi.runtime.register_resource_transform(labelled_as_stack(cfg.training_namespace, cfg.stack))
    pulumi.runtime.register_resource_transform(scoped_cluster_names(renames, cfg.stack))
    build = build_plane(cfg, account) if account is not None else local_build_plane(cfg, world)
    compute = attached_compute_plane(cfg, account, build.bucket)
    operators = operators_plane(cfg, compute, decisions)
    queues = queueing_plane(cfg, compute, operators)
    tracking = tracking_plane(cfg, account, build, compute)
    datasets = datasets_plane(cfg, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking, datasets, storage=None)
    return outputs(cfg, build, compute, operators, queues, jobs) | tracking_outputs(tracking)
