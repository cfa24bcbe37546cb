"""How long a default-trainer job takes to finish its steps, and what the nodes it adds to the idle
stack cost for that run.

Time from admission: the nodes, the image pull and the pod start (offline/timeline.py's `JobStart`),
then `steps` modeled steps (domain/step_time.py: FLOPs over the GPU's bf16 peak at the measured or assumed MFU),
stretched by the checkpoint stalls (the modeled goodput). The nodes a job adds beyond its group's
idle floor are paid from their launch until the cluster autoscaler removes them, which it does once
they have been unneeded for `scale-down-unneeded-time` (queueing.idleNodeMinutes; cluster-autoscaler
FAQ, "How does scale-down work?"): so that wait is part of the run's cost. Nodes the stack keeps
while idle are already in the idle total and add nothing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunEstimate:
    steps: int
    step_s: float  # one modeled step
    tokens_per_step: int  # over every rank: batch x sequence x world size
    goodput: float  # share of wall time spent training (1.0 where not modeled)
    start_minutes: float  # admission to the first step
    added_nodes: int  # beyond the group's idle floor
    node_hourly_usd: float | None  # one added node's price; None: unknown
    release_minutes: float  # an added node stays this long after the job before it is removed

    @property
    def training_s(self) -> float:
        return self.steps * self.step_s / self.goodput

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def wall_hours(self) -> float:
        """Admission to the last step."""
        return (self.start_minutes * 60 + self.training_s) / 3600

    @property
    def paid_node_hours(self) -> float:
        """Node-hours of the added nodes: their launch, the run, and the wait before they go."""
        if not self.added_nodes:
            return 0.0
        return self.added_nodes * (self.wall_hours + self.release_minutes / 60)

    @property
    def cost_usd(self) -> float | None:
        """What the run adds to the idle stack's bill; None when an added node's price is unknown."""
        if not self.added_nodes:
            return 0.0
        return None if self.node_hourly_usd is None else self.paid_node_hours * self.node_hourly_usd

    def usd_per_billion_tokens(self, nodes: int) -> float | None:
        """What the job's `nodes` cost for each billion tokens while they train (stalls and faults in
        the goodput included; the start and the idle wait left out); None: the price is unknown."""
        if self.node_hourly_usd is None or not self.steps:
            return None
        tokens = self.steps * self.tokens_per_step
        return nodes * self.node_hourly_usd * self.training_s / 3600 / (tokens / 1e9)
