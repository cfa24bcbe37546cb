"""Storage plane: FSx for Lustre for the groups that keep checkpoints on it, the datasets through
Mountpoint, and the rule for where each job keeps its checkpoints (a relaunch finds them again)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pulumi

from account_checks import AccountFacts
from components.bucket import CHECKPOINT_PREFIX, ArtifactBucket
from components.jobs.pods import Checkpoints
from components.pod_identity import TrainingPodIdentity
from components.shared_storage import FsxCheckpoints, FsxCheckpointsArgs, S3Datasets, S3DatasetsArgs
from config import JobConfig, StackConfig
from planes.account import Account
from planes.build import BuildPlane
from planes.compute import OwnCluster


@dataclass(frozen=True)
class SharedStorage:
    """What jobs mount besides their own volumes."""

    fsx: FsxCheckpoints | None
    fsx_groups: frozenset[str]  # GPU groups whose jobs keep checkpoints on it
    datasets: S3Datasets | None


def shared_storage(
    cfg: StackConfig,
    account: Account,
    facts: AccountFacts,
    own: OwnCluster,
    pods: TrainingPodIdentity,
    bucket: ArtifactBucket,
) -> SharedStorage:
    """FSx for Lustre in the AZ of the groups that mount it (the account checks made sure it is
    one), and the datasets through Mountpoint, on the stack's own cluster (the config refuses them
    elsewhere)."""
    network, cluster = own.network, own.cluster
    fsx = None
    if cfg.fsx_groups:
        zone = facts.zones.group_zones[sorted(cfg.fsx_groups)[0]]
        f = cfg.storage.fsx
        fsx = FsxCheckpoints(
            "checkpoints-fsx",
            FsxCheckpointsArgs(
                cluster=cluster,
                subnet_id=network.private_subnet_by_zone[zone],
                vpc_id=network.vpc_id,
                client_security_group_ids=[cluster.cluster_security_group_id],
                storage_capacity_gib=f.storage_capacity_gib,
                throughput_per_tib=f.throughput_per_tib,
                bucket=bucket,
                account_id=account.account_id,
                region=cfg.region,
                namespace=pods.namespace,
                namespace_name=pods.namespace_name,
                protect=cfg.storage.protect,
            ),
            account.opts,
        )
    datasets = None
    if cfg.storage.datasets_mount:
        datasets = S3Datasets(
            "datasets-s3",
            S3DatasetsArgs(
                cluster=cluster,
                bucket=bucket,
                namespace=pods.namespace,
                namespace_name=pods.namespace_name,
                region=cfg.region,
                maximum_throughput_gbps=dataset_throughput_gbps(cfg),
            ),
            account.opts,
        )
    return SharedStorage(fsx, frozenset(cfg.fsx_groups), datasets)


def dataset_throughput_gbps(cfg: StackConfig) -> float | None:
    """One volume serves every job: the smallest network of the GPU groups that run jobs, so no
    node's Mountpoint reads past its link (and its memory); None without such a job."""
    groups = {g.name: g for g in cfg.gpu_node_groups}
    links = [groups[j.node_group].instance.network_gbps for j in cfg.jobs if j.node_group in groups]
    return min(links, default=None)


def storage_claims(storage: SharedStorage | None) -> list[pulumi.Resource]:
    """The claims a job's pods mount: they must be bound before the pods start."""
    if storage is None:
        return []
    return [s.claim for s in (storage.fsx, storage.datasets) if s is not None]


CheckpointHome = Literal["fsx", "claim", "host_path", "s3"]


def checkpoint_home(cfg: StackConfig, group: str) -> CheckpointHome:
    """Where a job on `group` keeps its checkpoints: the stack's FSx, the user's claim, the nodes'
    shared path (kind), or a node volume the default trainer mirrors to S3."""
    e = cfg.existing_cluster
    if group in cfg.fsx_groups:
        return "fsx"
    if e.checkpoint_claim:
        return "claim"
    if e.checkpoint_host_path:
        return "host_path"
    return "s3"


def checkpoints_die_with_pods(cfg: StackConfig, job: JobConfig) -> bool:
    """Only the default trainer copies its checkpoints to S3 (`--s3-checkpoints`): VERL, a command
    or whatever runs on a RayCluster writes to the pod's emptyDir alone, gone with the pod."""
    return checkpoint_home(cfg, job.node_group) == "s3" and not job.runs_default_trainer


def checkpoints(
    cfg: StackConfig, build: BuildPlane, storage: SharedStorage | None, group: str, job: str
) -> Checkpoints:
    """A job's checkpoints, one directory per job: a relaunch finds them under the same job name;
    the default trainer keeps those storage.checkpointsKept and checkpointKeepEvery name."""
    e = cfg.existing_cluster
    home = checkpoint_home(cfg, group)
    keep = {"keep": cfg.storage.checkpoints_kept, "keep_every": cfg.storage.checkpoint_keep_every}
    if home == "fsx" and storage is not None and storage.fsx is not None:
        # The file system exports to S3 itself: no per-rank upload, and a relaunch finds them there.
        return Checkpoints(
            claim=storage.fsx.claim_name, sub_path=f"{CHECKPOINT_PREFIX}{job}", node_data_cache=True, **keep
        )
    if home == "claim" and e.checkpoint_claim:
        # The kubelet creates the sub-directory on the claim's volume when it is missing.
        return Checkpoints(claim=e.checkpoint_claim, sub_path=f"{CHECKPOINT_PREFIX}{job}", **keep)
    if home == "host_path" and e.checkpoint_host_path:
        return Checkpoints(host_path=f"{e.checkpoint_host_path.rstrip('/')}/{job}", **keep)
    if e.s3:
        uri = f"{e.s3.uri.rstrip('/')}/{CHECKPOINT_PREFIX}{job}/"
        return Checkpoints(uri, e.s3.credentials_secret, **keep)
    uri = pulumi.Output.concat("s3://", build.bucket.bucket_name, f"/{CHECKPOINT_PREFIX}{job}/")
    # On the stack's own cluster, its nodes keep the dataset cache.
    return Checkpoints(uri, node_data_cache=not e.named, **keep)
