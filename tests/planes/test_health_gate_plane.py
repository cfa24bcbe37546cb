"""The health gate in the plan (components/health_gate.py, planes/health.py): a burnt-in group's nodes
join with the startup taint and only the device plugins (as their charts render) and the burn-in
tolerate it; the gate runs in the stack's image on the system nodes with the rights it uses; its
settings follow the config, refused where they cannot work (a cluster not the stack's, no DCGM host
engine, a burn-in longer than the autoscaler or Kueue waits); its time and cost are in the plan."""

from __future__ import annotations

import json

import pytest
from support.charts import render
from support.plans import EXISTING_CLUSTER, plan, stack_values

from components.health_gate import NAME, REPLACE_ACTION
from config import parse_config
from config.schema import ConfigError
from conventions import (
    GPU_TAINT,
    HEALTH_MODE_LABEL,
    HEALTH_STARTUP_TAINT,
    HEALTH_STARTUP_TOLERATION,
    SYSTEM_NODE_LABEL,
)
from offline.engine import run_program
from offline.plan import health_lines
from planes.health import burn_in_by_group

NODE_GROUP = "eks:index:ManagedNodeGroup"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}


def gate(run):
    found = [r for r in run.by_type(DEPLOYMENT) if r.inputs["metadata"]["name"] == NAME]
    return found[0] if found else None


def gate_groups(run) -> dict:
    command = gate(run).inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    return json.loads(command[command.index("--groups") + 1])


def node_group(run, name):
    (ng,) = [r for r in run.by_type(NODE_GROUP) if r.name == name]
    return ng.inputs


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' ToleratesTaint, for the keyed tolerations the charts carry."""
    effect = EFFECTS.get(taint["effect"], taint["effect"])
    if toleration.get("effect") and toleration["effect"] != effect:
        return False
    if toleration.get("operator") == "Exists":
        return toleration.get("key") in (None, taint["key"])
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get("value", "")


def test_a_p5_group_is_burnt_in_and_a_g6_group_watched(prod_plan, dev_plan):
    p5 = node_group(prod_plan, "gpu-p5")
    assert p5["taints"] == [GPU_TAINT, HEALTH_STARTUP_TAINT]
    assert p5["labels"][HEALTH_MODE_LABEL] == "burnIn"
    g6 = node_group(dev_plan, "gpu-gpu")
    assert g6["taints"] == [GPU_TAINT] and g6["labels"][HEALTH_MODE_LABEL] == "passive"
    assert gate_groups(prod_plan)["p5"] == {
        "mode": "burnIn",
        "gpus": 8,
        "efa": 32,
        "nvlink": True,
        "dcgmLevel": 2,
        "floorFraction": 0.8,
        "publishedBusGbps": 443.0,
        "nodes": 2,
        "deadlineSeconds": 2094,
        # What a job's pods on an EFA group set (components/jobs/pods.py): the two-node test's too.
        "efaEnv": {
            "FI_EFA_FORK_SAFE": "1",
            "FI_PROVIDER": "efa",
            "NCCL_DEBUG": "INFO",
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "NCCL_SOCKET_IFNAME": "^lo",
        },
    }
    assert gate_groups(dev_plan)["gpu"]["mode"] == "passive"


def test_the_startup_taint_stays_out_of_the_autoscalers_node_templates(prod_plan):
    """The autoscaler drops startup taints from its templates; a tag would say no job ever fits."""
    tags = [t.inputs["tag"]["key"] for t in prod_plan.by_type("aws:autoscaling/tag:Tag")]
    assert any(k.endswith("/taint/nvidia.com/gpu") for k in tags)
    assert not any(HEALTH_STARTUP_TAINT["key"] in k for k in tags)


@pytest.mark.parametrize("release", ["nvidia-device-plugin", "aws-efa-k8s-device-plugin"])
def test_the_device_plugins_run_on_a_node_in_burn_in(prod_plan, release):
    """The burn-in asks for the node's GPUs and EFA devices: their plugins must run under the taint."""
    daemonsets = [o for o in render(prod_plan, release) if o["kind"] == "DaemonSet"]
    assert daemonsets
    spec = daemonsets[0]["spec"]["template"]["spec"]
    assert all(
        any(tolerates(t, taint) for t in spec["tolerations"]) for taint in (GPU_TAINT, HEALTH_STARTUP_TAINT)
    )


