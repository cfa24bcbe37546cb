"""A cluster trainstack did not create: the Kubernetes provider the stack's operators, queues and
jobs go through, and nothing else. The cluster, its nodes and its add-ons stay as they are.

An EKS cluster is read by name (its endpoint and CA) and reached with `aws eks get-token`, as the
kubeconfig of a cluster the stack creates is; any other cluster through a kubeconfig file and
context the user names, read by the provider when it runs (kind on a laptop).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class AttachedClusterArgs:
    eks_cluster_name: str | None  # an EKS cluster, or
    kubeconfig_path: str | None  # a kubeconfig file (absolute), with
    context: str | None  # its context (None: the file's current one)
    region: str
    aws_profile: str | None


def eks_kubeconfig(
    name: str, endpoint: str, ca_data: str, region: str, profile: str | None
) -> dict[str, Any]:
    """A kubeconfig whose user runs `aws eks get-token` (the aws CLI where Pulumi runs), with the
    stack's profile named: ambient credentials would otherwise win."""
    token = ["--region", region, "eks", "get-token", "--cluster-name", name, "--output", "json"]
    if profile:
        token += ["--profile", profile]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": endpoint, "certificate-authority-data": ca_data}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "users": [
            {
                "name": name,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": token,
                    }
                },
            }
        ],
    }


class AttachedCluster(pulumi.ComponentResource):
    def __init__(
        self,
        name: str,
        args: AttachedClusterArgs,
        opts: pulumi.ResourceOptions | None = None,
        invoke_opts: pulumi.InvokeOptions | None = None,
    ):
        super().__init__("trainstack:compute:AttachedCluster", name, None, opts)
        self.kubeconfig: pulumi.Output[str] | None = None
        self.kubeconfig_file = args.kubeconfig_path
        self.context = args.context
        if args.eks_cluster_name is not None:
            found = aws.eks.get_cluster(name=args.eks_cluster_name, opts=invoke_opts)
            config = eks_kubeconfig(
                found.name,
                found.endpoint,
                found.certificate_authorities[0].data,
                args.region,
                args.aws_profile,
            )
            self.cluster_name: str = found.name
            self.kubernetes_version: str | None = found.version
            self.kubeconfig = pulumi.Output.secret(json.dumps(config))
            provider_args: dict[str, Any] = {"kubeconfig": self.kubeconfig}
        else:
            self.cluster_name = args.context or "current-context"
            self.kubernetes_version = None
            # The path, read by the provider when it runs: the file stays the user's, and the state
            # holds no copy of its credentials.
            provider_args = {"kubeconfig": args.kubeconfig_path, "context": args.context}
        self.provider = k8s.Provider(
            f"{name}-k8s",
            **provider_args,
            # Large CRDs (PyTorchJob, RayJob) exceed the client-side apply annotation limit.
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        # For the CRDs the stack applies itself (the training operator's, KubeRay's), which a `destroy`
        # keeps on this cluster (components/operators.py retained_crds): installing again, by this stack
        # or another, must take over the kept CRD, where the provider's create (a plain POST since
        # pulumi-kubernetes 4.29, PR #4278) answers AlreadyExists. Only CRDs the operators' decisions
        # found absent or kept by a trainstack stack reach it (account_checks/operator_decisions.py).
        self.crd_provider = k8s.Provider(
            f"{name}-k8s-crds",
            **provider_args,
            enable_server_side_apply=True,
            upsert_existing_objects=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"clusterName": self.cluster_name})
