"""Shared storage under the mock engine: FSx for Lustre linked to the bucket at /checkpoints, the
FSx and Mountpoint CSI drivers with their Pod Identity, the static volumes, and every job kind's
mounts; the trainer's shared-volume mode where FSx is, today's node disk plus S3 elsewhere."""

from __future__ import annotations

import json

import pytest
import yaml
from support.compute import user_data_parts
from support.crds import crd_errors
from support.manifests import worker_pod
from support.plans import plan, policy_of, stack_values

from account_checks import AccountCheckError
from config import parse_config
from offline.cost import hourly_cost
from offline.engine.aws_answers import file_system_id
from offline.plan import manifest_of
from offline.scheduling import JOB_TYPES, referenced_objects
from offline.timeline import critical_path, until_training

FS = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
P5 = {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True, "placementGroup": True}
G6 = {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2}
FSX_ON = {"enabled": True, "storageCapacityGiB": 2400, "throughputPerTiB": 250, "nodeGroups": ["p5"]}
JOBS = [
    {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "wait": "none"},
    {"name": "ray", "kind": "RayJob", "nodeGroup": "p5", "nodes": 2, "wait": "none"},
    {"name": "box", "kind": "RayCluster", "nodeGroup": "p5", "nodes": 1, "wait": "none"},
    {"name": "small", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"},
]


def storage(**extra) -> dict:
    return {"encryption": "KMS", "protect": True, "fsx": FSX_ON, "datasetsMount": True, **extra}


@pytest.fixture(scope="module")
def fsx_plan():
    return plan("prod", gpuNodeGroups=[P5, G6], jobs=JOBS, storage=storage())


def body(run, type_: str, name: str | None = None) -> dict:
    return manifest_of(run.one(type_, name))[1]


def jobs(run) -> dict[str, dict]:
    found = {}
    for t in JOB_TYPES:
        for r in run.by_type(t):
            m = manifest_of(r)[1]
            found[m["metadata"]["name"]] = m
    return found


def test_the_file_system_sits_in_the_subnet_of_its_groups_az(fsx_plan):
    fs = fsx_plan.one(FS)
    i = fs.inputs
    assert (i["deploymentType"], i["storageType"], i["fileSystemTypeVersion"]) == (
        "PERSISTENT_2",
        "SSD",
        "2.15",
    )
    assert (i["storageCapacity"], i["perUnitStorageThroughput"]) == (2400, 250)
    # The p5 group's subnet, one string (one AZ).
    assert i["subnetIds"] == fsx_plan.one("eks:index:ManagedNodeGroup", "gpu-p5").inputs["subnetIds"][0]
    assert fs.options.get("protect") is True  # a protected stack keeps its checkpoints


def test_lustre_ports_are_open_from_the_file_system_and_the_nodes(fsx_plan):
    sg = fsx_plan.one("aws:ec2/securityGroup:SecurityGroup", "checkpoints-fsx-lustre")
    assert sg.urn in fsx_plan.one(FS).dependencies
    rules = [r.inputs for r in fsx_plan.by_type(INGRESS) if r.name.startswith("checkpoints-fsx-lustre-")]
    ports = {(r["fromPort"], r["toPort"]) for r in rules}
    assert ports == {(988, 988), (1018, 1023)}
    sources = {r["referencedSecurityGroupId"] for r in rules}
    cluster_sg = fsx_plan.one("aws:eks/cluster:Cluster").inputs["vpcConfig"]["clusterSecurityGroupId"]
    assert cluster_sg in sources and len(sources) == 2  # itself and the nodes (the cluster's group)
    assert all(r["ipProtocol"] == "tcp" for r in rules)


def test_the_association_links_checkpoints_to_the_bucket_both_ways(fsx_plan):
    dra = fsx_plan.one(DRA).inputs
    bucket = fsx_plan.outputs["bucketName"]
    assert dra["fileSystemPath"] == "/checkpoints"
    assert dra["dataRepositoryPath"] == f"s3://{bucket}/checkpoints/"
    assert dra["batchImportMetaDataOnCreate"] is True and dra["deleteDataInFilesystem"] is False
    # Deletions go both ways: the trainer's prune reaches S3 (tests/planes/test_fsx_export.py).
    assert dra["s3"] == {
        "autoExportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
        "autoImportPolicy": {"events": ["NEW", "CHANGED", "DELETED"]},
    }
    # A KMS bucket: FSx's linked role may use the key, before the association exists.
    policy = fsx_plan.one("aws:kms/keyPolicy:KeyPolicy")
    assert policy.urn in fsx_plan.one(DRA).dependencies
    statements = {s["Sid"]: s for s in json.loads(policy.inputs["policy"])["Statement"]}
    assert statements["AccountAdministers"]["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}
    fsx = statements["FSxLustreLinkedBucket"]
    (file_system,) = fsx_plan.by_type("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert fsx["Condition"]["ArnEquals"]["aws:PrincipalArn"].endswith(
        f"s3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_{file_system_id(file_system.name)}"
    )
    plain = plan("prod", gpuNodeGroups=[P5], jobs=[], storage=storage(encryption="SSE-S3"))
    assert not plain.by_type("aws:kms/keyPolicy:KeyPolicy")


def test_the_static_volume_and_claim_name_the_file_system(fsx_plan):
    pv = body(fsx_plan, "kubernetes:core/v1:PersistentVolume", "checkpoints-fsx-pv")
    fs = fsx_plan.one(FS)
    csi = pv["spec"]["csi"]
    assert csi["driver"] == "fsx.csi.aws.com"
    assert csi["volumeHandle"].startswith("fs-0") and csi["volumeAttributes"]["dnsname"].startswith(
        csi["volumeHandle"]
    )
    assert csi["volumeAttributes"]["mountname"]
    assert (pv["spec"]["accessModes"], pv["spec"]["mountOptions"]) == (["ReadWriteMany"], ["flock"])
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    pvc = body(fsx_plan, "kubernetes:core/v1:PersistentVolumeClaim", "checkpoints-fsx-pvc")
    assert pvc["metadata"]["namespace"] == "training" and pvc["spec"]["volumeName"] == pv["metadata"]["name"]
    assert pvc["spec"]["storageClassName"] == ""  # bound to this volume, never dynamically provisioned
    assert fs.urn in fsx_plan.one("kubernetes:core/v1:PersistentVolume", "checkpoints-fsx-pv").dependencies


def test_every_job_kind_on_an_fsx_group_mounts_it_at_checkpoints(fsx_plan):
    found = jobs(fsx_plan)
    for name in ("fsdp", "ray", "box"):
        job = found[name]
        assert crd_errors(job) == [], name
        pod = worker_pod(job, referenced_objects(fsx_plan))
        (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
        assert volume == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-checkpoints"}}
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"]
        assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": f"checkpoints/{name}"}
        # Shared-volume mode: the file system exports to S3, no rank uploads.
        assert "--s3-checkpoints" not in json.dumps(job["spec"]), name
    # A group without FSx keeps today's node disk plus S3.
    small = worker_pod(found["small"], referenced_objects(fsx_plan))
    assert [v for v in small["volumes"] if v["name"] == "checkpoints"] == [
        {"name": "checkpoints", "emptyDir": {}}
    ]
    args = small["containers"][0]["args"]
    assert args[args.index("--s3-checkpoints") + 1].endswith("/checkpoints/small/")


def test_datasets_are_mounted_read_only_through_mountpoint(fsx_plan):
    pv = body(fsx_plan, "kubernetes:core/v1:PersistentVolume", "datasets-s3-pv")
    assert pv["spec"]["csi"]["driver"] == "s3.csi.aws.com"
    assert pv["spec"]["csi"]["volumeAttributes"] == {"bucketName": fsx_plan.outputs["bucketName"]}
    assert pv["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert "read-only" in pv["spec"]["mountOptions"] and "prefix datasets/" in pv["spec"]["mountOptions"]
    for job in jobs(fsx_plan).values():
        pod = worker_pod(job, referenced_objects(fsx_plan))
        assert {"name": "datasets", "mountPath": "/datasets", "readOnly": True} in pod["containers"][0][
            "volumeMounts"
        ]
        assert {
            "name": "datasets",
            "persistentVolumeClaim": {"claimName": "s3-datasets", "readOnly": True},
        } in pod["volumes"]


def test_the_csi_drivers_are_eks_add_ons_with_their_own_pod_identity(fsx_plan):
    addons = {r.inputs["addonName"]: r for r in fsx_plan.by_type("aws:eks/addon:Addon")}
    assert {"aws-fsx-csi-driver", "aws-mountpoint-s3-csi-driver"} <= set(addons)
    associations = {
        r.inputs["serviceAccount"]: r
        for r in fsx_plan.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert associations["fsx-csi-controller-sa"].inputs["namespace"] == "kube-system"
    assert associations["fsx-csi-controller-sa"].urn in addons["aws-fsx-csi-driver"].dependencies
    assert associations["s3-csi-driver-sa"].urn in addons["aws-mountpoint-s3-csi-driver"].dependencies
    read = policy_of(fsx_plan, "datasets-s3-csi-policy")
    actions = {a for s in read["Statement"] for a in s["Action"]}
    assert actions == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}  # read-only: nothing writes datasets/
    (get,) = [s for s in read["Statement"] if s["Sid"] == "ReadDatasets"]
    assert get["Resource"].endswith("/datasets/*")


def test_the_lustre_client_goes_onto_the_nodes_of_the_groups_that_mount_it(fsx_plan):
    templates = {r.name: r.inputs for r in fsx_plan.by_type("aws:ec2/launchTemplate:LaunchTemplate")}
    # One MIME document (EKS merges its parts with its own): the instance store's RAID0 NodeConfig
    # and the Lustre client script, side by side.
    (node_config, script) = user_data_parts(templates["gpu-p5-lt"])
    assert node_config[0] == "application/node.eks.aws"
    assert yaml.safe_load(node_config[1])["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}
    assert script[0] == "text/x-shellscript"
    assert "dnf install -y lustre-client" in script[1] and "modprobe lustre" in script[1]
    # The other group's nodes get their instance store set up, and no Lustre client.
    assert [kind for kind, _ in user_data_parts(templates["gpu-gpu-lt"])] == ["application/node.eks.aws"]


def test_fsx_is_off_by_default_and_a_plan_without_it_has_none(prod_plan):
    assert not prod_plan.by_type(FS) and not prod_plan.by_type("kubernetes:core/v1:PersistentVolume")
    # Off because prod's stack file leaves it at its default; its jobs keep the node disk at
    # /checkpoints and upload to the bucket themselves, and no FSx driver is installed.
    assert parse_config("prod", stack_values("prod")).storage.fsx.enabled is False
    found = jobs(prod_plan)
    assert set(found) == {"llama-1b-fsdp", "llama-1b-ray"}
    bucket = prod_plan.outputs["bucketName"]
    for name, job in found.items():
        pod = worker_pod(job, referenced_objects(prod_plan))
        assert [v for v in pod["volumes"] if v["name"] == "checkpoints"] == [
            {"name": "checkpoints", "emptyDir": {}}
        ], name
        assert f"--s3-checkpoints s3://{bucket}/checkpoints/{name}/" in " ".join(
            pod["containers"][0].get("args") or [job["spec"].get("entrypoint", "")]
        ), name
    addons = {a.inputs["addonName"] for a in prod_plan.by_type("aws:eks/addon:Addon")}
    assert "aws-fsx-csi-driver" not in addons and "eks-pod-identity-agent" in addons


def test_the_plan_prices_the_file_system_and_builds_it_beside_the_cluster(fsx_plan):
    import datetime

    from support.plans import stack_values

    from config import parse_config

    values = stack_values("prod", gpuNodeGroups=[P5, G6], jobs=JOBS, storage=storage())
    (line,) = [
        c for c in hourly_cost(parse_config("prod", values), datetime.date(2026, 11, 23)) if "FSx" in c.item
    ]
    assert line.quantity == 2400 and line.unit_usd == 0.20 / 730  # 250 MB/s/TiB, per GiB-month
    chain = [s.name for s in critical_path(fsx_plan.resources, until_training(fsx_plan.resources))]
    assert "checkpoints-fsx" not in chain  # ~10 min, but it runs while EKS comes up


def test_groups_in_two_azs_cannot_share_one_file_system():
    groups = [{**P5, "availabilityZone": "us-east-1c"}, {**G6, "availabilityZone": "us-east-1a"}]
    with pytest.raises(AccountCheckError) as err:
        plan("prod", gpuNodeGroups=groups, jobs=[], storage={"fsx": {"enabled": True}})
    assert (
        "trainstack:storage.fsx.nodeGroups: p5 in us-east-1c, gpu in us-east-1a; an FSx for Lustre file system lives in one AZ"
        in str(err.value)
    )
    # Listing only the groups of one AZ is fine.
    plan("prod", gpuNodeGroups=groups, jobs=[], storage={"fsx": {"enabled": True, "nodeGroups": ["p5"]}})
