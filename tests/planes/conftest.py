"""Plans the plane tests of several files share, made once per test process."""

from __future__ import annotations

import pytest
from support import jobs

from offline.engine import PlanRun


@pytest.fixture(scope="session")
def kinds_plan() -> PlanRun:
    """Every job kind on every kind of node group (support/jobs.py)."""
    return jobs.kinds_plan()
