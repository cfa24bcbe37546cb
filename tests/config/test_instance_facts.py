"""Any GPU instance type: its hardware comes from EC2's DescribeInstanceTypes (the offline engine's
answer here), asked for before any resource is registered; `ml.` types are the EC2 hardware; a type
EC2 does not sell is one config error; no check raises on any type; an unknown price stays unknown."""

from __future__ import annotations

import dataclasses
import datetime
import json
import re
from types import SimpleNamespace

import pytest
from support.config_rules import BASE, group, job, problems
from support.plans import EXISTING_CLUSTER, stack_values
from support.verl import GRPO

from config import parse_config
from config.instance_facts import UnknownInstanceType, describe_groups, from_invoke
from config.node_groups import GpuNodeGroupConfig
from config.schema import ConfigError, Reader
from domain.catalog import (
    GPU_INSTANCE_TYPES,
    INSTANCE_TYPES,
    SAGEMAKER_HOURLY_USD,
    catalog_instance,
    hardware_type,
    priced,
)
from offline.cost import hourly_cost, total, unknown_items
from offline.engine import close_event_loops, run_program
from offline.engine.aws_answers import OfflineAws, instance_type_facts

# The existing template's cluster, its jobs in a namespace HyperPod's auto-resume watches.
EXISTING_VALUES = json.loads(stack_values("existing")["trainstack:existingCluster"])
HYPERPOD_G5 = {
    "name": "g5",
    "instanceType": "ml.g5.8xlarge",
    "nodeCount": 4,
    "efa": True,
    "nodeSelector": {"node.kubernetes.io/instance-type": "ml.g5.8xlarge"},
}
# The reference workflow's job: Llama 3.2 1B on 4 x one A10G (batch 2 fits 24 GB; 8 would not).
LLAMA_1B = job(name="llama", nodeGroup="g5", nodes=4, model="1b", steps=100, args=["--batch-size", "2"])


def as_sdk_result(value):
    """A camelCase invoke answer as the pulumi-aws result object reads it (snake_case attributes)."""
    if isinstance(value, dict):
        snake = {re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower(): as_sdk_result(v) for k, v in value.items()}
        return SimpleNamespace(**snake)
    if isinstance(value, list):
        return [as_sdk_result(v) for v in value]
    return value


def planned(stack: str, facts: dict | None = None, **overrides):
    """The plan, with each DescribeInstanceTypes question and how many resources were registered
    when it was asked."""
    asked: list[tuple[str, int]] = []
    registered: list = []
    answer = OfflineAws.instance_type

    def spy(self, args):
        asked.append((args["instanceType"], len(registered)))
        return answer(self, args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OfflineAws, "instance_type", spy)
        try:
            run = run_program(stack, stack_values(stack, **overrides), facts=facts, registered=registered)
        finally:
            close_event_loops()
    return run, asked, registered


def test_g5_8xlarge_has_its_real_facts():
    it = INSTANCE_TYPES["g5.8xlarge"]
    assert (it.gpus, it.gpu_model, it.gpu_memory_mib, it.vcpus, it.memory_gib) == (1, "A10G", 22888, 32, 128)
    assert (it.max_efa_interfaces, it.network_gbps, it.hourly_usd) == (1, 25.0, 2.448)
    # 900 GB, as DescribeInstanceTypes gives it (karpenter's generated table: instance-local-nvme 900).
    assert (it.instance_store_disks, it.instance_store_disk_gb) == (1, 900)


@pytest.mark.parametrize("name", sorted(INSTANCE_TYPES))
def test_the_program_reads_back_what_the_offline_ec2_answers(name):
    """The offline answer, read as the program reads a live one, is the catalog's entry."""
    assert priced(from_invoke(name, as_sdk_result(instance_type_facts(name))), name) == INSTANCE_TYPES[name]


def test_an_ml_type_is_the_ec2_hardware_at_sagemakers_price():
    it = catalog_instance("ml.g5.8xlarge")
    assert it == dataclasses.replace(INSTANCE_TYPES["g5.8xlarge"], name="ml.g5.8xlarge", hourly_usd=3.06)
    # A HyperPod type SageMaker's table lacks has no price: the group's hourlyUsd gives one.
    assert catalog_instance("ml.p5en.48xlarge").hourly_usd is None


def test_every_ml_price_is_of_a_type_whose_hardware_the_catalog_holds():
    assert {hardware_type(t) for t in SAGEMAKER_HOURLY_USD} <= set(INSTANCE_TYPES)


@pytest.mark.parametrize(
    "family", ["g4dn", "g5", "g6", "g6e", "gr6", "p4d", "p4de", "p5", "p5e", "p5en", "p6"]
)
def test_the_offline_catalog_holds_every_gpu_family_ec2_sells(family):
    assert any(t.partition(".")[0].partition("-")[0] == family for t in GPU_INSTANCE_TYPES)


def test_a_type_outside_the_offline_catalog_is_said_so_offline_not_as_an_invented_ec2_error():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="g6f.xlarge")])
    assert msg.startswith(
        'trainstack:gpuNodeGroups[0].instanceType = "g6f.xlarge": not in the offline catalog; '
        "`pulumi preview` asks EC2; allowed: "
    )
    assert "InvalidInstanceType" not in msg


