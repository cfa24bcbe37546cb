"""Topology-aware placement: a Kueue Topology of EKS's network-node-layer labels on the flavors of
groups whose instance types EC2 describes the network place of, each job's `placement` as its group
pods' Kueue annotation, and the plan's scheduling check placing each gang in the network as Kueue
would (kueue v0.19.2 topology-aware scheduling, tas_flavorassigner.go)."""

from __future__ import annotations

import pytest
from support.config_rules import problems
from support.plans import EXISTING_CLUSTER, plan, stack_values

from components.jobs.kinds import KINDS
from config import parse_config
from domain.topology import PREFERRED_ANNOTATION, REQUIRED_ANNOTATION, UNCONSTRAINED_ANNOTATION
from offline.plan import manifest_of
from offline.scheduling import check, referenced_objects
from offline.simulated_account import FactError, OfflineAccount
from offline.topology import tas_problem

CR = "kubernetes:kueue.x-k8s.io/v1beta2:"
PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
TRAINJOB = "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob"
RAYJOB = "kubernetes:ray.io/v1:RayJob"
LAYER = "topology.k8s.aws/network-node-layer-{}"


def kueue(run, kind: str) -> dict[str, dict]:
    return {r.inputs["metadata"]["name"]: r.inputs["spec"] for r in run.by_type(CR + kind)}


def worker_annotations(run) -> dict[str, str]:
    """The annotations on the pods of the plan's one PyTorchJob or TrainJob (a TrainJob's come
    from its runtime patch)."""
    (m,) = [manifest_of(r)[1] for t in (PYTORCHJOB, TRAINJOB) for r in run.by_type(t)]
    ((_, template, _),) = KINDS[m["kind"]].pod_sets(m, referenced_objects(run))
    return template["metadata"].get("annotations", {})


def chain(run, stack: str, job: str, **overrides):
    report = check(run, parse_config(stack, stack_values(stack, **overrides)))
    (found,) = [c for c in report.chains if c.job == job]
    return found


def test_prods_p5_flavor_names_a_topology_of_the_network_layers_and_the_node(prod_plan):
    topologies = kueue(prod_plan, "Topology")
    assert topologies == {
        "trainstack-network-3": {
            "levels": [
                {"nodeLabel": LAYER.format(1)},
                {"nodeLabel": LAYER.format(2)},
                {"nodeLabel": LAYER.format(3)},
                {"nodeLabel": "kubernetes.io/hostname"},
            ]
        }
    }
    flavors = kueue(prod_plan, "ResourceFlavor")
    assert flavors["trainstack-p5"]["topologyName"] == "trainstack-network-3"
    assert "topologyName" not in flavors["trainstack-system"]
    # The flavor is made after its Topology.
    topology = prod_plan.one(CR + "Topology")
    assert topology.urn in prod_plan.one(CR + "ResourceFlavor", "resourceflavor-trainstack-p5").dependencies


def test_groups_eks_does_not_label_and_clusters_the_stack_did_not_create_get_no_topology(dev_plan):
    assert kueue(dev_plan, "Topology") == {}  # g6.xlarge: EC2 describes no network place for it
    assert worker_annotations(dev_plan) == {}
    existing = plan("existing", facts=EXISTING_CLUSTER)
    assert kueue(existing, "Topology") == {}
    assert all("topologyName" not in f for f in kueue(existing, "ResourceFlavor").values())


