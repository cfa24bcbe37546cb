"""The stack outputs: what `trainstack` and the offline plan read back (the contract in
`stack_outputs.py`)."""

from __future__ import annotations

from components.jobs.training_job import TrainingJob
from components.operators import ClusterOperators
from components.queueing import Queueing
from config import StackConfig
from domain.drivers import least_driver
from planes.build import BuildPlane
from planes.compute import ComputePlane
from stack_outputs import GpuNodeGroup, StackOutputs


def outputs(
    cfg: StackConfig,
    build: BuildPlane,
    compute: ComputePlane,
    operators: ClusterOperators,
    queues: Queueing,
    jobs: list[TrainingJob],
) -> StackOutputs:
    pods = compute.pod_identity
    found: StackOutputs = {
        "clusterName": compute.cluster_name,
        "trainingNamespace": pods.namespace_name,
        "gpuNodeGroups": gpu_group_outputs(cfg, compute),
        "operators": {
            **{
                key: f"{r.namespace}/{r.release}"
                for key, r in (operators.installed_charts | queues.installed_charts).items()
            },
            "trainingOperator": operators.training_operator_url,
        },
        "jobs": {j.spec_name: j.summary for j in jobs},
        "gpusTotal": sum(compute.placements[g.name].gpus * g.node_count for g in cfg.gpu_node_groups),
    }
    needed = least_driver(cfg.image.base_image)
    if needed is not None:
        found["driverNeeded"] = needed
    if compute.kubeconfig is not None:
        found["kubeconfig"] = compute.kubeconfig
    if compute.kubeconfig_file is not None:  # the user's own file: `trainstack` reads it from there
        found["kubeconfigFile"] = compute.kubeconfig_file
        found["kubeContext"] = compute.kube_context
    if pods.role_arn is not None:
        found["trainingRoleArn"] = pods.role_arn
    if build.bucket is not None:
        found["bucketName"] = build.bucket.bucket_name
    if build.registry is not None:
        found["repositoryUrl"] = build.registry.repository_url
    if build.image is not None:
        found["imageUri"] = build.image.image_uri
    return found


def gpu_group_outputs(cfg: StackConfig, compute: ComputePlane) -> dict[str, GpuNodeGroup]:
    created = {ng.group_name: ng for ng in (compute.own.node_groups if compute.own else [])}
    found: dict[str, GpuNodeGroup] = {}
    for g in cfg.gpu_node_groups:
        p, ng = compute.placements[g.name], created.get(g.name)
        autoscaled = ng is not None and ng.autoscaled
        found[g.name] = {
            # The stack's node group, or (existing cluster) how its nodes are found.
            **({"nodeGroupName": ng.node_group_name} if ng else {"nodeSelector": dict(p.node_selector)}),
            "instanceType": g.instance_type,
            "nodes": g.node_count,
            "minNodes": g.min_nodes if autoscaled else g.node_count,
            "autoscaled": autoscaled,
            "gpusPerNode": p.gpus,
            "efaInterfacesPerNode": p.efa,
        }
    return found
