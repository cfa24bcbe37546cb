"""The rules of `trainstack:ci` that keep CI inside its own environment, each naming its key."""

from __future__ import annotations

import pytest
from support.plans import ci_config, plan

from config.schema import ConfigError


def ci(**settings):
    return plan("dev", ci=ci_config(**settings))


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
        ConfigError, match=r"trainstack:ci\.environment = \"e{248}\": not a GitHub environment"
    ):
        ci(environment="e" * 248)
    ci(environment="e" * 247)


def test_ci_needs_a_break_glass_role_and_a_known_account_mode():
    """The bucket lets in only the stack's own roles and the break-glass role: without one, the
    person who bootstraps the stack would be locked out of its bucket."""
    with pytest.raises(ConfigError) as err:
        plan("dev", ci={"githubRepository": "acme/train"})
    assert "trainstack:ci.breakGlassRoleArn = null: the bucket's policy lets in only" in str(err.value)
    user = "arn:aws:iam::123456789012:user/alice"
    with pytest.raises(
        ConfigError, match=r"trainstack:ci\.breakGlassRoleArn = \".*user/alice\": not an IAM role"
    ):
        ci(breakGlassRoleArn=user)
    with pytest.raises(
        ConfigError,
        match=r"trainstack:ci\.accountMode = \"one\": not a known value; allowed: perEnvironment \| shared",
    ):
        ci(accountMode="one")


def test_the_plan_says_which_account_mode_the_stack_is_in():
    own = [m for m in ci().messages if m.startswith("CI access")]
    assert own == [
        "CI access: account 123456789012 is dev's own (account per environment; fenced by /trainstack/dev/ "
        "and trainstack-dev-boundary)."
    ]
    (shared,) = [m for m in ci(accountMode="shared").messages if m.startswith("CI access")]
    assert shared.startswith("CI access: account 123456789012 is shared with other environments' stacks")
