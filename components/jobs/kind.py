"""The job-kind interface: what the jobs wing asks of each kind it launches. A kind is one module
of this package (pytorchjob.py, trainjob.py, rayjob.py, raycluster.py) and one entry in kinds.py's KINDS; the
config's `JobKind` lists the names. What every kind's pods share is in pods.py, HyperPod's overlay
in hyperpod.py; a VERL program runs on the Ray kinds (verl.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pulumi

from components.jobs.pods import TrainingJobArgs
from components.network_policy import Allow

if TYPE_CHECKING:
    from components.operators import ClusterOperators

# The other objects a stack sends, by (kind, name): where a job's pods come partly from another
# object (a TrainJob's runtime), its PodSets read it here.
Objects = Mapping[tuple[str, str], dict[str, Any]]
NO_OBJECTS: Objects = MappingProxyType({})


class JobKind(ABC):
    """One kind of training job: its manifest and its Kueue PodSets, its pods' network flows, the
    operator that runs it and how a person watches it. What the layers below need of it (its
    operator's config key, name limit, wait modes, pods on the system nodes) is domain.job_kinds'."""

    name: str  # the manifest's kind, as `jobs[].kind` names it
    api_version: str
    # Per `jobs[].wait` mode (not `none`): what `pulumi up` waits for (pulumi.com/waitFor).
    wait_for: Mapping[str, str]

    @property
    def kueue_framework(self) -> str:
        """Kueue's integration that queues this kind: `<API group>/<kind, lower case>`, as each of
        Kueue's job controllers names itself (kueue v0.19.2 pkg/controller/jobs/.../FrameworkName)."""
        return f"{self.api_version.rpartition('/')[0]}/{self.name.lower()}"

    @abstractmethod
    def spec(self, args: TrainingJobArgs) -> dict[str, Any]:
        """The manifest's spec, its pods built on pods.pod_template."""

    def annotations(self, args: TrainingJobArgs) -> dict[str, str]:
        """The manifest's own annotations, besides what `pulumi up` waits for."""
        return {}

    def shared(self, args: TrainingJobArgs) -> list[pulumi.Resource]:
        """What the job needs that the stack's jobs of its kind share (made by the first of them,
        kept in args.shared): the job waits for it."""
        return []

    @abstractmethod
    def pod_sets(
        self, manifest: dict[str, Any], objects: Objects = NO_OBJECTS
    ) -> list[tuple[str, dict[str, Any], int]]:
        """(name, pod template, count) per PodSet of a manifest of this kind, as Kueue's integration
        builds the job's Workload (what it admits whole)."""

    @abstractmethod
    def allows(self, job: str) -> tuple[Allow, ...]:
        """The job's own traffic between its pods (and from whoever calls them)."""

    @abstractmethod
    def operator(self, operators: ClusterOperators) -> pulumi.Resource | None:
        """The operator that runs the kind (None: installed outside the stack)."""

    @abstractmethod
    def retries(self, args: TrainingJobArgs) -> str:
        """What stops a job of this kind that keeps failing, in a sentence `trainstack status` prints."""

    @abstractmethod
    def logs_command(self, name: str, namespace: str) -> str:
        """The kubectl command that follows the job's logs."""

    def watch_commands(self, name: str, namespace: str) -> dict[str, str]:
        return {
            "watch": f"kubectl -n {namespace} get {self.name.lower()} {name} -w",
            "logs": self.logs_command(name, namespace),
        }
