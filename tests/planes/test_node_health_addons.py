"""The EKS node monitoring agent add-on as its chart renders it (../shared/charts, the chart the add-on
installs) with the stack's configuration values: its DCGM host engine must run on every GPU node the
stack creates, or the agent reports DCGM errors on healthy nodes and node repair acts on them."""

from __future__ import annotations

import json

from support.charts import helm_template, load
from support.paths import shared_dir

from conventions import GPU_TAINT

ADDON = "aws:eks/addon:Addon"
CHART = "eks-node-monitoring-agent-1.7.0"
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def tolerates(toleration: dict, taint: dict) -> bool:
    """Kubernetes' ToleratesTaint: an empty effect or key matches any; Exists ignores the value."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("value", "") == taint.get("value", "")


def render_agent(configuration: str | None) -> list[dict]:
    chart = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / CHART
    return helm_template(chart, "agent", "kube-system", json.loads(configuration) if configuration else None)


def daemonset(objects: list[dict], name_part: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == "DaemonSet" and name_part in o["metadata"]["name"]]
    return found["spec"]["template"]["spec"]


def allowed_instance_types(pod: dict) -> set[str]:
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    return {
        v
        for term in terms
        for e in term["matchExpressions"]
        if e["key"] == "node.kubernetes.io/instance-type" and e["operator"] == "In"
        for v in e["values"]
    }


def test_dcgm_runs_on_the_stacks_tainted_gpu_nodes(prod_plan, dev_plan):
    taint = {**GPU_TAINT, "effect": EFFECTS[GPU_TAINT["effect"]]}  # as the node carries it
    for run, instance_type in ((prod_plan, "p5.48xlarge"), (dev_plan, "g6.xlarge")):
        addon = run.one(ADDON, "eks-eks-node-monitoring-agent")
        objects = render_agent(addon.inputs.get("configurationValues"))
        dcgm = daemonset(objects, "dcgm")
        assert any(tolerates(t, taint) for t in dcgm.get("tolerations") or []), dcgm.get("tolerations")
        assert instance_type in allowed_instance_types(dcgm)
        agent = daemonset(objects, "eks-node-monitoring-agent")
        assert any(tolerates(t, taint) for t in agent["tolerations"])  # the agent, as before


def test_the_charts_defaults_leave_dcgm_off_tainted_nodes():
    """Why the values are needed: the chart's own DCGM DaemonSet tolerates nothing."""
    dcgm = daemonset(render_agent(None), "dcgm")
    taint = {**GPU_TAINT, "effect": EFFECTS[GPU_TAINT["effect"]]}
    assert not any(tolerates(t, taint) for t in dcgm.get("tolerations") or [])


def test_the_values_set_only_keys_the_chart_has(prod_plan):
    """EKS refuses configuration values its add-on schema does not know: every key the stack sets
    is one of the chart's values (the add-on's schema is written from them)."""
    chart = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / CHART
    defaults = load(chart / "values.yaml")
    given = json.loads(prod_plan.one(ADDON, "eks-eks-node-monitoring-agent").inputs["configurationValues"])
    for component, values in given.items():
        assert set(values) <= set(defaults[component]), component


def test_the_toleration_rule():
    taint = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
    assert tolerates({"operator": "Exists"}, taint)
    assert tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not tolerates({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert not tolerates({"key": "other", "operator": "Exists"}, taint)
    assert tolerates({"key": "nvidia.com/gpu", "value": "true"}, taint)
    assert not tolerates({"key": "nvidia.com/gpu", "value": "false"}, taint)
