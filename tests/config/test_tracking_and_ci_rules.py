"""The rules of `trainstack:tracking` and `trainstack:ci`, each refusal naming its key."""

from __future__ import annotations

import pytest
from support.plans import plan, stack_values

from config.schema import ConfigError
from offline.engine import run_program


@pytest.mark.parametrize(
    ("tracking", "secrets", "key", "reason"),
    [
        ({"mode": "external"}, {}, "trainstack:tracking.uri", "needs the server's URI"),
        (
            {"mode": "external", "uri": "https://m.example.com"},
            {"trackingPassword": "pw"},
            "trainstack:tracking.username",
            "without a user",
        ),
        (
            {"mode": "server", "uri": "https://m.example.com"},
            {},
            "trainstack:tracking.uri",
            "only read with mode external",
        ),
        (
            {"mode": "server", "server": {"instanceClass": "db.x9.huge"}},
            {},
            "trainstack:tracking.server.instanceClass",
            "not offered",
        ),
        ({"mode": "server", "server": {"storageGiB": 5}}, {}, "trainstack:tracking.server.storageGiB", ""),
        ({"mode": "server", "server": {"database": "sqlite"}}, {}, "trainstack:tracking.server.database", ""),
    ],
)
def test_bad_tracking_config_names_its_key(tracking, secrets, key, reason):
    values = stack_values("dev", tracking=tracking)
    for k, v in secrets.items():
        values[f"trainstack:{k}"] = v
    with pytest.raises(ConfigError) as err:
        run_program("dev", values, [f"trainstack:{k}" for k in secrets])
    assert key in str(err.value) and reason in str(err.value)


def test_a_tracking_token_must_be_a_secret():
    values = stack_values("dev", tracking={"mode": "external", "uri": "https://m.example.com"})
    values["trainstack:trackingToken"] = "plain-token"
    with pytest.raises(ConfigError) as err:
        run_program("dev", values)
    assert "trainstack:trackingToken" in str(err.value) and "plain-token" not in str(err.value)


def test_ci_settings_without_a_repository_are_errors():
    with pytest.raises(ConfigError, match=r"trainstack:ci.environment = \"prod\": CI access is off"):
        plan("dev", ci={"environment": "prod"})
    with pytest.raises(ConfigError, match="the immutable subject format needs both numeric ids"):
        plan("dev", ci={"githubRepository": "acme/train", "githubOwnerId": 1})
