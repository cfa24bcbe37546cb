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
        (
            {"mode": "external", "uri": "http://mlflow.internal:5000"},
            {"trackingToken": "t0ken"},
            'trainstack:tracking.uri = "http://mlflow.internal:5000": trackingToken would be sent in clear',
            "allowed: an https:// URI (credentials only over TLS), or no credentials",
        ),
        (
            {"mode": "external", "uri": "http://mlflow.internal:5000", "username": "ci"},
            {"trackingPassword": "pw"},
            "trainstack:tracking.uri",
            "trackingPassword would be sent in clear over http://",
        ),
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


def test_an_http_server_without_credentials_is_accepted():
    run = plan("dev", tracking={"mode": "external", "uri": "http://mlflow.internal:5000"})
    assert run.outputs["trackingUri"] == "http://mlflow.internal:5000"


def test_credentials_in_the_uri_are_refused_without_showing_them():
    for mode, uri in (
        ("external", "https://ci:hunter2@mlflow.example.com/"),
        ("external", "http://hunter2@mlflow.example.com"),
        ("server", "https://ci:hunter2@mlflow.example.com"),
    ):
        with pytest.raises(ConfigError) as err:
            plan("dev", tracking={"mode": mode, "uri": uri})
        message = str(err.value)
        assert "trainstack:tracking.uri" in message and "hunter2" not in message
        assert "(credentials)@mlflow.example.com" in message
        assert "credentials in the URI would be stored and handed to every pod in clear" in message
        assert "tracking.username with the secret trackingPassword" in message


def test_ci_settings_without_a_repository_are_errors():
    with pytest.raises(ConfigError, match=r"trainstack:ci.environment = \"prod\": CI access is off"):
        plan("dev", ci={"environment": "prod"})
    with pytest.raises(ConfigError, match="the immutable subject format needs both numeric ids"):
        plan("dev", ci={"githubRepository": "acme/train", "githubOwnerId": 1})
