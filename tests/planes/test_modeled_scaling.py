"""Each default-trainer job on a GPU group exports its modeled tokens/s per node count
(planes/jobs.py modeled_scaling), which `trainstack estimate` scales a measurement by: the plan's
step model, so more nodes pay FSDP's traffic over the link, which a flat share per doubling ignores."""

from __future__ import annotations

from support.plans import plan


def test_the_prod_1b_job_carries_its_modeled_throughput_on_each_node_count_of_its_group(prod_plan):
    jobs = prod_plan.outputs["jobs"]
    model = jobs["llama-1b-fsdp"]["modeledTokensPerS"]
    assert sorted(model, key=int) == ["1", "2"]  # p5's nodeCount
    # 3,200 Gbit/s of EFA hides FSDP's traffic behind the compute: twice the nodes, twice the tokens.
    assert 0 < model["1"] < model["2"] <= 2 * model["1"]


def test_a_group_without_efa_scales_worse_than_one_with_it():
    """4 x g5.8xlarge over 25 Gbit/s baseline: the network, not the GPUs, sets the slope."""
    groups = [{"name": "g5", "instanceType": "g5.8xlarge", "nodeCount": 4}]
    jobs = [{"name": "fsdp", "kind": "TrainJob", "nodeGroup": "g5", "nodes": 4, "model": "1b",
             "args": ["--batch-size", "2"], "wait": "none"}]  # fmt: skip
    model = plan("dev", gpuNodeGroups=groups, jobs=jobs).outputs["jobs"]["fsdp"]["modeledTokensPerS"]
    assert sorted(model, key=int) == ["1", "2", "4"]
    # The flat rule's 90% per doubling would claim 3.24 times one node's; the link allows about 2.
    assert model["4"] / model["1"] < 3


def test_a_job_the_model_does_not_know_carries_none():
    jobs = [{"name": "own", "kind": "PyTorchJob", "nodeGroup": "gpu", "command": ["python", "smoke_test.py"]}]
    assert "modeledTokensPerS" not in plan("dev", jobs=jobs).outputs["jobs"]["own"]
