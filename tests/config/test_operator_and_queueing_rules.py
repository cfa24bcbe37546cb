"""The rules of `trainstack:operators` and `trainstack:queueing`, each refusal naming its key."""

from __future__ import annotations

import pytest
from support.config_rules import problems
from support.plans import plan, stack_values

from config import parse_config
from config.schema import ConfigError


def test_a_moving_ref_is_refused():
    with pytest.raises(ConfigError, match=r"trainingOperator.ref = \"v1.9.4\": not a full commit SHA"):
        plan("dev", operators={"trainingOperator": {"ref": "v1.9.4"}})


def test_kuberay_older_than_its_crds_is_refused():
    with pytest.raises(ConfigError, match=r'trainstack:operators\.kuberay\.version = "1\.6\.0"'):
        parse_config("dev", stack_values("dev", operators={"kuberay": {"version": "1.6.0"}}))


def test_queueing_timings_are_bounded():
    found = problems(
        queueing={"idleNodeMinutes": 0, "podsReadyTimeoutMinutes": 241, "maxNodeProvisionMinutes": 4}
    )
    assert found == [
        "trainstack:queueing.idleNodeMinutes = 0: out of range; allowed: 1-1440",
        "trainstack:queueing.podsReadyTimeoutMinutes = 241: out of range; allowed: 1-240",
        "trainstack:queueing.maxNodeProvisionMinutes = 4: out of range; allowed: 5-120",
    ]


def test_a_pods_ready_timeout_shorter_than_the_image_pull_is_refused():
    with pytest.raises(ConfigError) as err:
        parse_config("prod", stack_values("prod", queueing={"podsReadyTimeoutMinutes": 2}))
    (problem,) = [p for p in err.value.problems if "podsReadyTimeoutMinutes" in p.key]
    assert problem.key == "trainstack:queueing.podsReadyTimeoutMinutes"
    assert "Kueue would evict every job before it could run" in str(err.value)
    assert "allowed: 3 or more" in str(err.value)
