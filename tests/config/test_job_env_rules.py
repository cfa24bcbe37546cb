"""`jobs[].env` and `jobs[].secretEnv`: names, and secrets only where they are stored encrypted."""

from __future__ import annotations

import json

import pytest
from support.config_rules import BASE, group, job

from config import parse_config
from config.jobs import JobConfig, check_job_secret_env
from config.schema import ConfigError, Reader

KEY = "trainstack:jobs[0]"


def read_job(**fields) -> JobConfig:
    reader = Reader()
    found = reader.read_field(JobConfig, job(**fields), KEY)
    assert not reader.problems
    return found


def secret_problems(jobs_secret: bool, **fields) -> list[str]:
    reader = Reader()
    check_job_secret_env(read_job(**fields), jobs_secret, KEY, reader)
    return [str(p) for p in reader.problems]


def secret_jobs_problems(**fields) -> list[str]:
    """What `parse_config` finds in a job of a secret `jobs` key (as `--secret --path` makes it)."""
    values = {
        **BASE,
        "trainstack:gpuNodeGroups": json.dumps([group()]),
        "trainstack:jobs": json.dumps([job(**fields)]),
    }
    with pytest.raises(ConfigError) as err:
        parse_config("dev", values, frozenset({"trainstack:jobs"}))
    return [str(p) for p in err.value.problems]


@pytest.mark.parametrize(
    "name", ["AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY", "HF_TOKEN", "DB_PASSWORD", "CLIENT_SECRET", "api_key"]
)
def test_a_plain_value_under_a_secret_looking_name_is_refused_naming_secret_env(name):
    (msg,) = secret_problems(False, env={name: "s3cr3t-value"})
    assert msg == (
        f'{KEY}.env.{name} = "(plain text)": a secret-looking name with a plain value; allowed: '
        f"{KEY}.secretEnv.{name}: pulumi config set --secret --path 'jobs[0].secretEnv.{name}' <value>"
    )


def test_ordinary_names_keep_plain_values():
    names = ("AWS_ACCESS_KEY_ID", "TOKENIZERS_PARALLELISM", "NCCL_DEBUG", "MONKEY", "PASSWORD_FILE")
    assert secret_problems(False, env=dict.fromkeys(names, "x")) == []


def test_a_secret_jobs_key_keeps_secret_env_and_secret_looking_env():
    """Its values all go to the job's Secret: nothing is written in clear."""
    assert secret_problems(True, env={"WANDB_API_KEY": "x"}, secretEnv={"HF_TOKEN": "y"}) == []
    found = read_job(env={"NCCL_DEBUG": "INFO"}, secretEnv={"WANDB_API_KEY": "k"})
    assert found.environment == {"NCCL_DEBUG": "INFO", "WANDB_API_KEY": "k"}


def test_secret_env_in_a_plain_jobs_key_is_refused():
    (msg,) = secret_problems(False, secretEnv={"WANDB_API_KEY": "k"})
    assert msg == (
        f'{KEY}.secretEnv.WANDB_API_KEY = "(plain text)": stored unencrypted: the `jobs` key is not a '
        "secret; allowed: pulumi config set --secret --path 'jobs[0].secretEnv.WANDB_API_KEY' <value>"
    )


def test_secret_env_names_are_checked_without_showing_values():
    (msg,) = secret_jobs_problems(secretEnv={"1BAD": "hunter2"})
    assert msg.startswith(f'{KEY}.secretEnv.1BAD = "(secret)": not a valid environment variable name')


def test_a_name_in_env_and_secret_env_is_refused():
    (msg,) = secret_jobs_problems(env={"A": "x"}, secretEnv={"A": "y"})
    assert msg == f'{KEY}.env.A = "(plain text)": also set in secretEnv; allowed: one of env and secretEnv'
