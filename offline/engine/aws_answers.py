"""What AWS and the AWS-side providers answer the offline engine, as tables by token.

`RESOURCES` maps a resource type token to what its provider computes on create (ARNs, endpoints,
generated names and passwords, image digests); `MODULES` does the same for every type of a module
(IAM); any other type gets an ARN named after it, and `IDS` gives a physical id where the
provider's is not `<name>-id`. `OfflineAws.invokes` maps a function token to its answer: the
caller, the partition and region, instance types from the instance catalog (a type outside it
fails as EC2 fails a type it does not sell), offerings and subnets,
registry tokens, SSM parameters. What depends on the account's own state (AZs, quotas, log groups, a
running cluster) is offline/simulated_account.py's; what pulumi-eks creates is pulumi_eks.py's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from config.instance_facts import NOT_IN_OFFLINE_CATALOG
from domain.catalog import INSTANCE_TYPES, is_sagemaker_type
from offline.simulated_account import OfflineAccount

ACCOUNT_ID = "123456789012"
OFFLINE_CALLER_ARN = f"arn:aws:iam::{ACCOUNT_ID}:user/offline"


def arn(service: str, resource: str, region: str, regional: bool = True) -> str:
    return f"arn:aws:{service}:{region if regional else ''}:{ACCOUNT_ID}:{resource}"


def fake_digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("/".join(parts).encode()).hexdigest()


@dataclass
class NewResource:
    """A resource being created, as its answer sees it."""

    type: str
    resource_name: str  # the logical name in the program
    name: str  # the `name` input, else the logical name
    state: dict[str, Any]  # the inputs, autonamed
    region: str

    @classmethod
    def of(cls, type_: str, resource_name: str, inputs: dict[str, Any], region: str) -> NewResource:
        state = dict(inputs)
        created = cls(type_, resource_name, state.get("name") or resource_name, state, region)
        # Autonamed resources get the logical name (or prefix) plus a suffix, as the providers do.
        state.setdefault("name", f"{resource_name}-{created.suffix}")
        return created

    @property
    def suffix(self) -> str:
        return hashlib.sha1(self.resource_name.encode()).hexdigest()[:7]

    @property
    def service(self) -> str:
        """`iam` of aws:iam/role:Role."""
        return self.type.partition(":")[2].partition("/")[0]

    @property
    def kind(self) -> str:
        """`role` of aws:iam/role:Role."""
        return self.type.partition(":")[2].partition("/")[2].split(":")[0]


ResourceAnswer = Callable[[NewResource], dict[str, Any]]


def default_outputs(r: NewResource) -> dict[str, Any]:
    return {"arn": arn(r.service or "custom", f"{r.kind}/{r.name}", r.region)}


def _bucket(r: NewResource) -> dict[str, Any]:
    bucket = r.state.get("bucket") or f"{r.state.get('bucketPrefix', r.resource_name + '-')}{r.suffix}"
    return {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}


def _repository(r: NewResource) -> dict[str, Any]:
    return {
        "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{r.region}.amazonaws.com/{r.name}",
        "registryId": ACCOUNT_ID,
        "arn": arn("ecr", f"repository/{r.name}", r.region),
    }


def _oidc_provider(r: NewResource) -> dict[str, Any]:
    host = str(r.state.get("url", "")).removeprefix("https://")
    return {"arn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/{host}"}


# IAM kinds whose ARN carries the `path` argument (pulumi-aws: optional, default "/", ForceNew).
IAM_PATHED_KINDS = ("role", "policy", "user", "group", "instanceProfile")


def _iam(r: NewResource) -> dict[str, Any]:
    if r.kind not in IAM_PATHED_KINDS:
        return {"arn": arn("iam", f"{r.kind}/{r.name}", r.region, False), "name": r.name}
    path = r.state.get("path") or "/"
    kind = "instance-profile" if r.kind == "instanceProfile" else r.kind
    return {"arn": arn("iam", f"{kind}{path}{r.name}", r.region, False), "name": r.name, "path": path}


def _kms_key(r: NewResource) -> dict[str, Any]:
    return {"arn": arn("kms", f"key/{r.resource_name}", r.region), "keyId": r.resource_name}


def _log_group(r: NewResource) -> dict[str, Any]:
    return {"arn": arn("logs", f"log-group:{r.name}", r.region)}


def _codebuild_project(r: NewResource) -> dict[str, Any]:
    return {"arn": arn("codebuild", f"project/{r.name}", r.region), "name": r.name}


def _launch_template(_r: NewResource) -> dict[str, Any]:
    return {"latestVersion": 1, "defaultVersion": 1}


def file_system_id(resource_name: str) -> str:
    """FSx names a file system fs-<17 hex>, its DNS name after it, and a mount name of its own."""
    return f"fs-0{hashlib.sha1(resource_name.encode()).hexdigest()[:16]}"


def _file_system_id(r: NewResource) -> str:
    return file_system_id(r.resource_name)


def _lustre(r: NewResource) -> dict[str, Any]:
    file_system_id = _file_system_id(r)
    return {
        "dnsName": f"{file_system_id}.fsx.{r.region}.amazonaws.com",
        "mountName": hashlib.sha1(r.resource_name.encode()).hexdigest()[16:24],
        "arn": arn("fsx", f"file-system/{file_system_id}", r.region),
    }


def _dynamic(r: NewResource) -> dict[str, Any]:
    """trainstack's image build (a dynamic provider): the image it pushed, by digest."""
    if "image_tag" not in r.state:
        return default_outputs(r)
    repo = r.state["repository_url"]
    return {"image_uri": f"{repo}@{fake_digest(repo, r.state['image_tag'])}", "build_id": ""}


