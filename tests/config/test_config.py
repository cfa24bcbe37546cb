"""The stack config schema: defaults, every validation rule and its message, unknown keys."""

from __future__ import annotations

import json

import pytest
from support.paths import ROOT
from support.plans import stack_values

from config import parse_config
from config.schema import ConfigError
from domain.catalog import GPU_INSTANCE_TYPES

BASE = {"aws:region": "us-east-1"}


def problems(**overrides) -> list[str]:
    values = dict(BASE)
    for key, value in overrides.items():
        full = key if ":" in key else f"trainstack:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    with pytest.raises(ConfigError) as err:
        parse_config("dev", values)
    return [str(p) for p in err.value.problems]


def group(**fields) -> dict:
    return {"name": "gpu", "instanceType": "g6.xlarge", **fields}


def job(**fields) -> dict:
    return {"name": "train", "kind": "PyTorchJob", "nodeGroup": "gpu", **fields}


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
    assert msg.startswith('trainstack:gpuNodeGroups[0].instancetype = "p5.48xlarge": unknown key; allowed: ')
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


def test_unknown_instance_type_lists_the_catalog():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="g7.xlarge")])
    assert msg.startswith(
        'trainstack:gpuNodeGroups[0].instanceType = "g7.xlarge": not an NVIDIA GPU instance type'
    )
    assert all(t in msg for t in GPU_INSTANCE_TYPES)


def test_trainium_is_not_a_gpu_node_group():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="trn1.32xlarge")])
    assert "not an NVIDIA GPU instance type in the catalog" in msg


def test_efa_on_an_instance_without_efa():
    (msg,) = problems(gpuNodeGroups=[group(efa=True)])
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces; allowed: false"
    )
    assert "p5.48xlarge" in msg


def test_capacity_block_needs_a_reservation():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="p5.48xlarge", capacityType="CAPACITY_BLOCK")])
    assert msg.startswith("trainstack:gpuNodeGroups[0].capacityReservationId = null: CAPACITY_BLOCK needs")


def test_bad_reservation_id_and_spot_with_reservation():
    msgs = problems(gpuNodeGroups=[group(capacityType="SPOT", capacityReservationId="cr-123")])
    assert any(
        m.startswith('trainstack:gpuNodeGroups[0].capacityReservationId = "cr-123": not a capacity')
        for m in msgs
    )
    assert any(m.startswith('trainstack:gpuNodeGroups[0].capacityType = "SPOT": Spot capacity') for m in msgs)


def test_placement_group_with_reservation_is_refused():
    (msg,) = problems(
        gpuNodeGroups=[
            group(
                instanceType="p5.48xlarge",
                capacityType="CAPACITY_BLOCK",
                capacityReservationId="cr-0123456789abcdef0",
                availabilityZone="us-east-1c",
                placementGroup=True,
            )
        ]
    )
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].placementGroup = true: a placement group breaks reservations"
    )


def test_capacity_block_only_instance_needs_capacity_block():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="p5e.48xlarge")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].capacityType = "ON_DEMAND": p5e.48xlarge is sold only as Capacity Blocks; '
        "allowed: CAPACITY_BLOCK"
    )


def test_capacity_type_enum():
    (msg,) = problems(gpuNodeGroups=[group(capacityType="RESERVED")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].capacityType = "RESERVED": not a known value; '
        "allowed: ON_DEMAND | SPOT | CAPACITY_BLOCK"
    )


def test_duplicate_node_group_names():
    msgs = problems(gpuNodeGroups=[group(), group()])
    assert 'trainstack:gpuNodeGroups = "gpu": name used by 2 node groups; allowed: unique names' in msgs


def test_invalid_names():
    msgs = problems(gpuNodeGroups=[group(name="GPU_a")], jobs=[job(name="Train!", nodeGroup="GPU_a")])
    assert any(
        m.startswith('trainstack:gpuNodeGroups[0].name = "GPU_a": not a valid node group name') for m in msgs
    )
    assert any(m.startswith('trainstack:jobs[0].name = "Train!": not a valid PyTorchJob name') for m in msgs)


def test_ray_job_names_are_shorter():
    name = "r" * 48
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(name=name, kind="RayJob")])
    assert msg.startswith(f'trainstack:jobs[0].name = "{name}": not a valid RayJob name')
    assert "at most 47 characters" in msg


def test_job_on_unknown_node_group():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(nodeGroup="gpus")])
    assert msg == 'trainstack:jobs[0].nodeGroup = "gpus": no node group has that name; allowed: gpu, system'