def test_hyperpod_g5_group_plans_from_ec2s_answer_asked_before_anything_is_registered():
    run, asked, _ = planned(
        "existing",
        facts=EXISTING_CLUSTER,
        gpuNodeGroups=[HYPERPOD_G5],
        jobs=[LLAMA_1B],
        existingCluster={**EXISTING_VALUES, "namespace": "hyperpod-training"},  # where auto-resume acts
    )
    assert asked == [("g5.8xlarge", 0)]  # EC2 knows no `ml.` names: asked for the hardware
    assert run.outputs["gpuNodeGroups"]["g5"] == {
        "nodeSelector": {"node.kubernetes.io/instance-type": "ml.g5.8xlarge"},
        "instanceType": "ml.g5.8xlarge",
        "nodes": 4,
        "minNodes": 4,
        "autoscaled": False,
        "gpusPerNode": 1,
        "efaInterfacesPerNode": 1,
    }
    assert run.outputs["jobs"]["llama"]["gpus"] == 4


def test_the_memory_fit_reads_the_a10g_of_an_ml_type():
    (msg,) = problems(
        **{"trainstack:existingCluster": {"eksClusterName": "ml-platform", "namespace": "hyperpod-training"}},
        gpuNodeGroups=[HYPERPOD_G5],
        jobs=[{**LLAMA_1B, "args": []}],
    )
    assert "more than the 22.4 GiB of each A10G on ml.g5.8xlarge" in msg


def test_g5_8xlarge_node_group_is_created_with_its_efa_interface():
    run, asked, _ = planned("dev", gpuNodeGroups=[group(instanceType="g5.8xlarge", efa=True, nodeCount=2)])
    # Asked once, before anything is registered; the node group builds on that answer.
    assert [q for q in asked if q[0] == "g5.8xlarge"] == [("g5.8xlarge", 0)]
    tags = {t.inputs["tag"]["key"]: t.inputs["tag"]["value"] for t in run.by_type("aws:autoscaling/tag:Tag")}
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa"] == "1"
    assert tags["k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"] == "1"
    assert run.one("aws:ec2/securityGroup:SecurityGroup").inputs["description"].startswith("EFA traffic")


def test_a_verl_job_plans_on_g5_8xlarge():
    run, _, _ = planned("dev", gpuNodeGroups=[group(instanceType="g5.8xlarge", nodeCount=2)], jobs=[GRPO])
    assert run.outputs["jobs"]["grpo"]["gpus"] == 2


def test_an_unknown_type_is_one_config_error_and_nothing_is_registered():
    with pytest.raises(ConfigError) as err:
        planned("dev", gpuNodeGroups=[group(instanceType="g5.9xlarge")], jobs=[{**GRPO, "nodes": 1}])
    assert [str(p) for p in err.value.problems] == [
        'trainstack:gpuNodeGroups[0].instanceType = "g5.9xlarge": not in the offline catalog; `pulumi '
        "preview` asks EC2; allowed: an NVIDIA GPU instance type, such as g5.xlarge, g5.8xlarge, g5.4xlarge"
    ]


def test_ec2s_own_answer_for_a_type_it_does_not_sell_is_quoted():
    def ec2_says_no(_hardware):
        raise UnknownInstanceType(
            "not an instance type EC2 sells (EC2: InvalidInstanceType: The following supplied instance "
            "types do not exist: [g5.9xlarge])"
        )

    reader = Reader()
    describe_groups((GpuNodeGroupConfig(name="gpu", instance_type="g5.9xlarge"),), ec2_says_no, reader)
    assert [str(p) for p in reader.problems] == [
        'trainstack:gpuNodeGroups[0].instanceType = "g5.9xlarge": not an instance type EC2 sells (EC2: '
        "InvalidInstanceType: The following supplied instance types do not exist: [g5.9xlarge]); "
        "allowed: an NVIDIA GPU instance type, such as g5.xlarge, g5.8xlarge, g5.4xlarge"
    ]


def test_the_offline_ec2_fails_an_unknown_type_as_pulumi_aws_words_it():
    answer, failures = OfflineAws.instance_type(None, {"instanceType": "ml.g5.8xlarge"})
    ((key, reason),) = failures
    assert (answer, key) == ({}, "instanceType")
    assert reason.startswith("reading EC2 Instance Type: operation error EC2: DescribeInstanceTypes, ")
    assert reason.endswith(
        "api error InvalidInstanceType: The following supplied instance types do not exist: [ml.g5.8xlarge]"
    )


@pytest.mark.parametrize("instance_type", ["g5.9xlarge", "ml.p9.huge", "m5.large", "trn1.32xlarge", ""])
def test_no_rule_raises_on_any_type(instance_type):
    """A VERL job and a default-trainer job on the group: problems led by the type's, never a traceback."""
    found = problems(
        gpuNodeGroups=[group(instanceType=instance_type, nodeCount=2)],
        jobs=[GRPO, job(nodes=2, model="1b")],
    )
    assert found[0].startswith(f'trainstack:gpuNodeGroups[0].instanceType = "{instance_type}": not ')


