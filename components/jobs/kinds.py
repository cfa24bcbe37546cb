"""The kinds the jobs wing launches, by the name `jobs[].kind` gives (config.jobs.JobKind)."""

from __future__ import annotations

from components.jobs.kind import JobKind
from components.jobs.pytorchjob import PYTORCHJOB
from components.jobs.raycluster import RAYCLUSTER
from components.jobs.rayjob import RAYJOB
from components.jobs.trainjob import TRAINJOB

KINDS: dict[str, JobKind] = {k.name: k for k in (PYTORCHJOB, RAYJOB, RAYCLUSTER, TRAINJOB)}
