"""Datasets plane: each declared dataset prepared once into the stack's bucket, on the system nodes,
before the jobs that name it (planes/jobs.py gives them its location and makes them wait)."""

from __future__ import annotations

import pulumi
from botocore.exceptions import ClientError

from account_checks.world import World
from components.bucket import DATASET_PREFIX
from components.datasets import DatasetPreparation, DatasetPreparationArgs
from components.pod_identity import EksAccess
from config import StackConfig
from config.job_inputs import unmade_mount_paths
from conventions import DATASETS_MOUNT, SYSTEM_GROUP
from domain.names import IAM_ROLE_NAME_MAX, PROJECT, fit
from planes.build import BuildPlane
from planes.compute import ComputePlane


def datasets_plane(
    cfg: StackConfig, build: BuildPlane, compute: ComputePlane
) -> dict[str, DatasetPreparation]:
    """Per dataset name, its preparation; none on a kubeconfig stack (the config refuses datasets
    there: no bucket, no Pod Identity)."""
    if not cfg.datasets or build.bucket is None or build.image_uri is None:
        return {}
    # An attached EKS cluster's Pod Identity is reached by its name, as planes/attached.py does.
    eks = compute.own.eks if compute.own else EksAccess(compute.cluster_name, [])
    pods = compute.pod_identity
    waits = [r for r in (pods.namespace, compute.system_nodes) if r is not None]
    bucket = build.bucket
    return {
        d.name: DatasetPreparation(
            f"dataset-{d.name}",
            DatasetPreparationArgs(
                spec=d.spec,
                image=build.image_uri,
                bucket_name=bucket.bucket_name,
                bucket_arn=bucket.arn,
                kms_key_arn=bucket.kms_key.arn if bucket.kms_key else None,
                provider=compute.provider,
                namespace=pods.namespace_name,
                eks=eks,
                role_name=fit(f"{PROJECT}-{cfg.stack}-data-{d.name}", IAM_ROLE_NAME_MAX),
                node_selector=dict(compute.placements[SYSTEM_GROUP].node_selector),
                timeout_minutes=d.timeout_minutes,
                waits_for=waits,
            ),
        )
        for d in cfg.datasets
    }


def missing_mounted_files(s3, bucket: str, paths: list[tuple[str, str]]) -> list[str]:
    """Each path under the datasets mount whose object the bucket lacks, as one sentence naming
    the job's key. `s3`: a boto3 S3 client."""
    missing = []
    for key, path in paths:
        obj = DATASET_PREFIX + path.removeprefix(f"{DATASETS_MOUNT}/")
        try:
            s3.head_object(Bucket=bucket, Key=obj)
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            missing.append(
                f"{key}: reads {path}, and s3://{bucket}/{obj} does not exist; upload it there, or "
                "declare the dataset under datasets and name it in the job's `dataset`"
            )
    return missing


def check_mounted_files(cfg: StackConfig, build: BuildPlane, world: World) -> None:
    """`pulumi preview` (and `up`) stops where a job reads a file under the datasets mount that no
    declared dataset makes and the bucket does not hold. Offline the plan warns instead: it has no
    bucket to read (offline/plan.py)."""
    paths = unmade_mount_paths(cfg.jobs, cfg.datasets)
    if not paths or build.bucket is None or not world.strict:
        return

    def check(bucket: str) -> str:
        missing = missing_mounted_files(world.session(cfg)().client("s3"), bucket, paths)
        if missing:
            raise pulumi.RunError(
                "files the jobs read are not in the bucket:\n" + "\n".join(f"  - {m}" for m in missing)
            )
        return bucket

    build.bucket.bucket_name.apply(check)