def _random_password(r: NewResource) -> dict[str, Any]:
    # Generated once at create and kept in the state: every later run reads the same value.
    return {"result": hashlib.sha256(r.resource_name.encode()).hexdigest()[: int(r.state.get("length", 32))]}


def _db_instance(r: NewResource) -> dict[str, Any]:
    identifier = r.state.get("identifier") or f"{r.resource_name}-{r.suffix}"
    address = (
        f"{identifier}.c{hashlib.sha1(identifier.encode()).hexdigest()[:11]}.{r.region}.rds.amazonaws.com"
    )
    return {"address": address, "endpoint": f"{address}:5432", "port": 5432, "identifier": identifier}


def _docker_image(r: NewResource) -> dict[str, Any]:
    return {"repoDigest": f"{r.state.get('imageName', '').split(':')[0]}@{fake_digest(r.resource_name)}"}


def _helm_release(r: NewResource) -> dict[str, Any]:
    """A first install's status, as pulumi-kubernetes's Release reports it from Helm's release
    (provider/pkg/provider/helm_release.go ReleaseStatus): revision 1, deployed."""
    return {
        "status": {
            "name": r.state.get("name"),
            "namespace": r.state.get("namespace"),
            "revision": 1,
            "status": "deployed",
            "chart": r.state.get("chart"),
            "version": r.state.get("version"),
        }
    }


RESOURCES: dict[str, ResourceAnswer] = {
    "aws:s3/bucket:Bucket": _bucket,
    "aws:ecr/repository:Repository": _repository,
    "aws:iam/openIdConnectProvider:OpenIdConnectProvider": _oidc_provider,
    "aws:kms/key:Key": _kms_key,
    "aws:cloudwatch/logGroup:LogGroup": _log_group,
    "aws:codebuild/project:Project": _codebuild_project,
    "aws:ec2/launchTemplate:LaunchTemplate": _launch_template,
    "aws:fsx/lustreFileSystem:LustreFileSystem": _lustre,
    "pulumi-python:dynamic:Resource": _dynamic,
    "random:index/randomPassword:RandomPassword": _random_password,
    "aws:rds/instance:Instance": _db_instance,
    "docker:index/image:Image": _docker_image,
    "kubernetes:helm.sh/v3:Release": _helm_release,
}
# Every type of these modules (`aws:iam/...`) not in RESOURCES.
MODULES: dict[str, ResourceAnswer] = {"aws:iam": _iam}
IDS: dict[str, Callable[[NewResource], str]] = {"aws:fsx/lustreFileSystem:LustreFileSystem": _file_system_id}


def answer_for(type_: str, resources: Mapping[str, ResourceAnswer] = RESOURCES) -> ResourceAnswer:
    """The answer for a type: its own in `resources`, else its module's, else an ARN named after it."""
    module, slash, _ = type_.partition("/")
    return resources.get(type_) or (MODULES.get(module) if slash else None) or default_outputs


def physical_id(r: NewResource) -> str:
    make = IDS.get(r.type)
    return make(r) if make else f"{r.resource_name}-id"


def instance_type_facts(name: str) -> dict[str, Any]:
    """What `aws.ec2.get_instance_type` returns for a catalog instance type. The instance store is
    as the provider sets it from DescribeInstanceTypes' InstanceStorageInfo (terraform-provider-aws
    `ec2_instance_type_data_source.go`): disks by count, size in GB and type, and their total; an
    EBS-only type has none."""
    it = INSTANCE_TYPES[name]
    return {
        "instanceStorageSupported": it.instance_store_disks > 0,
        "instanceDisks": (
            [{"count": it.instance_store_disks, "size": it.instance_store_disk_gb, "type": "ssd"}]
            if it.instance_store_disks
            else []
        ),
        "totalInstanceStorage": it.instance_store_gb,
        "id": name,
        "instanceType": name,
        "defaultVcpus": it.vcpus,
        "memorySize": it.memory_gib * 1024,
        "efaSupported": it.efa_supported,
        "maximumNetworkCards": it.network_cards,
        "efaMaximumInterfaces": it.max_efa_interfaces,
        "networkPerformance": it.network,
        # One entry per card, each with its share of the baseline (DescribeInstanceTypes'
        # NetworkInfo.NetworkCards, which the provider reads as network_cards); the burst is not used.
        "networkCards": [
            {"index": i, "baselineBandwidth": it.baseline_gbps / it.network_cards}
            for i in range(it.network_cards)
        ],
        "gpuses": (
            [
                {
                    "count": it.gpus,
                    "manufacturer": it.gpu_manufacturer,
                    "name": it.gpu_model,
                    "memorySize": it.gpu_memory_mib,
                }
            ]
            if it.gpus
            else []
        ),
    }