def test_no_training_pod_tolerates_the_startup_taint(prod_plan):
    """Jobs, their runtime and their queues' flavors: none may land on a node before it passed."""
    kinds = ("TrainJob", "RayJob", "ClusterTrainingRuntime", "ResourceFlavor")
    found = [r for r in prod_plan.resources if r.type.rsplit(":", 1)[-1] in kinds]
    assert {r.type.rsplit(":", 1)[-1] for r in found} == set(kinds)
    assert HEALTH_STARTUP_TOLERATION["key"] not in json.dumps([r.inputs for r in found], default=str)


def test_the_gate_runs_on_the_system_nodes_in_the_stacks_image_with_the_rights_it_uses(prod_plan):
    pod = gate(prod_plan).inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == SYSTEM_NODE_LABEL and pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    (job,) = prod_plan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert container["image"] == job.inputs["spec"]["trainer"]["image"]
    command = container["command"]
    assert command[:3] == ["python", "-m", "trainer.health_gate"]
    assert command[command.index("--image") + 1] == container["image"]  # its burn-in's steps too
    policy = json.loads(prod_plan.one("aws:iam/rolePolicy:RolePolicy", "health-gate-policy").inputs["policy"])
    (replace,) = [s for s in policy["Statement"] if s["Action"] == REPLACE_ACTION]
    assert replace["Resource"] and all(":autoScalingGroupName/" in arn for arn in replace["Resource"])


def test_no_gate_where_it_cannot_run():
    assert gate(plan("existing", facts=EXISTING_CLUSTER)) is None
    hyperpod = {
        "eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}
    }
    assert (
        gate(run_program("hyperpod", stack_values("hyperpod"), ["trainstack:hfToken"], facts=hyperpod))
        is None
    )
    cluster = {**json.loads(stack_values("dev")["trainstack:cluster"]), "nodeMonitoringAgent": False}
    assert gate(plan("dev", cluster=cluster)) is None  # by default, without the DCGM host engine


def test_off_turns_it_off_and_the_nodes_carry_no_health_label():
    groups = json.loads(stack_values("dev")["trainstack:gpuNodeGroups"])
    groups[0]["health"] = {"mode": "off"}
    run = plan("dev", gpuNodeGroups=groups)
    assert gate(run) is None
    assert HEALTH_MODE_LABEL not in node_group(run, "gpu-gpu")["labels"]


def with_health(stack: str, **health) -> list[dict]:
    """The stack's first group with `health` set."""
    groups = json.loads(stack_values(stack)["trainstack:gpuNodeGroups"])
    return [{**groups[0], "health": health}, *groups[1:]]


def p5(**health) -> list[dict]:
    return with_health("prod", **health)


def refused(stack: str = "prod", **overrides) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse_config(stack, stack_values(stack, **overrides))
    return [str(p) for p in err.value.problems]


def prod_problems(**overrides) -> list[str]:
    return refused("prod", **overrides)


def on_version(version: str) -> dict:
    return {**json.loads(stack_values("prod")["trainstack:cluster"]), "kubernetesVersion": version}


def autoscaler_args(run) -> dict:
    (release,) = [
        r for r in run.by_type("kubernetes:helm.sh/v3:Release") if r.inputs["name"] == "cluster-autoscaler"
    ]
    return release.inputs["values"]["extraArgs"]


def test_an_autoscaler_without_the_startup_flag_refuses_a_burn_in_it_would_outwait():
    """Up to 1.34 the autoscaler waits a fixed 15 minutes for a node it added to become ready."""
    (msg,) = [
        m for m in prod_problems(gpuNodeGroups=p5(dcgmLevel=3), cluster=on_version("1.34")) if "health" in m
    ]
    assert msg.startswith("trainstack:gpuNodeGroups[0].health.dcgmLevel = 3: the burn-in takes ~50 min"), msg
    assert "past the 15 min the cluster autoscaler for Kubernetes 1.34 waits" in msg
    assert msg.endswith("allowed: a lower level, cluster.kubernetesVersion 1.35 or later, or minNodes equal to "
                        "nodeCount (the nodes are kept and burnt in once)")  # fmt: skip


