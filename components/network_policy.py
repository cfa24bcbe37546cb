"""NetworkPolicies: namespaces whose pods accept only the connections the stack's flows need.

Each namespace gets a default-deny ingress policy and one policy per allowed flow. The semantics are
those of `networking.k8s.io/v1` NetworkPolicy: a pod that any policy of type Ingress selects accepts
only what one of those policies allows (the allows add up); an empty podSelector selects every pod
in the policy's namespace; a peer that names a namespaceSelector and a podSelector matches pods that
satisfy both; a peer with only a podSelector means the policy's own namespace; no ports means every
port. Egress stays open: jobs reach S3, the registry, Hugging Face and DNS.

The VPC CNI's network policy agent enforces them (components/cluster.py turns it on), and always
lets the node's own address in, so kubelet probes need no rule (aws/aws-network-policy-agent #65,
"Ignore policy restrictions against Node IP"). EFA traffic (libfabric over SRD) bypasses the kernel's
IP stack and these rules alike; NCCL's and gloo's TCP bootstrap does not, hence the per-job rule
(each job kind's own flows: components/jobs/, `JobKind.allows`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from conventions import DEFAULT_DENY_POLICY, JOB_LABEL, PART_OF

# The API server sets this label on every namespace (Kubernetes >= 1.21): what a peer names a
# namespace by.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class Allow:
    """One flow: into the pods `pods` selects, from `sources` (NetworkPolicy peers), on TCP `ports`
    (none: every port)."""

    name: str
    pods: dict[str, Any]
    sources: tuple[dict[str, Any], ...]
    ports: tuple[int, ...] = ()


@dataclass(frozen=True)
class NamespacePoliciesArgs:
    provider: k8s.Provider
    namespace: str
    namespace_resource: pulumi.Resource  # the policies go in once it exists
    allows: tuple[Allow, ...]
    # The deny's object name and the pods it selects (every pod: a namespace the stack owns). In a
    # namespace the stack does not own: a name of its own, and the stack's pods only, so the
    # owner's pods and other users' jobs keep their traffic.
    deny_name: str = DEFAULT_DENY_POLICY
    deny_pods: dict[str, Any] | None = None


def tracking_allows(
    training_namespace: str,
    server: dict[str, str],
    port: int,
    database: dict[str, str] | None,
    database_port: int,
    provisioner: dict[str, str],
) -> tuple[Allow, ...]:
    """The MLflow server from the training namespace's job pods and the Jobs beside it that create
    each job's user only; its in-cluster database (None: RDS, outside the cluster) from the server
    only."""
    jobs = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: training_namespace}},
        "podSelector": {"matchExpressions": [{"key": JOB_LABEL, "operator": "Exists"}]},
    }
    users = {"podSelector": {"matchLabels": dict(provisioner)}}
    allows = [Allow("mlflow-server", {"matchLabels": dict(server)}, (jobs, users), (port,))]
    if database is not None:
        allows.append(
            Allow(
                "mlflow-database",
                {"matchLabels": dict(database)},
                ({"podSelector": {"matchLabels": dict(server)}},),
                (database_port,),
            )
        )
    return tuple(allows)


def policy_spec(allow: Allow | None, deny_pods: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec of one allow, or (None) of the default deny: the pods `deny_pods` selects (None:
    every pod of the namespace), no rule."""
    if allow is None:
        return {"podSelector": dict(deny_pods or {}), "policyTypes": ["Ingress"]}
    rule: dict[str, Any] = {"from": list(allow.sources)}
    if allow.ports:
        rule["ports"] = [{"protocol": "TCP", "port": p} for p in allow.ports]
    return {"podSelector": allow.pods, "policyTypes": ["Ingress"], "ingress": [rule]}


class NamespacePolicies(pulumi.ComponentResource):
    """A namespace's default-deny ingress and its allowed flows (token
    trainstack:network_policy:NamespacePolicies). The allows go in first, so that turning the deny
    on never cuts a running job off from its own pods."""

    def __init__(self, name: str, args: NamespacePoliciesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:network_policy:NamespacePolicies", name, None, opts)
        allows = [self._policy(name, args, a.name, policy_spec(a), []) for a in args.allows]
        deny = self._policy(
            name, args, DEFAULT_DENY_POLICY, policy_spec(None, args.deny_pods), allows, args.deny_name
        )
        self.policies: list[pulumi.Resource] = [*allows, deny]
        self.register_outputs({"policies": [a.name for a in args.allows]})

    def _policy(
        self,
        name: str,
        args: NamespacePoliciesArgs,
        policy: str,
        spec: dict[str, Any],
        after: list,
        object_name: str | None = None,
    ) -> k8s.networking.v1.NetworkPolicy:
        return k8s.networking.v1.NetworkPolicy(
            f"{name}-{policy}",
            metadata={"name": object_name or policy, "namespace": args.namespace, "labels": PART_OF},
            spec=spec,
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, depends_on=[args.namespace_resource, *after]
            ),
        )
