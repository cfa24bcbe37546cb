"""What a controller of the stack's GPU nodes runs as, on a cluster the stack created (the health gate,
the hung-node fence): its service account, an EKS Pod Identity whose policy the controller gives,
its cluster-wide rights on nodes and pods, and the right to write Events, which for a Node go in
`default` (workload/trainer/kube_api.py EVENTS_NAMESPACE, which a test holds equal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.pod_identity import EksAccess, pod_identity
from conventions import PART_OF

EVENTS_NAMESPACE = "default"
RBAC_GROUP = "rbac.authorization.k8s.io"


def events_role(controller: str) -> dict[str, Any]:
    return {
        "metadata": {"name": controller, "namespace": EVENTS_NAMESPACE, "labels": dict(PART_OF)},
        "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
    }


@dataclass(frozen=True)
class ControllerIdentity:
    account: k8s.core.v1.ServiceAccount
    association: pulumi.Resource  # its Pod Identity association: credentials before its first round
    subjects: list[dict[str, Any]]  # the service account, for the controller's own bindings


def controller_identity(
    parent: pulumi.ComponentResource,
    name: str,
    controller: str,
    description: str,
    policy: pulumi.Input[str],
    provider: k8s.Provider,
    eks: EksAccess,
    namespace: pulumi.Input[str],
    cluster_role: dict[str, Any],
    waits_for: list[pulumi.Resource],
) -> ControllerIdentity:
    """The controller's identity and rights, children of `parent` named after `name`."""
    k8s_opts = pulumi.ResourceOptions(parent=parent, provider=provider, depends_on=waits_for)
    account = k8s.core.v1.ServiceAccount(
        f"{name}-account",
        metadata={"name": controller, "namespace": namespace, "labels": dict(PART_OF)},
        opts=k8s_opts,
    )
    _, _, association = pod_identity(
        name, description, policy, eks, namespace, controller, pulumi.ResourceOptions(parent=parent)
    )
    subjects = [{"kind": "ServiceAccount", "name": controller, "namespace": namespace}]
    nodes_role = k8s.rbac.v1.ClusterRole(f"{name}-nodes", **cluster_role, opts=k8s_opts)
    k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-nodes",
        metadata={"name": controller, "labels": dict(PART_OF)},
        role_ref={"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": nodes_role.metadata.name},
        subjects=subjects,
        opts=k8s_opts,
    )
    events = k8s.rbac.v1.Role(f"{name}-events", **events_role(controller), opts=k8s_opts)
    k8s.rbac.v1.RoleBinding(
        f"{name}-events",
        metadata={"name": controller, "namespace": EVENTS_NAMESPACE, "labels": dict(PART_OF)},
        role_ref={"apiGroup": RBAC_GROUP, "kind": "Role", "name": events.metadata.name},
        subjects=subjects,
        opts=k8s_opts,
    )
    return ControllerIdentity(account, association, subjects)
