"""The typed stack config: one schema for everything a `Pulumi.<stack>.yaml` can set.

One module per plane holds that plane's settings and its own checks (`network`, `cluster`,
`existing`, `node_groups`, `build`, `operators`, `queueing`, `jobs`, `ci`); `checks` runs them in
plane order with the rules that span planes. `load_config` reads the Pulumi config of the running stack, checks it and returns
a frozen `StackConfig`, or raises one `ConfigError` that lists every problem. It runs before any
resource is registered. Defaults describe the cheap `dev` stack: one g6.xlarge node, no EFA.
"""

from __future__ import annotations

import dataclasses
import json
import typing

import pulumi

from config.checks import check
from config.cluster import EKS_ADDON_VERSIONS, cluster_template_values
from config.instance_facts import catalog_describe, describe_groups, ec2_describe, kubeconfig_describe
from config.jobs import JobConfig
from config.names import PROFILE_KEY, PROJECT, PROJECT_ROOT, REGION_KEY, STACK_NAME, STACK_NAME_RULE
from config.node_groups import GpuNodeGroupConfig
from config.schema import ABSENT, ConfigError, Problem, Reader, closest, key_homes, unknown_key_hint
from config.stack_config import StackConfig
from domain.catalog import SUPPORTED_REGIONS

__all__ = [
    "EKS_ADDON_VERSIONS",
    "PROFILE_KEY",
    "PROJECT",
    "PROJECT_ROOT",
    "REGION_KEY",
    "GpuNodeGroupConfig",
    "JobConfig",
    "StackConfig",
    "load_config",
    "parse_config",
    "template_values",
]


TOP_LEVEL = [f for f in StackConfig.__dataclass_fields__.values() if "key" in f.metadata]


def _closest(key: str, valid: list[str]) -> str:
    found = closest(key, valid)
    if not found:  # try the part after the namespace: `trainstak:storage` -> trainstack:storage
        tail = closest(key.partition(":")[2], [v.partition(":")[2] for v in valid])
        found = next((v for v in valid if tail and v.partition(":")[2] == tail), None)
    return f" (did you mean {found}?)" if found else ""


# Where each nested key belongs, for a key written one indentation level too far left.
NESTED_HOMES = key_homes(StackConfig, f"{PROJECT}:")


def _unknown_top_level(full_key: str, valid: list[str]) -> str:
    key = full_key.partition(":")[2]
    if key in NESTED_HOMES and not any(v.lower() == full_key.lower() for v in valid):
        return unknown_key_hint(key, [], NESTED_HOMES, "at the top level")
    return _closest(full_key, valid)


def load_config(refuse_template_values: bool, stack: str | None = None) -> StackConfig:
    """Read and check the running stack's config (from the Pulumi engine or the offline plan).

    A live run also refuses template values (see `template_values`); the offline plan renders
    them and lists them as warnings, so a template stack such as prod can still be planned."""
    from pulumi.runtime import config as rc

    stack = stack or pulumi.get_stack()
    keys = set(rc.CONFIG.get()) | set(rc.get_config_env())
    values = {k: rc.get_config(k) for k in keys}
    config = parse_config(stack, values, frozenset(k for k in keys if rc.is_config_secret(k)), ask_ec2=True)
    if refuse_template_values:
        placeholders = template_values(config)
        if placeholders:
            raise ConfigError(stack, placeholders)
    return config


# Keys whose values must be Pulumi secrets (encrypted in the stack file and the state).
SECRET_KEYS = tuple(
    f"{PROJECT}:{k}" for k in ("dockerHubAccessToken", "hfToken", "trackingToken", "trackingPassword")
)


