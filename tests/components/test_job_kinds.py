"""The two halves of a job kind agree: its facts (domain.job_kinds, what the config and the quotas
read) and its module in the jobs wing (components/jobs/, what the stack launches), for every kind
the config lists."""

from __future__ import annotations

from typing import get_args

import pytest

from components.jobs.kinds import KINDS as WING
from config.jobs import JobConfig
from domain.job_kinds import KINDS as FACTS
from stack_outputs import JobKind


def test_every_kind_the_config_lists_has_its_facts_and_its_module():
    assert JobConfig.__dataclass_fields__["kind"].type == "JobKind"
    assert list(get_args(JobKind)) == list(FACTS) == list(WING)


@pytest.mark.parametrize("kind", list(WING))
def test_a_kind_waits_only_for_what_it_can_reach(kind):
    assert set(WING[kind].wait_for) == set(FACTS[kind].waits)
    assert WING[kind].name == FACTS[kind].name == kind
