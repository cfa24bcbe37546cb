"""The rules of `trainstack:ci` that keep CI inside its own environment, each naming its key."""

from __future__ import annotations

import pytest
from support.plans import plan

from config.schema import ConfigError


def ci(**settings):
    return plan("dev", ci={"githubRepository": "acme/train", **settings})


def test_a_kms_alias_is_refused_naming_the_key():
    """IAM matches a key operation's Resource against the key's ARN: an alias in the boundary's
    exception would leave the stack's own secrets key fenced off, or worse, match nothing."""
    alias = "arn:aws:kms:us-east-1:123456789012:alias/pulumi-dev"
    with pytest.raises(ConfigError) as err:
        ci(secretsKeyArn=alias)
    message = str(err.value)
    assert f'trainstack:ci.secretsKeyArn = "{alias}": not a KMS key ARN' in message
    assert "arn:aws:kms:<region>:<account>:key/<key id>" in message


def test_deploying_from_a_branch_is_gone():
    """`ci.branch` gave the deploy role the `ref:` subject any job on the branch gets."""
    with pytest.raises(ConfigError, match=r"trainstack:ci\.branch"):
        ci(branch="main")


def test_an_environment_name_leaves_room_for_its_preview_environments():
    with pytest.raises(
        ConfigError, match=r"trainstack:ci\.environment = \"e{240}\": not a GitHub environment"
    ):
        ci(environment="e" * 240)
    ci(environment="e" * 239)
