"""A stack on a cluster it creates, plane by plane, as in the architecture diagram:

    account (provider; quotas, AZs, reservations: nothing registered if one fails)
      ->  build plane (bucket, registry, image)  ->  compute plane (VPC, EKS, GPU nodes, pod IAM)
      ->  shared storage (FSx for Lustre, datasets through Mountpoint)
      ->  operators plane (device plugins, training operator, KubeRay)
      ->  queueing plane (Kueue queues per node group, cluster autoscaler)
      ->  health plane (the fence that lets a gang restart past a hung GPU node)
      ->  tracking plane (MLflow)  ->  jobs plane (each job of its kind, queued)

Each plane gets only what it needs from the one before; each returns the stack outputs it owns.
"""

from __future__ import annotations

import pulumi

from account_checks.world import World
from config import StackConfig
from planes.account import account_checks, aws_account
from planes.build import build_plane
from planes.ci import ci_access, ci_outputs, ci_runner
from planes.compute import compute_plane
from planes.datasets import check_mounted_files, datasets_plane
from planes.health import health_plane
from planes.jobs import jobs_plane
from planes.namespace_objects import own_cluster_relaunches
from planes.operators import operators_plane
from planes.outputs import outputs
from planes.queueing import queueing_plane
from planes.storage import shared_storage
from planes.tracking import tracking_outputs, tracking_plane
from stack_outputs import StackOutputs


def created_stack(cfg: StackConfig, world: World) -> StackOutputs:
    account = aws_account(cfg)
    facts = account_checks(cfg, account, world)
    own_cluster_relaunches(cfg, facts.running, world)  # a job whose kind changed is named first
    ci = ci_access(cfg, account)
    # Every role from here on carries the CI fence's boundary (CI may create no role without it).
    account = account.with_boundary(ci.boundary if ci else None)
    # The bucket's fence names the FSx file system's own linked role, and that file system comes
    # after the cluster: its id reaches the bucket's policy once the storage plane made it. Resolved
    # whatever happens in between: the SDK waits for every Output before it ends, so an unresolved
    # one would hang a run that stops with an error instead of showing it.
    fsx_ids, resolve_fsx_ids = pulumi.deferred_output()
    made: list[pulumi.Output[str]] = []
    try:
        build = build_plane(cfg, account, ci, fsx_ids)
        check_mounted_files(cfg, build, world)
        compute = compute_plane(cfg, account, facts, build.bucket, ci)
        storage = shared_storage(cfg, account, facts, compute.own, compute.pod_identity, build.bucket)
        if storage and storage.fsx:
            made.append(storage.fsx.file_system.id)
    finally:
        resolve_fsx_ids(pulumi.Output.from_input(made))
    operators = operators_plane(cfg, compute)
    queues = queueing_plane(cfg, compute, operators)
    health_plane(cfg, account, build, compute)
    tracking = tracking_plane(cfg, account, build, compute)
    datasets = datasets_plane(cfg, build, compute)
    jobs = jobs_plane(cfg, build, compute, operators, queues, tracking, datasets, storage)
    runner = ci_runner(cfg, account, ci, compute.own.private_network)
    return (
        outputs(cfg, build, compute, operators, queues, jobs)
        | tracking_outputs(tracking)
        | ci_outputs(ci, runner)
    )
