"""The NVIDIA driver on an existing cluster's GPU nodes, read before anything is registered: a node
older than the training image's CUDA stops the plan with a sentence (its containers would not
start: CUDA 13.0 needs R580), a node without GPU feature discovery's label is reported unchecked,
and nodes of other groups are not the stack's concern."""

from __future__ import annotations

import pytest
from support.plans import EXISTING_CLUSTER, plan, stack_values

from account_checks.node_drivers import NodeDriverError
from conventions import driver_major
from domain.drivers import cuda_of, least_driver
from offline.engine import run_program

P5 = {"node.kubernetes.io/instance-type": "p5.48xlarge"}


def node(name: str, labels: dict[str, str]) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def nodes_fact(*nodes: dict) -> dict:
    return {**EXISTING_CLUSTER, "cluster-objects:nodes": list(nodes)}


def report(run) -> list[str]:
    (found,) = [m for m in run.messages if m.startswith("Node drivers")]
    return found.splitlines()


def test_the_image_needs_r580_and_gfd_labels_say_what_a_node_has():
    assert cuda_of("nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c74") == (13, 0)
    assert least_driver("nvidia/cuda:13.0.3-base-ubuntu24.04") == 580
    assert least_driver("nvidia/cuda:12.4.1-runtime-ubuntu22.04") == 550
    assert least_driver("public.ecr.aws/my/trainer:1") is None
    # GFD's current label first, its deprecated one (older GFD) next.
    assert driver_major({"nvidia.com/cuda.driver-version.major": "580"}) == 580
    assert driver_major({"nvidia.com/cuda.driver.major": "550"}) == 550
    assert driver_major({}) is None


def test_a_node_on_an_older_driver_stops_the_plan():
    old = node("ip-10-0-1-5", {**P5, "nvidia.com/cuda.driver-version.major": "550"})
    new = node("ip-10-0-1-6", {**P5, "nvidia.com/cuda.driver-version.major": "580"})
    with pytest.raises(NodeDriverError) as err:
        run_program("existing", stack_values("existing"), facts=nodes_fact(old, new))
    (line,) = [x for x in str(err.value).splitlines() if x.startswith("  - ")]
    assert line == (
        "  - node ip-10-0-1-5 has NVIDIA driver R550 (nvidia.com/cuda.driver-version.major); the training "
        "image (nvidia/cuda:13.0.3-base-ubuntu24.04) needs R580 or newer, and its containers would not "
        "start there: move the node group to an AMI with R580 (the EKS AL2023 NVIDIA AMIs since late 2025), "
        "or build on a base image of an older CUDA (image.baseImage)"
    )


def test_new_enough_and_unlabelled_nodes_plan_and_are_reported():
    new = node("ip-10-0-1-6", {**P5, "nvidia.com/cuda.driver-version.major": "580"})
    bare = node("ip-10-0-1-7", P5)
    cpu = node("ip-10-0-9-9", {"node.kubernetes.io/instance-type": "m6i.large"})
    lines = report(plan("existing", facts=nodes_fact(new, bare, cpu)))
    assert lines == [
        "Node drivers (the training image on nvidia/cuda:13.0.3-base-ubuntu24.04 needs R580 or newer):",
        "  p5: 2 node(s) now, drivers R580; not checked on ip-10-0-1-7: no GPU feature discovery label "
        "(nvidia.com/cuda.driver-version.major)",
    ]
