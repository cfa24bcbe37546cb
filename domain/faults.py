"""Faults in a default-trainer job's goodput: how often its gang meets one, what each costs, and the
checkpoint interval that keeps the loss least (Young, "A first order approximation to the optimum
checkpoint interval", 1974; Daly 2006 refines it for long saves).

Every fault stops the whole gang. The survivors wait in a collective until its timeout
(`--collective-timeout`), the gang restarts (new pods, the checkpoint fetched, the model compiled,
the preflight) and resumes from the newest complete checkpoint, so on average half an interval of
training is done again. With `M` the gang's mean time between faults and `C` what a save stalls,
saving every `sqrt(2 C M)` of training loses the least to saves and repeated work together.

Figures the model assumes, named so a measured run can replace them:
- FAULTS_PER_MILLION_GPU_HOURS: Llama 3's pre-training run ("The Llama 3 Herd of Models", Meta 2024,
  section 3.3.4) met 419 unexpected interruptions in 54 days on 16,384 H100s, 19.7 per million
  GPU-hours; a group's `faultsPerMillionGpuHours` replaces it.
- RESTART_S: from the gang's restart to its next step: pods started cold, the checkpoint fetched
  from S3, `torch.compile` from nothing, the preflight; 2-4 minutes by estimate (issue #60), 3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FAULTS_PER_MILLION_GPU_HOURS = 20.0
RESTART_S = 180.0


@dataclass(frozen=True)
class Faults:
    mtbf_s: float  # the gang's mean time between faults
    detect_s: float  # the survivors' wait in a collective with a dead peer
    restart_s: float
    interval_s: float  # training between two saves; 0: none, a fault loses the run so far
    save_s: float  # what one save stalls training

    @property
    def lost_s(self) -> float:
        """What one fault costs on average: the wait, the restart, half an interval done again."""
        return self.detect_s + self.restart_s + self.interval_s / 2

    @property
    def goodput(self) -> float:
        """The share of time left to training by faults (the saves' own stalls aside)."""
        return max(0.0, 1.0 - self.lost_s / self.mtbf_s)

    @property
    def best_interval_s(self) -> float:
        """Young's interval: the least saves plus repeated work for this save cost."""
        return math.sqrt(2 * self.save_s * self.mtbf_s)


def gang_faults(
    gpus: int, per_million_gpu_hours: float, detect_s: float, interval_s: float, save_s: float
) -> Faults:
    """The faults of a gang of `gpus`, each failing at `per_million_gpu_hours`."""
    mtbf_h = 1e6 / (per_million_gpu_hours * gpus)
    return Faults(mtbf_h * 3600, detect_s, RESTART_S, interval_s, save_s)
