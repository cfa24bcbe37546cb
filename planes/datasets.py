"""Datasets plane: each declared dataset prepared once into the stack's bucket, on the system nodes,
before the jobs that name it (planes/jobs.py gives them its location and makes them wait)."""

from __future__ import annotations

from components.datasets import DatasetPreparation, DatasetPreparationArgs
from components.pod_identity import EksAccess
from config import StackConfig
from conventions import SYSTEM_GROUP
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
    eks = compute.eks or EksAccess(compute.cluster_name, [])
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
