"""The queueing plane under the mock engine: Kueue and the cluster autoscaler as their charts render
them (real `helm template` from ../shared/charts), the Kueue objects against the Kueue CRDs, and
what Kueue would do with the stack's jobs: which flavor each pod set gets and whether it fits."""

from __future__ import annotations

import pytest
import yaml
from support.charts import pod_spec, render
from support.compute import CAPACITY_BLOCK_FACTS
from support.crds import crd_errors
from support.paths import shared_dir
from support.plans import plan, policy_of

from components.queueing import AUTOSCALER_IMAGE_TAGS
from config import EKS_ADDON_VERSIONS
from conventions import (
    GPU_TOLERATION,
    NODE_TEMPLATE_TAG,
    QUEUE_LABEL,
    SYSTEM_NODE_LABEL,
    autoscaler_discovery_tags,
)
from domain.placement import gpu_placement
from domain.quota import job_demand, shortfall
from offline.plan import manifest_of
from offline.scheduling import (  # the one Kueue model
    JOB_TYPES,
    admitted_demand,
    matches,
    pod_sets,
    quota_of,
    referenced_objects,
)

CR = "kubernetes:kueue.x-k8s.io/v1beta2:"
TAG = "aws:autoscaling/tag:Tag"
NG = "eks:index:ManagedNodeGroup"
CAPACITY_BLOCK = {
    "name": "cb",
    "instanceType": "p5.48xlarge",
    "nodeCount": 2,
    "efa": True,
    "capacityType": "CAPACITY_BLOCK",
    "capacityReservationId": "cr-0123456789abcdef0",
    "availabilityZone": "us-east-1d",
}
BLOCK_FACTS = CAPACITY_BLOCK_FACTS  # the account holds the block
MIXED_JOBS = [
    {"name": "on-cb", "kind": "PyTorchJob", "nodeGroup": "cb", "nodes": 2},
    {"name": "ray-gpu", "kind": "RayJob", "nodeGroup": "gpu"},
    {"name": "box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"},
    {"name": "cpu", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 2},
]


@pytest.fixture(scope="module")
def mixed_plan():
    """dev's autoscaled g6 group beside a Capacity Block group, with every job kind."""
    return mixed()