def parse_config(
    stack: str,
    values: dict[str, str],
    secret_keys: frozenset[str] = frozenset(),
    ask_ec2: bool = False,
    stack_file: str | None = None,
) -> StackConfig:
    """Parse a flat Pulumi config map (`trainstack:key` -> JSON or plain string). The GPU groups'
    hardware is then described, before the rules that need it run: by EC2 with `ask_ec2` (the
    running program: a pulumi-aws invoke), else, and on a kubeconfig stack, by the catalog (which
    answers as the offline engine's EC2 does). `stack_file` names the file the values came from in
    the error, where it is not the stack's own Pulumi.<stack>.yaml."""
    reader = Reader()
    for key in SECRET_KEYS:
        if key in values and key not in secret_keys:
            reader.problem(
                key,
                "(plain text)",
                "must be a secret: a plain value would be stored unencrypted",
                f"pulumi config set --secret {key.partition(':')[2]} <value>",
            )
    known = {f.metadata["key"] for f in TOP_LEVEL}
    valid = sorted([f"{PROJECT}:{k}" for k in known] + [REGION_KEY, PROFILE_KEY])
    for full_key in sorted(values):
        ns, _, key = full_key.partition(":")
        if ns == PROJECT and key not in known:
            reader.problem(
                full_key,
                values[full_key],
                f"unknown key{_unknown_top_level(full_key, valid)}",
                ", ".join(valid),
            )
        elif ns not in (PROJECT, "aws", "pulumi"):
            # A misspelt namespace would drop its whole section silently (protection off, say).
            reader.problem(
                full_key,
                values[full_key],
                f"unknown namespace '{ns}'{_closest(full_key, valid)}",
                f"keys under {PROJECT}:, aws:region, aws:profile",
            )

    for full_key in sorted(values):
        if full_key.startswith("aws:") and full_key not in (REGION_KEY, PROFILE_KEY):
            # The stack's explicit AWS provider, and the image build's boto3 calls, read only these:
            # anything else would be silently ignored by one of them.
            reader.problem(
                full_key,
                "(set)",
                "trainstack's AWS provider and image build read only aws:region and aws:profile",
                "aws:profile naming a profile (role_arn/source_profile there for an assumed role), "
                "or AWS_* environment variables",
            )
    if not STACK_NAME.fullmatch(stack):
        reader.problem(
            "stack name",
            stack,
            "the stack's ECR repository and EKS cluster names are built from it",
            f"{STACK_NAME_RULE} (pulumi stack init <name>, or pulumi stack rename)",
        )
    region = values.get(REGION_KEY)
    if region is None:
        reader.problem(
            REGION_KEY,
            None,
            "required (the AWS provider and the catalog need it)",
            "a region such as us-east-1",
        )
        region = ""
    elif region not in SUPPORTED_REGIONS:
        reader.problem(REGION_KEY, region, "not a region trainstack supports", ", ".join(SUPPORTED_REGIONS))

    kwargs: dict = {}
    hints = typing.get_type_hints(StackConfig)
    for f in TOP_LEVEL:
        full_key = f"{PROJECT}:{f.metadata['key']}"
        if full_key not in values:
            continue
        raw = values[full_key]
        if hints[f.name] in (str, str | None):  # plain strings are passed as they are
            data = raw
        else:
            try:
                data = json.loads(raw) if isinstance(raw, str) else raw
            except (json.JSONDecodeError, RecursionError, ValueError):
                reader.shape_problem(full_key, raw, "not valid structured config", "a YAML object or list")
                continue
        read = reader.read_field(hints[f.name], data, full_key)
        if read is not ABSENT and read is not None:
            kwargs[f.name] = read
    config = StackConfig(
        stack=stack,
        region=region,
        aws_profile=values.get(PROFILE_KEY),
        secret_job_env=f"{PROJECT}:jobs" in secret_keys,
        **kwargs,
    )
    describe = catalog_describe if config.existing_cluster.uses_aws else kubeconfig_describe
    if ask_ec2 and config.existing_cluster.uses_aws and region in SUPPORTED_REGIONS:
        describe = ec2_describe(region)
    groups = describe_groups(config.gpu_node_groups, describe, reader)
    config = dataclasses.replace(config, gpu_node_groups=groups)
    check(config, reader)
    if reader.problems:
        raise ConfigError(stack, reader.problems, stack_file)
    return config


def template_values(c: StackConfig) -> list[Problem]:
    """Settings a template stack file carries that no real deployment can use."""
    return cluster_template_values(c.cluster)
