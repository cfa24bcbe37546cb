"""The rules of `trainstack:image`, `trainstack:registry` and `trainstack:storage`, each refusal
naming its key."""

from __future__ import annotations

import json

import pytest
from support.config_rules import problems
from support.plans import plan

from config import parse_config
from config.schema import ConfigError


def test_image_rules():
    msgs = problems(
        image={"context": "nowhere", "builder": "docker", "nightlyRebuild": True, "buildTimeoutMinutes": 2}
    )
    assert (
        'trainstack:image.context = "nowhere": no Dockerfile in that directory; allowed: a directory holding a Dockerfile'
        in msgs
    )
    assert any(
        m.startswith(
            'trainstack:image.builder = "docker": nightlyRebuild and sourceRepository need CodeBuild'
        )
        for m in msgs
    )
    assert any(m.startswith("trainstack:image.buildTimeoutMinutes = 2: out of range") for m in msgs)


def test_protected_stack_cannot_force_delete_images():
    (msg,) = problems(storage={"protect": True}, registry={"forceDelete": True})
    assert msg.startswith("trainstack:registry.forceDelete = true: a protected stack keeps its images")


def test_docker_hub_token_must_be_a_secret():
    with pytest.raises(ConfigError) as err:
        parse_config(
            "dev",
            {
                "aws:region": "us-east-1",
                "trainstack:image": json.dumps({"dockerHubUsername": "me"}),
                "trainstack:dockerHubAccessToken": "dckr_pat_plain",
            },
        )
    assert "trainstack:dockerHubAccessToken" in str(err.value) and "must be a secret" in str(err.value)
    assert "dckr_pat_plain" not in str(err.value)


@pytest.mark.parametrize(
    ("fsx", "problem"),
    [
        (
            {"enabled": True, "storageCapacityGiB": 3600},
            "trainstack:storage.fsx.storageCapacityGiB = 3600: not a size",
        ),
        (
            {"enabled": True, "storageCapacityGiB": 1000},
            "trainstack:storage.fsx.storageCapacityGiB = 1000: not a size",
        ),
        (
            {"enabled": True, "throughputPerTiB": 200},
            "trainstack:storage.fsx.throughputPerTiB = 200: not a PERSISTENT_2",
        ),
        (
            {"enabled": True, "nodeGroups": ["a100"]},
            'trainstack:storage.fsx.nodeGroups = "a100": no GPU node group',
        ),
    ],
)
def test_invalid_file_systems_are_refused_with_the_key(fsx, problem):
    with pytest.raises(ConfigError) as err:
        plan("prod", storage={"fsx": fsx})
    assert any(str(p).startswith(problem) for p in err.value.problems), err.value.problems
