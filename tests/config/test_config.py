"""The stack config as a whole: defaults, the template stack files, the region, unknown keys and
wrong types anywhere, every problem in one error, template values, the AWS credentials. The rules of
each section are in test_<section>_rules.py beside this file; the config reference in docs/ is
checked by tests/test_docs.py."""

from __future__ import annotations

import json

import pytest
from support.config_rules import BASE, group, job, problems
from support.plans import plan, stack_values

from config import parse_config, template_values
from config.schema import ConfigError


def test_defaults_describe_the_cheap_dev_stack():
    cfg = parse_config("dev", BASE)
    (g,) = cfg.gpu_node_groups
    assert (g.instance_type, g.node_count, g.efa, g.capacity_type) == ("g6.xlarge", 1, False, "ON_DEMAND")
    assert cfg.network.nat_gateways == "single"
    assert cfg.storage.protect is False
    assert cfg.jobs == ()


def test_stack_files_parse():
    dev = parse_config("dev", stack_values("dev"))
    prod = parse_config("prod", stack_values("prod"))
    assert [g.instance_type for g in dev.gpu_node_groups] == ["g6.xlarge"]
    (p5,) = prod.gpu_node_groups
    assert (p5.instance_type, p5.node_count, p5.efa) == ("p5.48xlarge", 2, True)
    assert prod.storage.protect and prod.storage.encryption == "KMS"


def test_region_is_required():
    with pytest.raises(ConfigError) as err:
        parse_config("dev", {})
    assert "aws:region = (missing)" not in str(err.value)  # None is shown as JSON null
    assert "aws:region = null: required" in str(err.value)


def test_bad_region():
    (msg,) = problems(**{"aws:region": "zz-fake-9"})
    assert msg.startswith('aws:region = "zz-fake-9": not a region trainstack supports; allowed: us-east-1, ')


def test_unknown_top_level_key_is_reported():
    (msg,) = problems(gpuNodegroups=[group()])
    assert msg.startswith('trainstack:gpuNodegroups = "[{')
    assert "unknown key (did you mean trainstack:gpuNodeGroups?); allowed: aws:profile, aws:region, " in msg


def test_unknown_nested_key_is_reported():
    (msg,) = problems(gpuNodeGroups=[group(instancetype="p5.48xlarge")])
    assert msg.startswith(
        'trainstack:gpuNodeGroups[0].instancetype = "p5.48xlarge": unknown key (did you mean instanceType?); allowed: '
    )
    assert "instanceType" in msg


def test_wrong_types_are_reported_with_the_key():
    msgs = problems(
        gpuNodeGroups=[group(nodeCount="2", efa="yes")], cluster={"publicAccessCidrs": "0.0.0.0/0"}
    )
    assert 'trainstack:gpuNodeGroups[0].nodeCount = "2": expected integer; allowed: integer' in msgs
    assert 'trainstack:gpuNodeGroups[0].efa = "yes": expected true | false; allowed: true | false' in msgs
    assert any(
        m.startswith('trainstack:cluster.publicAccessCidrs = "0.0.0.0/0": expected a list') for m in msgs
    )


def test_bool_is_not_an_integer():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=True)])
    assert msg.startswith("trainstack:gpuNodeGroups[0].nodeCount = true: expected integer")


def test_missing_required_key():
    msgs = problems(gpuNodeGroups=[{"name": "gpu"}])
    assert "trainstack:gpuNodeGroups[0].instanceType = (missing): required; allowed: string" in msgs


def test_invalid_names():
    msgs = problems(gpuNodeGroups=[group(name="GPU_a")], jobs=[job(name="Train!", nodeGroup="GPU_a")])
    assert any(
        m.startswith('trainstack:gpuNodeGroups[0].name = "GPU_a": not a valid node group name') for m in msgs
    )
    assert any(m.startswith('trainstack:jobs[0].name = "Train!": not a valid PyTorchJob name') for m in msgs)


