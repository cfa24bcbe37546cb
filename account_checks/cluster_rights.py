"""What the stack's identity may do on a cluster it did not create, asked before anything is read or
registered there: a SelfSubjectAccessReview per right (authorization.k8s.io/v1, which every
authenticated user may create through system:basic-user), so that an identity scoped to one
namespace (a HyperPod team's, an access entry with a namespace-scoped policy) is told in one sentence
every right it lacks, instead of a 403 halfway through `up`."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from account_checks.cluster_access import ClusterAddress, ClusterReader


@dataclass(frozen=True)
class Right:
    verb: str
    group: str  # "" for the core API
    resource: str
    namespace: str | None = None  # None: cluster-wide
    name: str | None = None  # one object's; None: any

    @property
    def named(self) -> str:
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        resource += f"/{self.name}" if self.name else ""
        return f"{self.verb} {resource} {f'in {self.namespace}' if self.namespace else '(cluster-wide)'}"


class ClusterRightsError(pulumi.RunError):
    def __init__(self, stack: str, address: ClusterAddress, why: str, denied: list[Right]):
        super().__init__(
            f"stack '{stack}': the cluster {address.named} does not let the identity the stack runs as {why}: "
            f"it may not {'; '.join(r.named for r in denied)}; nothing was created; allowed: an identity with "
            "those rights (on EKS, an access entry with AmazonEKSClusterAdminPolicy, or a ClusterRole "
            "granting them bound to it)"
        )


def check_rights(reader: ClusterReader, rights: list[Right], why: str) -> None:
    """Stops (ClusterRightsError) naming every right of `rights` the cluster denies; `why`: what
    they are for, as a clause ("make the stack's queues and jobs")."""
    unique = list(dict.fromkeys(rights))
    denied = [r for r in unique if not reader.allowed(r.verb, r.group, r.resource, r.namespace, r.name)]
    if denied:
        raise ClusterRightsError(reader.stack, reader.address, why, denied)