def test_efa_jobs_prefer_the_bottom_layer_on_their_group_pods_only(prod_plan):
    assert worker_annotations(prod_plan) == {PREFERRED_ANNOTATION: LAYER.format(3)}
    ray = prod_plan.one(RAYJOB).inputs["spec"]
    (workers,) = ray["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["template"]["metadata"]["annotations"] == {PREFERRED_ANNOTATION: LAYER.format(3)}
    # The head and the submitter run on the system flavor, which has no Topology: they ask for none.
    assert "annotations" not in ray["rayClusterSpec"]["headGroupSpec"]["template"]["metadata"]
    assert "annotations" not in (ray["submitterPodTemplate"].get("metadata") or {})


@pytest.mark.parametrize(
    ("instance_type", "placement", "expected", "topology"),
    [
        ("p5.48xlarge", "required", {REQUIRED_ANNOTATION: LAYER.format(2)}, "trainstack-network-3"),
        ("p5.48xlarge", "any", {UNCONSTRAINED_ANNOTATION: "true"}, "trainstack-network-3"),
        ("p6-b200.48xlarge", None, {PREFERRED_ANNOTATION: LAYER.format(4)}, "trainstack-network-4"),
        ("p6-b200.48xlarge", "required", {REQUIRED_ANNOTATION: LAYER.format(3)}, "trainstack-network-4"),
    ],
)
def test_placement_is_the_pod_annotation_at_its_level(instance_type, placement, expected, topology):
    group = {"name": "p5", "instanceType": instance_type, "nodeCount": 2, "efa": True}
    job = {"name": "train", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2}
    run = plan("prod", gpuNodeGroups=[group], jobs=[{**job, "placement": placement} if placement else job])
    assert worker_annotations(run) == expected
    assert list(kueue(run, "Topology")) == [topology]


def test_a_labelled_group_without_efa_asks_for_any_node():
    """On a flavor with a Topology every PodSet must ask for topology, or Kueue gives it another
    flavor (none here): `any` is the unconstrained request."""
    group = {"name": "l40s", "instanceType": "g6e.xlarge", "nodeCount": 2}
    job = {"name": "train", "kind": "PyTorchJob", "nodeGroup": "l40s", "nodes": 2}
    run = plan("dev", gpuNodeGroups=[group], jobs=[job])
    assert worker_annotations(run) == {UNCONSTRAINED_ANNOTATION: "true"}
    c = chain(run, "dev", "train", gpuNodeGroups=[group], jobs=[job])
    assert (
        c.fits
        and c.links[-1]
        == "topology: pod set worker: any of group l40s's nodes once the provisioned nodes are Ready"
    )


def test_a_placement_on_a_group_without_network_labels_is_refused():
    (msg,) = problems(
        gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge"}],
        jobs=[{"name": "train", "kind": "PyTorchJob", "nodeGroup": "gpu", "placement": "required"}],
    )
    assert msg.startswith(
        "trainstack:jobs[0].placement = \"required\": node group 'gpu' (g6.xlarge) has no network topology labels"
    )
    assert msg.endswith("allowed: any, or unset")


def test_a_required_gang_whose_nodes_share_no_domain_never_starts():
    split = {"instance-topology:p5": [["nn-1", "nn-2", "nn-3"], ["nn-1", "nn-9", "nn-4"]]}
    jobs = [{"name": "train", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "placement": "required"}]
    fits = chain(plan("prod", jobs=jobs), "prod", "train", jobs=jobs)
    assert fits.links[-1] == (
        "topology: pod set worker: one network-node-layer-2 domain (required) once the provisioned nodes are Ready"
    )
    broken = chain(plan("prod", facts=split, jobs=jobs), "prod", "train", jobs=jobs)
    assert broken.broken == (
        "topology: pod set worker (2 pods) requires one network-node-layer-2 domain, but at most 1 of group "
        "p5's nodes share one (simulated DescribeInstanceTopology of 2 nodes; fact instance-topology:p5 gives yours)"
    )
    # The same nodes under `preferred`: Kueue climbs to the layer they share.
    preferred = [{**jobs[0], "placement": "preferred"}]
    climbed = chain(plan("prod", facts=split, jobs=preferred), "prod", "train", jobs=preferred)
    assert (
        climbed.fits
        and "the closest that holds its 2 pods is one network-node-layer-1 domain" in climbed.links[-1]
    )


def test_kueue_keeps_podsets_that_ask_for_no_topology_off_topology_flavors():
    tas = {"spec": {"topologyName": "trainstack-network-3"}}
    plain = {"spec": {}}
    asks = {"metadata": {"annotations": {PREFERRED_ANNOTATION: LAYER.format(3)}}}
    silent = {"metadata": {}}
    gpu = {"nvidia.com/gpu"}
    assert tas_problem(silent, tas, False, gpu, gpu).startswith("supports only topology-aware scheduling")
    assert tas_problem(silent, tas, True, gpu, gpu) is None  # every flavor has one: TAS is implied
    assert tas_problem(asks, plain, False, gpu, gpu) == (
        "has no Topology, and the pods ask for topology-aware scheduling"
    )
    assert tas_problem(asks, plain, False, {"cpu"}, gpu) is None  # none of its resources there
    assert tas_problem(asks, tas, False, gpu, gpu) is None


def test_instance_topology_facts_are_checked():
    with pytest.raises(FactError, match="a list of network node sets"):
        OfflineAccount("us-east-1", {"instance-topology:p5": ["nn-1"]})
    account = OfflineAccount("us-east-1")
    assert account.instance_topology("p5", 2, 3) == [
        ["nn-p5-1", "nn-p5-2", "nn-p5-3-0"],
        ["nn-p5-1", "nn-p5-2", "nn-p5-3-1"],
    ]
