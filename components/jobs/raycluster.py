"""RayCluster (KubeRay): a Ray cluster that runs until deleted; a person submits work to its head."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pulumi

from components.jobs.kind import NO_OBJECTS, JobKind, Objects
from components.jobs.pods import TrainingJobArgs
from components.jobs.ray import ray_allows, ray_cluster_spec, ray_pod_sets
from components.network_policy import Allow
from conventions import RAY_DASHBOARD_PORT

if TYPE_CHECKING:
    from components.operators import ClusterOperators


class RayCluster(JobKind):
    name = "RayCluster"
    api_version = "ray.io/v1"
    wait_for = MappingProxyType(
        {
            "admitted": "jsonpath={.spec.suspend}=false",
            "running": "condition=RayClusterProvisioned",
        }
    )

    def spec(self, args: TrainingJobArgs) -> dict[str, Any]:
        return ray_cluster_spec(args)

    def pod_sets(
        self, manifest: dict[str, Any], objects: Objects = NO_OBJECTS
    ) -> list[tuple[str, dict[str, Any], int]]:
        return ray_pod_sets(manifest["spec"])

    def allows(self, job: str) -> tuple[Allow, ...]:
        return ray_allows(job)

    def operator(self, operators: ClusterOperators) -> pulumi.Resource | None:
        return operators.kuberay

    def retries(self, args: TrainingJobArgs) -> str:
        return "none: KubeRay recreates a RayCluster's pods for as long as it exists"

    def logs_command(self, name: str, namespace: str) -> str:
        return f"kubectl -n {namespace} logs -f --prefix -l ray.io/cluster={name}"

    def watch_commands(self, name: str, namespace: str) -> dict[str, str]:
        port = f"{RAY_DASHBOARD_PORT}:{RAY_DASHBOARD_PORT}"
        dashboard = f"kubectl -n {namespace} port-forward svc/{name}-head-svc {port}"
        return {**super().watch_commands(name, namespace), "dashboard": dashboard}


RAYCLUSTER = RayCluster()
