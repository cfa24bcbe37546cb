"""IAM policy documents shared by the components."""

from __future__ import annotations

PODS_SERVICE = "pods.eks.amazonaws.com"  # EKS Pod Identity


def service_trust(service: str, actions: tuple[str, ...] = ("sts:AssumeRole",)) -> dict:
    """Trust policy letting an AWS service principal assume a role."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": actions[0] if len(actions) == 1 else list(actions),
            }
        ],
    }


def pod_identity_trust(cluster_name: str, namespace: str, service_account: str) -> dict:
    """Trust for EKS Pod Identity, narrowed to one cluster's service account by the session tags
    Pod Identity sets on AssumeRole and TagSession (EKS user guide, "Create IAM role with trust
    policy required by EKS Pod Identity"): without them any association in the account that names
    the role, on any cluster, would get it."""
    trust = service_trust(PODS_SERVICE, ("sts:AssumeRole", "sts:TagSession"))
    trust["Statement"][0]["Condition"] = {
        "StringEquals": {
            "aws:RequestTag/eks-cluster-name": cluster_name,
            "aws:RequestTag/kubernetes-namespace": namespace,
            "aws:RequestTag/kubernetes-service-account": service_account,
        }
    }
    return trust