def mixed():
    return plan(
        "dev",
        facts=BLOCK_FACTS,
        gpuNodeGroups=[{"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2}, CAPACITY_BLOCK],
        jobs=MIXED_JOBS,
    )


def kueue_objects(run, kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for r in run.by_type(CR + kind) for m in [manifest_of(r)[1]]}


def job_manifests(run) -> list[dict]:
    return [manifest_of(r)[1] for t in JOB_TYPES for r in run.by_type(t)]


@pytest.mark.parametrize("stack", ["dev", "prod", "mixed"])
def test_every_pod_set_matches_exactly_one_flavor_and_fits_its_queue(stack, dev_plan, prod_plan, mixed_plan):
    run = {"dev": dev_plan, "prod": prod_plan, "mixed": mixed_plan}[stack]
    flavors = kueue_objects(run, "ResourceFlavor")
    queues = kueue_objects(run, "ClusterQueue")
    local = kueue_objects(run, "LocalQueue")
    jobs = job_manifests(run)
    assert jobs
    for job in jobs:
        queue_name = job["metadata"]["labels"][QUEUE_LABEL]
        queue = queues[local[queue_name]["spec"]["clusterQueue"]]
        demand = admitted_demand(job, queue, flavors, referenced_objects(run))
        assert shortfall(demand, quota_of(queue)) == [], job["metadata"]["name"]
        # The program's own model of the demand is what Kueue would charge.
        group = job["metadata"]["labels"]["trainstack.dev/node-group"]
        assert group == queue_name


def test_a_ray_head_gets_the_system_flavor_never_a_gpu_one(mixed_plan):
    flavors = kueue_objects(mixed_plan, "ResourceFlavor")
    (ray,) = [j for j in job_manifests(mixed_plan) if j["metadata"]["name"] == "ray-gpu"]
    head, worker, submitter = (t for t, _ in pod_sets(ray))
    assert [n for n, f in flavors.items() if matches(head, f)] == ["trainstack-system"]
    assert [n for n, f in flavors.items() if matches(submitter, f)] == ["trainstack-system"]
    assert [n for n, f in flavors.items() if matches(worker, f)] == ["trainstack-gpu"]


def test_quotas_are_what_each_group_holds_at_its_largest(mixed_plan, prod_plan):
    queues = kueue_objects(prod_plan, "ClusterQueue")
    p5 = quota_of(queues["trainstack-p5"])
    # Two p5.48xlarge: 8 GPUs and 32 EFA interfaces each; CPU and memory as a job pod requests them.
    assert p5["trainstack-p5"] == {
        "cpu": 2 * 182_000,
        "memory": 2 * 1842,
        "nvidia.com/gpu": 16,
        "vpc.amazonaws.com/efa": 64,
    }
    # One RayJob's head and submitter per node on the system flavor, nothing else there.
    assert p5["trainstack-system"] == {
        "cpu": 2 * (500 + 500),
        "memory": 2 * (3 + 1),
        "nvidia.com/gpu": 0,
        "vpc.amazonaws.com/efa": 0,
    }
    system = quota_of(queues["trainstack-system"])["trainstack-system"]
    assert system == {
        "cpu": 2 * 1000 + 500 + 500,
        "memory": 2 * 2 + 3 + 1,
    }  # two half m6i.large, a head, a submitter
    gpu = quota_of(kueue_objects(mixed_plan, "ClusterQueue")["trainstack-gpu"])["trainstack-gpu"]
    assert gpu == {"cpu": 6000, "memory": 26, "nvidia.com/gpu": 2}  # no EFA on g6


def test_prods_two_jobs_share_one_queue_and_are_never_admitted_together(prod_plan):
    flavors = kueue_objects(prod_plan, "ResourceFlavor")
    queue = kueue_objects(prod_plan, "ClusterQueue")["trainstack-p5"]
    ray, fsdp = sorted(job_manifests(prod_plan), key=lambda j: j["kind"])
    assert fsdp["metadata"]["labels"][QUEUE_LABEL] == ray["metadata"]["labels"][QUEUE_LABEL] == "p5"
    quota = quota_of(queue)
    alone = [admitted_demand(j, queue, flavors, referenced_objects(prod_plan)) for j in (fsdp, ray)]
    assert all(shortfall(d, quota) == [] for d in alone)
    together = {f: {r: sum(d.get(f, {}).get(r, 0) for d in alone) for r in quota[f]} for f in quota}
    assert "nvidia.com/gpu 32 > 16 on flavor trainstack-p5" in shortfall(together, quota)
    # Admitted whole, first in first out: the second waits with no GPU held.
    assert queue["spec"]["queueingStrategy"] == "StrictFIFO"


def test_the_programs_demand_model_is_kueues(prod_plan):
    """job_demand (the config check's model) charges what the flavor simulation charges."""
    flavors = kueue_objects(prod_plan, "ResourceFlavor")
    queue = kueue_objects(prod_plan, "ClusterQueue")["trainstack-p5"]
    p5 = gpu_placement("p5", "p5.48xlarge", 8, 32, 192, 2048, 0.0)
    for job in job_manifests(prod_plan):  # a TrainJob and a RayJob
        demand = admitted_demand(job, queue, flavors, referenced_objects(prod_plan))
        assert demand == job_demand(p5, 2, job["kind"])


def test_every_kueue_object_validates_against_the_kueue_crds(prod_plan, mixed_plan):
    for run in (prod_plan, mixed_plan):
        kinds = set()
        for r in run.resources:
            if r.type.startswith(CR):
                m = manifest_of(r)[1]
                kinds.add(m["kind"])
                assert crd_errors(m) == [], m["metadata"]["name"]
        assert kinds == {
            "ResourceFlavor",
            "ClusterQueue",
            "LocalQueue",
            "AdmissionCheck",
            "ProvisioningRequestConfig",
            "Topology",
        }


def test_flavors_carry_the_groups_labels_and_gpu_toleration(prod_plan):
    flavors = kueue_objects(prod_plan, "ResourceFlavor")
    assert flavors["trainstack-p5"]["spec"] == {
        "nodeLabels": {"trainstack.dev/role": "gpu", "trainstack.dev/node-group": "p5"},
        "tolerations": [GPU_TOLERATION],
        "topologyName": "trainstack-network-3",  # EKS labels a p5's place in the EC2 network
    }
    assert flavors["trainstack-system"]["spec"] == {"nodeLabels": SYSTEM_NODE_LABEL}
    # Every label a flavor names is on its group's nodes.
    ng = prod_plan.one(NG, "gpu-p5").inputs["labels"]
    assert flavors["trainstack-p5"]["spec"]["nodeLabels"].items() <= ng.items()


def test_the_program_never_sets_what_kueue_owns(prod_plan, mixed_plan):
    """Kueue suspends a job at creation and resumes it on admission, and merges its flavor's labels
    and tolerations into the pod templates. The program sets none of it (so a second `pulumi up`
    has nothing to undo), and its pods already carry exactly what the merge would add."""
    for run in (prod_plan, mixed_plan):
        flavors = kueue_objects(run, "ResourceFlavor")
        for job in job_manifests(run):
            spec = job["spec"]
            assert "suspend" not in spec and "suspend" not in spec.get("runPolicy", {})
            for template, _ in pod_sets(job, referenced_objects(run)):
                (flavor,) = [f for f in flavors.values() if matches(template, f)]
                pod = template["spec"]
                assert flavor["spec"]["nodeLabels"].items() <= pod["nodeSelector"].items()
                assert all(t in pod.get("tolerations", []) for t in flavor["spec"].get("tolerations", []))


def test_autoscaled_groups_queue_behind_a_provisioning_request(mixed_plan):
    queues = kueue_objects(mixed_plan, "ClusterQueue")
    assert queues["trainstack-gpu"]["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "trainstack-provisioning", "onFlavors": ["trainstack-gpu"]}]
    }
    # EKS sizes the Capacity Block group; the system group is fixed: no provisioning for them.
    assert "admissionChecksStrategy" not in queues["trainstack-cb"]["spec"]
    assert "admissionChecksStrategy" not in queues["trainstack-system"]["spec"]
    (config,) = kueue_objects(mixed_plan, "ProvisioningRequestConfig").values()
    assert config["spec"]["provisioningClassName"] == "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    assert config["spec"]["managedResources"] == ["nvidia.com/gpu"]
    (check,) = kueue_objects(mixed_plan, "AdmissionCheck").values()
    assert check["spec"]["controllerName"] == "kueue.x-k8s.io/provisioning-request"


def asg_names(run) -> dict[str, str]:
    """Node group -> the Auto Scaling group EKS made for it (as the offline engine answers)."""
    return {
        r.name: r.inputs["resources"][0]["autoscalingGroups"][0]["name"]
        for r in run.by_type("aws:eks/nodeGroup:NodeGroup")
    }


def test_scale_from_zero_tags_are_on_every_autoscaled_group_and_nothing_else(mixed_plan, prod_plan):
    asgs = asg_names(mixed_plan)
    tags = {}
    for r in mixed_plan.by_type(TAG):
        tags.setdefault(r.inputs["autoscalingGroupName"], {})[r.inputs["tag"]["key"]] = r.inputs["tag"][
            "value"
        ]
        assert r.inputs["tag"]["propagateAtLaunch"] is False
    assert set(tags) == {asgs["gpu-gpu"]}  # not the Capacity Block group, not the system group
    gpu = tags[asgs["gpu-gpu"]]
    cluster = "trainstack-dev"
    assert gpu[autoscaler_discovery_tags(cluster)[1]] == "true"
    labels = mixed_plan.one(NG, "gpu-gpu").inputs["labels"]
    assert {
        k.removeprefix(f"{NODE_TEMPLATE_TAG}/label/"): v for k, v in gpu.items() if "/label/" in k
    } == labels
    assert gpu[f"{NODE_TEMPLATE_TAG}/taint/nvidia.com/gpu"] == "true:NoSchedule"
    assert gpu[f"{NODE_TEMPLATE_TAG}/resources/nvidia.com/gpu"] == "1"
    assert f"{NODE_TEMPLATE_TAG}/resources/vpc.amazonaws.com/efa" not in gpu
    p5 = {r.inputs["tag"]["key"]: r.inputs["tag"]["value"] for r in prod_plan.by_type(TAG)}
    assert p5[f"{NODE_TEMPLATE_TAG}/resources/vpc.amazonaws.com/efa"] == "32"
    assert p5[f"{NODE_TEMPLATE_TAG}/resources/nvidia.com/gpu"] == "8"
    # The autoscaler recognises GPU nodes by this label, before and after they exist.
    assert p5[f"{NODE_TEMPLATE_TAG}/label/k8s.amazonaws.com/accelerator"] == "nvidia-h100"


def test_the_capacity_block_group_keeps_eks_sizing(mixed_plan):
    cb = mixed_plan.one(NG, "gpu-cb").inputs
    assert cb["scalingConfig"] == {"minSize": 0, "desiredSize": 2, "maxSize": 2}
    gpu = mixed_plan.one(NG, "gpu-gpu").inputs
    assert gpu["scalingConfig"] == {"minSize": 0, "desiredSize": 0, "maxSize": 2}
    assert mixed_plan.outputs["gpuNodeGroups"]["cb"]["autoscaled"] is False


def test_the_autoscaler_may_scale_only_the_stacks_autoscaled_groups(mixed_plan):
    policy = policy_of(mixed_plan, "cluster-autoscaler-policy")
    (write,) = [s for s in policy["Statement"] if s["Sid"] == "ScaleTheStacksGroups"]
    asgs = asg_names(mixed_plan)
    assert write["Resource"] == [
        f"arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/{asgs['gpu-gpu']}"
    ]
    assert set(write["Action"]) == {
        "autoscaling:SetDesiredCapacity",
        "autoscaling:TerminateInstanceInAutoScalingGroup",
    }
    (read,) = [s for s in policy["Statement"] if s["Sid"] == "Discover"]
    assert all(a.split(":")[1].startswith(("Describe", "Get")) for a in read["Action"])
    assoc = mixed_plan.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "cluster-autoscaler-association"
    )
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == (
        "kube-system",
        "cluster-autoscaler",
    )


def test_the_offline_engine_names_each_groups_asg_as_eks_does(mixed_plan):
    asgs = asg_names(mixed_plan)
    assert set(asgs) == {"eks-system", "gpu-gpu", "gpu-cb"}
    assert (
        asgs["gpu-gpu"].startswith("eks-trainstack-dev-gpu-")
        and len(asgs["gpu-gpu"]) == len("eks-trainstack-dev-gpu-") + 36
    )
    # The same name on every run: nothing downstream changes on a second `pulumi up`.
    assert asg_names(mixed()) == asgs


# --- the charts, rendered ------------------------------------------------------------------------


def test_kueue_runs_on_system_nodes_with_the_pytorchjob_integration_and_the_charts_defaults(prod_plan):
    """The chart takes the manager config as one string: whatever the stack leaves out is gone, so
    every setting of the chart's default stays, and the stack's own are added."""
    objects = render(prod_plan, "kueue")
    assert pod_spec(objects, "Deployment")["nodeSelector"] == SYSTEM_NODE_LABEL
    (config_map,) = [
        o
        for o in objects
        if o["kind"] == "ConfigMap" and "controller_manager_config.yaml" in o.get("data", {})
    ]
    config = yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
    assert config["integrations"]["frameworks"] == [
        "batch/job",
        "kubeflow.org/pytorchjob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "trainer.kubeflow.org/trainjob",
    ]
    # 20 minutes to be ready once the nodes exist, after the autoscaler's 30 to bring them (AWS
    # marks a ProvisioningRequest provisioned before its nodes join).
    assert config["waitForPodsReady"]["timeout"] == "50m"
    assert config["waitForPodsReady"]["recoveryTimeout"] == "35m"  # the 30-minute rendezvous wait, and more
    assert config["waitForPodsReady"]["requeuingStrategy"]["timestamp"] == "Eviction"
    chart = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / "kueue-0.19.2"
    default = yaml.safe_load(
        yaml.safe_load((chart / "values.yaml").read_text())["managerConfig"]["controllerManagerConfigYaml"]
    )
    for key, value in default.items():
        if key != "integrations":
            assert config[key] == value, key
    # Every default integration the stack's jobs use stays on.
    assert {"batch/job", "ray.io/rayjob", "ray.io/raycluster"} <= set(default["integrations"]["frameworks"])


@pytest.mark.parametrize("version", sorted(EKS_ADDON_VERSIONS))
def test_the_autoscaler_matches_the_cluster_and_discovers_only_the_stacks_groups(version):
    run = plan("prod", cluster={"kubernetesVersion": version})
    objects = render(run, "cluster-autoscaler")
    pod = pod_spec(objects, "Deployment")
    assert pod["nodeSelector"] == SYSTEM_NODE_LABEL
    assert pod["serviceAccountName"] == "cluster-autoscaler"
    (container,) = pod["containers"]
    assert container["image"].endswith(f":{AUTOSCALER_IMAGE_TAGS[version]}")
    assert AUTOSCALER_IMAGE_TAGS[version].startswith(f"v{version}.")
    flags = set(container["command"])
    discovery, ours = autoscaler_discovery_tags("trainstack-prod")
    assert f"--node-group-auto-discovery=asg:tag={discovery},{ours}" in flags
    assert {
        "--cloud-provider=aws",
        "--enable-provisioning-requests=true",
        "--scale-down-unneeded-time=10m",
        "--max-node-provision-time=30m",
        "--skip-nodes-with-local-storage=false",
        "--expander=least-waste",
    } <= flags
    roles = [o for o in objects if o["kind"] == "ClusterRole"]
    granted = {r for role in roles for rule in role["rules"] for r in rule.get("resources", [])}
    assert {"provisioningrequests", "provisioningrequests/status"} <= granted
    crd = run.one("kubernetes:yaml/v2:ConfigGroup", "queueing-provisioning-request-crd").inputs["files"]
    tag = AUTOSCALER_IMAGE_TAGS[version].removeprefix("v")
    assert crd == [
        f"https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-{tag}/"
        "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
    ]


def test_idle_time_and_provisioning_limits_come_from_config():
    run = plan(
        "prod", queueing={"idleNodeMinutes": 45, "maxNodeProvisionMinutes": 40, "podsReadyTimeoutMinutes": 25}
    )
    flags = set(pod_spec(render(run, "cluster-autoscaler"), "Deployment")["containers"][0]["command"])
    assert {"--scale-down-unneeded-time=45m", "--max-node-provision-time=40m"} <= flags
    job = run.one("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert job.options["customTimeouts"]["create"] == "100m"  # 60 to run, 40 for nodes
    config = yaml.safe_load(
        run.one("kubernetes:helm.sh/v3:Release", "kueue").inputs["values"]["managerConfig"][
            "controllerManagerConfigYaml"
        ]
    )
    assert config["waitForPodsReady"]["timeout"] == "65m"  # 25 to be ready after 40 for the nodes