def invalid_instance_type(name: str) -> str:
    """pulumi-aws's error for DescribeInstanceTypes' InvalidInstanceType."""
    request = hashlib.sha1(name.encode()).hexdigest()
    request_id = f"{request[:8]}-{request[8:12]}-{request[12:16]}-{request[16:20]}-{request[20:32]}"
    return (
        "reading EC2 Instance Type: operation error EC2: DescribeInstanceTypes, https response error "
        f"StatusCode: 400, RequestID: {request_id}, api error InvalidInstanceType: The following supplied "
        f"instance types do not exist: [{name}]"
    )


class OfflineAws:
    """The AWS reads that are not the account's state: who calls, where, and what EC2 sells there."""

    def __init__(self, region: str, caller_arn: str, account: OfflineAccount):
        self.region = region
        self.caller_arn = caller_arn
        self.account = account

    def invokes(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """The provider invokes answered here, by token."""
        return {
            "aws:index/getCallerIdentity:getCallerIdentity": self.caller_identity,
            "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings": self.offerings,
            "aws:ec2/getSubnet:getSubnet": self.subnet,
            "aws:index/getPartition:getPartition": self.partition,
            "aws:index/getRegion:getRegion": self.region_facts,
            "aws:ec2/getInstanceType:getInstanceType": self.instance_type,
            "aws:ecr/getAuthorizationToken:getAuthorizationToken": self.registry_token,
            "aws:ssm/getParameter:getParameter": self.parameter,
        }

    def cluster_creator(self) -> str:
        """Who created an EKS cluster, and so holds its first access entry: the account's fact,
        else the caller."""
        return self.account.facts.get("cluster-creator", self.caller_arn)

    def caller_identity(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {
            "accountId": self.caller_arn.split(":")[4],
            "arn": self.caller_arn,
            "userId": "AIDAOFFLINE",
            "id": self.caller_arn.split(":")[4],
        }

    def offerings(self, args: dict[str, Any]) -> dict[str, Any]:
        """EC2 DescribeInstanceTypeOfferings by availability zone, filtered by instance type."""
        wanted = next((f["values"] for f in args.get("filters", []) if f["name"] == "instance-type"), None)
        rows = [
            (t, zone)
            for t in (wanted or INSTANCE_TYPES)
            if t in INSTANCE_TYPES
            for zone in self.account.offered_zones(t)
        ]
        return {
            "id": self.region,
            "instanceTypes": [t for t, _ in rows],
            "locations": [z for _, z in rows],
            "locationTypes": [args.get("locationType", "availability-zone")] * len(rows),
        }

    def subnet(self, args: dict[str, Any]) -> dict[str, Any]:
        return self.account.subnet(args["id"], self.region)

    def partition(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}

    def region_facts(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {"name": self.region, "region": self.region, "id": self.region}

    def instance_type(self, args: dict[str, Any]) -> dict[str, Any] | tuple[dict, list[tuple[str, str]]]:
        """EC2 DescribeInstanceTypes for one type. An `ml.` name (SageMaker's, never EC2's) fails the
        invoke as pulumi-aws words EC2's 400: the data source passes the API error on
        (terraform-provider-aws `ec2_instance_type_data_source.go`, `dataSourceInstanceTypeRead` ->
        `tfresource.SingularDataSourceFindError`). Any other type the catalog lacks may well be one
        EC2 sells: the answer says only that the offline catalog does not hold it."""
        name = args["instanceType"]
        if name in INSTANCE_TYPES:
            return instance_type_facts(name)
        if is_sagemaker_type(name):
            return {}, [("instanceType", invalid_instance_type(name))]
        return {}, [("instanceType", NOT_IN_OFFLINE_CATALOG)]

    def registry_token(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {
            "userName": "AWS",
            "password": "offline-registry-token",
            "authorizationToken": "QVdTOm9mZmxpbmU=",
            "proxyEndpoint": f"https://{ACCOUNT_ID}.dkr.ecr.{self.region}.amazonaws.com",
            "expiresAt": "2099-01-01T00:00:00Z",
            "id": self.region,
        }

    def parameter(self, args: dict[str, Any]) -> dict[str, Any]:
        """An SSM parameter such as the EKS-optimized AMI's: a stable made-up AMI id."""
        return {
            "name": args["name"],
            "value": "ami-0" + hashlib.sha1(args["name"].encode()).hexdigest()[:16],
            "type": "String",
        }