def test_job_asking_for_more_nodes_than_its_group():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2)], jobs=[job(nodes=3)])
    assert msg.startswith(
        "trainstack:jobs[0].nodes = 3: job 'train' can never be admitted by queue 'gpu': "
        "node group 'gpu' holds 2 node(s) at most, and the job needs cpu 9 > 6 on flavor trainstack-gpu;"
    )
    assert msg.endswith("nvidia.com/gpu 3 > 2 on flavor trainstack-gpu; allowed: 1-2, or a larger node group")


def test_duplicate_job_names():
    msgs = problems(gpuNodeGroups=[group()], jobs=[job(wait="none"), job(wait="none")])
    assert msgs == ['trainstack:jobs = "train": name used by 2 jobs; allowed: unique names']


def test_bad_kind():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(kind="TFJob")])
    assert (
        msg
        == 'trainstack:jobs[0].kind = "TFJob": not a known value; allowed: PyTorchJob | RayJob | RayCluster'
    )


def test_malformed_values_hold_back_cross_field_rules():
    # nodeCount is not a number, so "nodes <= nodeCount" cannot be judged: only the type is reported.
    assert problems(gpuNodeGroups=[group(nodeCount="two")], jobs=[job(nodes=3)]) == [
        'trainstack:gpuNodeGroups[0].nodeCount = "two": expected integer; allowed: integer'
    ]


def test_ray_cluster_never_succeeds():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(kind="RayCluster", wait="succeeded")])
    assert msg.startswith('trainstack:jobs[0].wait = "succeeded": a RayCluster runs until deleted')


def test_env_names_are_checked():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(env={"1BAD": "x"})])
    assert msg.startswith('trainstack:jobs[0].env.1BAD = "x": not a valid environment variable name')


def test_network_rules():
    msgs = problems(
        network={"vpcCidr": "10.0.0.0/8", "availabilityZones": 1, "existingPrivateSubnetIds": ["subnet-1"]}
    )
    assert (
        'trainstack:network.vpcCidr = "10.0.0.0/8": prefix length out of range; allowed: /16 to /20' in msgs
    )
    assert any(m.startswith("trainstack:network.availabilityZones = 1: out of range") for m in msgs)
    assert any(
        m.startswith("trainstack:network.existingVpcId = null: subnets given without their VPC") for m in msgs
    )


def test_existing_vpc_needs_two_private_subnets():
    msgs = problems(
        network={"existingVpcId": "vpc-0123abcd", "existingPrivateSubnetIds": ["subnet-0123abcd"]}
    )
    assert any(
        m.startswith("trainstack:network.existingPrivateSubnetIds = [") and "too few subnets" in m
        for m in msgs
    )


def test_cluster_rules():
    msgs = problems(
        cluster={
            "kubernetesVersion": "1.29",
            "endpointPublicAccess": False,
            "endpointPrivateAccess": False,
            "adminPrincipals": ["admin"],
            "systemNodeGroup": {"instanceType": "p5.48xlarge", "minSize": 3, "desiredSize": 2},
        }
    )
    assert (
        'trainstack:cluster.kubernetesVersion = "1.29": not a known value; allowed: 1.33 | 1.34 | 1.35 | 1.36'
        in msgs
    )


def test_cluster_value_rules():
    msgs = problems(
        cluster={
            "endpointPublicAccess": False,
            "endpointPrivateAccess": False,
            "adminPrincipals": ["admin"],
            "systemNodeGroup": {"instanceType": "p5.48xlarge", "minSize": 3, "desiredSize": 2},
        }
    )
    assert any(
        m.startswith(
            "trainstack:cluster.endpointPrivateAccess = false: the API endpoint would be unreachable"
        )
        for m in msgs
    )
    assert any(
        m.startswith('trainstack:cluster.adminPrincipals[0] = "admin": not an IAM role or user ARN')
        for m in msgs
    )
    assert any(
        m.startswith('trainstack:cluster.systemNodeGroup.instanceType = "p5.48xlarge": not a CPU instance')
        for m in msgs
    )
    assert (
        "trainstack:cluster.systemNodeGroup.desiredSize = 2: outside minSize (3) and maxSize (3); allowed: 3-3"
        in msgs
    )


def test_admin_principals_are_unique():
    arn = "arn:aws:iam::123456789012:role/Admin"
    assert problems(cluster={"adminPrincipals": [arn, arn]}) == [
        f'trainstack:cluster.adminPrincipals = "{arn}": listed 2 times; allowed: each principal once'
    ]


