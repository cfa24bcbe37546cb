"""An EKS cluster the stack did not create: it exists in this account and region, and it can give
the training pods an identity (the Pod Identity agent add-on, which the stack does not install on
someone else's cluster)."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws

from account_checks.report import Check
from config import PROJECT, StackConfig


def existing_cluster_checks(cfg: StackConfig, account_id: str, opts: pulumi.InvokeOptions) -> list[Check]:
    name = cfg.existing_cluster.eks_cluster_name
    key = f"{PROJECT}:existingCluster.eksClusterName"
    clusters = aws.eks.get_clusters(opts=opts).names
    if name not in clusters:
        return [
            Check(
                "EKS cluster",
                f"{name} in {cfg.region}",
                ", ".join(clusters) or "no cluster",
                f"{key} = {name}: no EKS cluster of that name in {cfg.region} for account {account_id}; "
                f"allowed: {', '.join(clusters) or 'a cluster of this account and region (or set aws:region)'}",
            )
        ]
    version = aws.eks.get_cluster(name=name, opts=opts).version
    return [
        Check("EKS cluster", f"{name} in {cfg.region}", f"{name}, Kubernetes {version}"),
        _pod_identity_agent(name, key, opts),
    ]


def _pod_identity_agent(name: str, key: str, opts: pulumi.InvokeOptions) -> Check:
    needs = "the eks-pod-identity-agent add-on (training pods get the bucket through Pod Identity)"
    try:
        found = aws.eks.get_addon(cluster_name=name, addon_name="eks-pod-identity-agent", opts=opts)
    except Exception as err:  # the provider answers ResourceNotFoundException for a missing add-on
        said = str(err)
        if not any(s in said for s in ("ResourceNotFound", "not found", "couldn't find")):
            raise
        return Check(
            "Pod Identity agent",
            needs,
            "not installed",
            f"{key} = {name}: the cluster has no eks-pod-identity-agent add-on, so training pods would get "
            "no AWS identity; allowed: a cluster with it (its owner runs: aws eks create-addon "
            f"--cluster-name {name} --addon-name eks-pod-identity-agent)",
        )
    return Check("Pod Identity agent", needs, f"{found.addon_version}")