@pytest.mark.parametrize(
    ("version", "level", "startup"), [("1.34", 1, None), ("1.35", 2, "21m"), ("1.36", 2, "21m")]
)
def test_by_default_the_burn_in_fits_the_autoscalers_wait(version, level, startup):
    """Level 2 on a p5 with its two-node test (~15.4 min with the image pull) would outlast the fixed
    15 minutes up to 1.34: the default there is level 1; from 1.35 the stack lengthens the wait."""
    run = plan("prod", cluster=on_version(version))
    assert gate_groups(run)["p5"]["dcgmLevel"] == level
    assert autoscaler_args(run).get("max-node-startup-time") == startup


def test_the_plan_without_a_gate_leaves_the_autoscalers_wait_as_it_was(dev_plan):
    assert "max-node-startup-time" not in autoscaler_args(dev_plan)  # dev's g6 is only watched


def test_a_long_burn_in_needs_kueue_to_wait_for_it_too():
    (msg,) = [m for m in prod_problems(gpuNodeGroups=p5(dcgmLevel=3)) if "health" in m or "podsReady" in m]
    assert msg.startswith(
        "trainstack:queueing.podsReadyTimeoutMinutes = 20: with 30 min for the nodes to join, shorter than the "
        "~50 min burn-in of a new p5.48xlarge node of group p5"
    ), msg
    assert msg.endswith("allowed: 21 or more, or a lower trainstack:gpuNodeGroups[0].health.dcgmLevel")
    run = plan("prod", gpuNodeGroups=p5(dcgmLevel=3), queueing={"podsReadyTimeoutMinutes": 30})
    assert autoscaler_args(run)["max-node-startup-time"] == "55m"


def test_kept_nodes_may_burn_in_longer_on_an_autoscaler_without_the_flag():
    """Up to 1.34 the autoscaler takes no `--max-node-startup-time`: an unknown flag stops it from
    starting at all (its flags are parsed strictly), so the stack never passes it there."""
    groups = p5(dcgmLevel=3)
    groups[0] |= {"minNodes": groups[0]["nodeCount"]}
    settings = {
        "gpuNodeGroups": groups,
        "cluster": on_version("1.34"),
        "queueing": {"podsReadyTimeoutMinutes": 30},
    }
    parse_config("prod", stack_values("prod", **settings))
    assert "max-node-startup-time" not in autoscaler_args(plan("prod", **settings))


def test_a_gate_on_a_cluster_the_stack_did_not_create_is_refused():
    (msg,) = [
        m for m in refused("existing", gpuNodeGroups=with_health("existing", mode="passive")) if "health" in m
    ]
    assert msg.startswith(
        'trainstack:gpuNodeGroups[0].health.mode = "passive": the health gate runs on clusters'
    )
    assert msg.endswith("allowed: off"), msg


def test_a_gate_without_the_dcgm_host_engine_is_refused():
    cluster = {**json.loads(stack_values("prod")["trainstack:cluster"]), "nodeMonitoringAgent": False}
    (msg,) = [m for m in prod_problems(gpuNodeGroups=p5(mode="burnIn"), cluster=cluster) if "health" in m]
    assert "the gate asks the node monitoring agent's DCGM host engine" in msg, msg


@pytest.mark.parametrize(
    ("key", "value", "allowed"), [("dcgmLevel", 5, "1, 2, 3 or 4"), ("floorFraction", 0.99, "0.5-0.95")]
)
def test_settings_out_of_range_are_refused(key, value, allowed):
    (msg,) = [m for m in prod_problems(gpuNodeGroups=p5(**{key: value})) if f"health.{key}" in m]
    assert msg.endswith(f"allowed: {allowed}"), msg


def test_the_plan_times_and_prices_the_burn_in(prod_plan):
    cfg = parse_config("prod", stack_values("prod"))
    assert burn_in_by_group(cfg) == {"p5": pytest.approx(13.957, abs=0.01)}  # its two-node test included
    (line,) = health_lines(cfg)[1:]
    assert line.startswith(
        "  p5: each new node is burnt in for ~15.4 min (image pull included, ~$14.11 a node)"
    )
    assert "EFA x32, NVLink, DCGM level 2, all-reduce at least 0.8 x the published 443 GB/s" in line
    assert "; with a fresh partner, a two-node all-reduce over EFA;" in line
    assert line.endswith("(at most 1 of 2 at once)")