def test_malformed_values_hold_back_cross_field_rules():
    # nodeCount is not a number, so "nodes <= nodeCount" cannot be judged: only the type is reported.
    assert problems(gpuNodeGroups=[group(nodeCount="two")], jobs=[job(nodes=3)]) == [
        'trainstack:gpuNodeGroups[0].nodeCount = "two": expected integer; allowed: integer'
    ]


def test_all_problems_come_in_one_error():
    with pytest.raises(ConfigError) as err:
        parse_config(
            "prod",
            {
                **BASE,
                "trainstack:gpuNodeGroups": json.dumps([group(efa=True, nodeCount=0)]),
                "trainstack:typo": "1",
            },
        )
    text = str(err.value)
    assert text.startswith("stack 'prod' has 3 config problem(s); fix them in Pulumi.prod.yaml")
    assert (
        "trainstack:typo" in text and "gpuNodeGroups[0].efa" in text and "gpuNodeGroups[0].nodeCount" in text
    )


def test_bad_config_registers_no_resource():
    from offline.engine import run_program

    values = stack_values("dev", gpuNodeGroups=[group(efa=True)])
    with pytest.raises(ConfigError):
        run_program("dev", values)
    from pulumi.runtime import settings

    assert settings.get_monitor().registrations == []


def test_unknown_nested_key_does_not_hide_other_rules():
    msgs = problems(gpuNodeGroups=[group(efa=True, typo=1)])
    assert len(msgs) == 2
    assert any(m.startswith("trainstack:gpuNodeGroups[0].typo = 1: unknown key") for m in msgs)
    assert any(m.startswith("trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA") for m in msgs)


def test_template_values_are_found_in_the_prod_template():
    found = {p.key: p for p in template_values(parse_config("prod", stack_values("prod")))}
    assert set(found) == {"trainstack:cluster.publicAccessCidrs[0]", "trainstack:cluster.adminPrincipals[0]"}
    assert "documentation address range" in found["trainstack:cluster.publicAccessCidrs[0]"].reason
    # dev too: its API endpoint is reached from the user's own network, never from 0.0.0.0/0.
    (dev,) = template_values(parse_config("dev", stack_values("dev")))
    assert dev.key == "trainstack:cluster.publicAccessCidrs[0]"


def test_aws_credentials_config_other_than_a_profile_is_refused():
    (msg,) = problems(**{"aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/Deploy"}]})
    assert msg.startswith('aws:assumeRoles = "(set)": trainstack\'s AWS provider and image build read only')
    assert "aws:profile" in msg
    cfg = parse_config("dev", {**BASE, "aws:profile": "training"})
    assert cfg.aws_profile == "training"


def test_the_aws_profile_reaches_the_provider_and_the_image_build():
    run = plan("dev", **{"aws:profile": "training"})
    assert run.one("pulumi:providers:aws").inputs["profile"] == "training"
    assert run.one("pulumi-python:dynamic:Resource").inputs["aws_profile"] == "training"


def test_a_live_run_refuses_template_values():
    from pulumi.runtime import config as runtime_config

    import config
    from config.schema import ConfigError

    runtime_config.set_all_config(stack_values("prod"), [])
    assert config.load_config(refuse_template_values=False, stack="prod").stack == "prod"  # the plan's
    with pytest.raises(ConfigError) as err:
        config.load_config(refuse_template_values=True, stack="prod")  # the real world's
    assert [p.key for p in err.value.problems] == [
        "trainstack:cluster.publicAccessCidrs[0]",
        "trainstack:cluster.adminPrincipals[0]",
    ]
    yours = {"endpointPublicAccess": True, "publicAccessCidrs": ["52.94.10.0/24"]}
    runtime_config.set_all_config(stack_values("dev", cluster=yours), [])
    assert config.load_config(refuse_template_values=True, stack="dev").stack == "dev"