def test_an_ml_type_is_refused_for_a_group_the_stack_creates():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="ml.g5.8xlarge")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].instanceType = "ml.g5.8xlarge": a SageMaker HyperPod node type; the EKS '
        "node groups trainstack creates take EC2 types; allowed: g5.8xlarge (the same hardware), or the type "
        "on an existingCluster"
    )


def p3_8xlarge(hardware: str):
    """EC2's answer for a type the catalog lacks (here: 4 T4, 48 vCPUs, 192 GiB, 1 EFA)."""
    assert hardware == "p3.8xlarge"
    return from_invoke(
        hardware,
        SimpleNamespace(
            default_vcpus=48,
            memory_size=196608,
            gpuses=[SimpleNamespace(count=4, manufacturer="NVIDIA", name="T4", memory_size=15360)],
            efa_maximum_interfaces=1,
            maximum_network_cards=1,
            network_performance="50 Gigabit",
            network_cards=[SimpleNamespace(baseline_bandwidth=50.0)],
            instance_disks=[SimpleNamespace(count=1, size=900, type="ssd")],
        ),
    )


def test_a_type_only_ec2_knows_plans_with_its_price_unknown():
    cfg = parse_config(
        "dev", {**BASE, "trainstack:gpuNodeGroups": '[{"name": "gpu", "instanceType": "g6.xlarge"}]'}
    )
    chosen = (dataclasses.replace(cfg.gpu_node_groups[0], instance_type="p3.8xlarge", min_nodes=1),)
    reader = Reader()
    cfg = dataclasses.replace(cfg, gpu_node_groups=describe_groups(chosen, p3_8xlarge, reader))
    assert reader.problems == []
    (g,) = cfg.gpu_node_groups
    assert (g.instance.gpus, g.instance.gpu_model, g.instance.network_gbps, g.price_known) == (
        4,
        "T4",
        50.0,
        False,
    )
    lines = {line.item: line for line in hourly_cost(cfg, datetime.date(2026, 8, 1))}
    line = lines["p3.8xlarge (node group gpu, ON_DEMAND)"]
    assert (line.quantity, line.unit) == (1, "price unknown: set trainstack:gpuNodeGroups[0].hourlyUsd")
    assert unknown_items(list(lines.values())) == ["p3.8xlarge (node group gpu, ON_DEMAND)"]
    assert total(list(lines.values())) == total([v for v in lines.values() if not v.unknown])


def test_a_kubeconfig_stack_says_its_catalog_is_all_it_knows():
    values = stack_values(
        "local", gpuNodeGroups=[{**group(instanceType="g6f.xlarge"), "nodeSelector": {"a": "b"}}]
    )
    with pytest.raises(ConfigError) as err:
        parse_config("local", values)
    assert str(err.value.problems[0]).startswith(
        'trainstack:gpuNodeGroups[0].instanceType = "g6f.xlarge": not in trainstack\'s instance catalog, '
        "which a kubeconfig stack reads instead of EC2; allowed: "
    )


def test_a_live_answer_gives_the_sustained_baseline_not_the_burst():
    """EC2 says g6e.xlarge is "Up to 20 Gigabit": its burst. Its network card's baseline, 2.5, is
    what the step and upload models use (NetworkCards' BaselineBandwidthInGbps)."""
    facts = instance_type_facts("g6e.xlarge")
    facts["networkPerformance"] = "Up to 20 Gigabit"
    it = from_invoke("g6e.xlarge", as_sdk_result(facts))
    assert (it.network_gbps, it.baseline_gbps) == (20.0, 2.5)


def test_the_default_trainer_is_refused_on_a_gpu_without_bf16_tensor_cores():
    """g4dn's T4 (Turing) has no bf16 tensor cores; the default trainer computes in bf16."""
    found = problems(
        gpuNodeGroups=[group(instanceType="g4dn.12xlarge")], jobs=[job(name="tiny", nodeGroup="gpu")]
    )
    assert found == [
        "trainstack:jobs[0].nodeGroup = \"gpu\": job 'tiny' runs the default trainer, which computes "
        "in bf16, and the group's T4 (g4dn.12xlarge) predates Ampere: it has no bf16 tensor cores; allowed: "
        "a group of an Ampere or newer GPU (g5, g6, g6e, p4d, p5, p6), or `command:` with a trainer of "
        "your own in fp16 or fp32"
    ]


def test_a_command_job_on_a_gpu_without_bf16_tensor_cores_is_allowed():
    """The refusal is the default trainer's: a `command:` job on g4dn brings its own precision."""
    cfg = parse_config(
        "dev",
        {
            **BASE,
            "trainstack:gpuNodeGroups": json.dumps([group(instanceType="g4dn.12xlarge")]),
            "trainstack:jobs": json.dumps([job(name="tiny", command=["python", "-m", "trainer.train"])]),
        },
    )
    assert cfg.gpu_node_groups[0].instance.gpu_model == "T4"
