"""The operators' Helm charts rendered for real (`helm template`, from ../shared/charts) with the
values the stack passes: a misspelt or misplaced values key is silently ignored by Helm, so what
counts is what the rendered objects say."""

from __future__ import annotations

from support.charts import pod_spec, render

from conventions import EFA_LABEL, GPU_PRESENT_LABEL, GPU_TOLERATION, SYSTEM_NODE_LABEL


def test_nvidia_device_plugin_runs_on_gpu_nodes_only(prod_plan):
    objects = render(prod_plan, "nvidia-device-plugin")
    # The plugin, and (0.20) its MPS control daemon, which runs only where MPS is configured.
    daemons = {o["metadata"]["name"] for o in objects if o["kind"] == "DaemonSet"}
    assert daemons == {"nvidia-device-plugin", "nvidia-device-plugin-mps-control-daemon"}
    gpu_nodes = [{"matchExpressions": [{"key": GPU_PRESENT_LABEL, "operator": "In", "values": ["true"]}]}]
    for name in daemons:
        spec = pod_spec(objects, "DaemonSet", name)
        assert GPU_TOLERATION in spec["tolerations"]
        affinity = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert affinity["nodeSelectorTerms"] == gpu_nodes


def test_efa_device_plugin_runs_on_efa_gpu_nodes(prod_plan):
    spec = pod_spec(render(prod_plan, "aws-efa-k8s-device-plugin"), "DaemonSet")
    assert spec["nodeSelector"] == {EFA_LABEL: "true"}
    assert GPU_TOLERATION in spec["tolerations"]


def test_kuberay_runs_on_system_nodes_and_leaves_its_crds_to_the_stack(dev_plan):
    objects = render(dev_plan, "kuberay-operator")
    assert pod_spec(objects, "Deployment")["nodeSelector"] == SYSTEM_NODE_LABEL
    # The stack applies the CRDs from the same tag (operators-kuberay-crds): Helm installs none.
    assert not [o for o in objects if o["kind"] == "CustomResourceDefinition"]