def test_image_rules():
    msgs = problems(
        image={"context": "nowhere", "builder": "docker", "nightlyRebuild": True, "buildTimeoutMinutes": 2}
    )
    assert (
        'trainstack:image.context = "nowhere": no Dockerfile in that directory; allowed: a directory of this project holding a Dockerfile'
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


def test_readme_config_reference_matches_the_schema():
    from config.reference import render_reference

    readme = (ROOT / "README.md").read_text()
    assert render_reference() in readme, "README config reference is stale: run `make docs`"


def test_unknown_nested_key_does_not_hide_other_rules():
    msgs = problems(gpuNodeGroups=[group(efa=True, typo=1)])
    assert len(msgs) == 2
    assert any(m.startswith("trainstack:gpuNodeGroups[0].typo = 1: unknown key") for m in msgs)
    assert any(m.startswith("trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA") for m in msgs)


def test_a_reservation_needs_its_availability_zone():
    (msg,) = problems(
        gpuNodeGroups=[
            group(
                instanceType="p5.48xlarge",
                capacityType="CAPACITY_BLOCK",
                capacityReservationId="cr-0123456789abcdef0",
            )
        ]
    )
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].availabilityZone = null: a capacity reservation or Capacity "
        "Block launches only in its own AZ"
    )


def test_availability_zone_must_be_in_the_stack_region():
    (msg,) = problems(gpuNodeGroups=[group(availabilityZone="us-west-2a")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].availabilityZone = "us-west-2a": not an AZ of the stack\'s region '
        "us-east-1; allowed: an AZ such as us-east-1a"
    )


def test_template_values_are_found_in_the_prod_template():
    from config import template_values

    found = {p.key: p for p in template_values(parse_config("prod", stack_values("prod")))}
    assert set(found) == {"trainstack:cluster.publicAccessCidrs[0]", "trainstack:cluster.adminPrincipals[0]"}
    assert "documentation address range" in found["trainstack:cluster.publicAccessCidrs[0]"].reason
    assert template_values(parse_config("dev", stack_values("dev"))) == []


def test_aws_credentials_config_other_than_a_profile_is_refused():
    (msg,) = problems(**{"aws:assumeRoles": [{"roleArn": "arn:aws:iam::123456789012:role/Deploy"}]})
    assert msg.startswith('aws:assumeRoles = "(set)": trainstack\'s AWS provider and image build read only')
    assert "aws:profile" in msg
    cfg = parse_config("dev", {**BASE, "aws:profile": "training"})
    assert cfg.aws_profile == "training"


def test_the_aws_profile_reaches_the_provider_and_the_image_build():
    from support.plans import plan

    run = plan("dev", **{"aws:profile": "training"})
    assert run.one("pulumi:providers:aws").inputs["profile"] == "training"
    assert run.one("pulumi-python:dynamic:Resource").inputs["aws_profile"] == "training"


def test_min_nodes_is_a_floor_within_the_group():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2, minNodes=3)])
    assert (
        msg == "trainstack:gpuNodeGroups[0].minNodes = 3: out of range; allowed: 0-2 (the group's nodeCount)"
    )
    (msg,) = problems(gpuNodeGroups=[group(minNodes=-1)])
    assert msg.startswith("trainstack:gpuNodeGroups[0].minNodes = -1: out of range")
    cfg = parse_config(
        "dev", {**BASE, "trainstack:gpuNodeGroups": json.dumps([group(nodeCount=4, minNodes=1)])}
    )
    (g,) = cfg.gpu_node_groups
    assert (g.min_nodes, g.node_count, cfg.autoscaled(g)) == (1, 4, True)


def test_queueing_timings_are_bounded():
    found = problems(
        queueing={"idleNodeMinutes": 0, "podsReadyTimeoutMinutes": 241, "maxNodeProvisionMinutes": 4}
    )
    assert found == [
        "trainstack:queueing.idleNodeMinutes = 0: out of range; allowed: 1-1440",
        "trainstack:queueing.podsReadyTimeoutMinutes = 241: out of range; allowed: 1-240",
        "trainstack:queueing.maxNodeProvisionMinutes = 4: out of range; allowed: 5-120",
    ]


def test_a_ray_job_on_the_system_group_counts_its_head():
    """The system queue holds its CPU jobs' pods and one RayJob's head and submitter: Kueue counts
    them too (a RayCluster has no submitter)."""
    (msg,) = problems(
        jobs=[
            job(kind="RayJob", nodeGroup="system", nodes=2),
            job(name="two-heads", kind="RayCluster", nodeGroup="system", nodes=3),
        ]
    )
    assert msg.startswith(
        "trainstack:jobs[1].nodes = 3: job 'two-heads' can never be admitted by queue 'system'"
    )
    assert "cpu 3500m > 3 on flavor trainstack-system; memory 9Gi > 8Gi" in msg
