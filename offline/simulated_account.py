"""The AWS account the offline plan deploys into: what its reads answer, as AWS would.

AZ names and their IDs (shuffled per account, one of them an ID EKS refuses for cluster subnets),
instance type offerings per AZ, EC2 vCPU quotas, capacity reservations and CodeBuild source
credentials. The default account passes every check a shipped stack makes; facts change its
answers, so a test or a user can see each failure:

    quota:L-DB2E81BA: 0                        # vCPUs of an EC2 quota (default 1024)
    offering:m6i.large: us-east-1a,us-east-1b  # AZs that offer a type
    reservation:cr-0123456789abcdef0: {instanceType: p5.48xlarge, availabilityZone: us-east-1d,
        type: capacity-block, state: active, total: 2, available: 2, endDate: 2026-12-31T00:00:00Z}
    source-credential:github: absent           # or present (the default)
    account-stacks: [prod]                     # other stacks whose roles the account holds (IAM
                                               # paths /trainstack/<stack>/; default: none)
    account-roles: [{name: r, path: /trainstack/dev/, principal: {AWS: "arn:aws:iam::999999999999:root"}}]
                                               # roles besides, each trusting `principal`
    parameter:/trainstack/dev/eks-cluster-creator: arn:aws:iam::123456789012:user/alice  # SSM
    cluster-creator: arn:aws:iam::123456789012:user/alice  # EKS made it admin (default: the caller)
    eks-cluster:trainstack-dev: {version: "1.36", zones: [us-east-1a, us-east-1b],
        nodeGroups: {trainstack-dev-gpu: us-east-1a}}  # a running cluster: its subnets' AZs,
                                                       # its node groups' AZs
    log-group:/aws/eks/trainstack-dev/cluster: {}  # a log group that exists, and its tags
    instance-topology:p5: [[nn-a, nn-b, nn-c], [nn-a, nn-b, nn-d]]  # DescribeInstanceTopology's
        # NetworkNodes of the group's instances at its largest size, top layer first
    hyperpod-cluster:ml-cluster: {eksCluster: sagemaker-test-cluster,
        instanceGroups: {workers: ml.g5.8xlarge},  # SageMaker's DescribeCluster (status: InService,
        deepHealthChecks: {workers: [InstanceStress, InstanceConnectivity]}}  # or another
        # ClusterStatus; eksCluster: null is Slurm; deepHealthChecks: OnStartDeepHealthChecks per group

Reservations, source credentials and the IAM roles under /trainstack/ are read with boto3 (Pulumi
has no data source for them):
`botocore_answers` answers those calls inside the program, before any request is signed or sent.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import re
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from botocore import handlers

from domain.catalog import INSTANCE_TYPES

DEFAULT_QUOTA_VCPUS = 1024
LETTERS = "abcdef"
# us-east-1 as one account sees it: names map to shuffled IDs; use1-az3 (EKS refuses it, and it
# lacks current instance families) is us-east-1e here.
ZONE_IDS = {"us-east-1": ("use1-az6", "use1-az1", "use1-az2", "use1-az4", "use1-az3", "use1-az5")}
# Large GPU types are offered in a few AZs of a region only, as in every real region.
SCARCE_TYPE_ZONES = "cdf"
# What an AZ without current Nitro families offers from the catalog.
OLD_ZONE_TYPES = ("m5.large", "g5.xlarge")
LIMITED_ZONE_IDS = ("use1-az3", "usw1-az2", "cac1-az3")
_DIRECTIONS = {"northeast": "ne", "southeast": "se", "northwest": "nw", "southwest": "sw"}
FACT_KINDS = (
    "quota:L-...",
    "offering:<instance type>",
    "reservation:cr-...",
    "source-credential:github",
    "account-stacks",
    "account-roles",
    "parameter:/<name>",
    "cluster-creator",
    "eks-cluster:<name>",
    "log-group:/<name>",
    "cluster-objects:<cluster>",
    "instance-topology:<node group>",
    "hyperpod-cluster:<name>",
)


class FactError(ValueError):
    """A fact the offline account cannot take; the message is one line."""


def zone_id_prefix(region: str) -> str:
    """us-east-1 -> use1, ap-southeast-2 -> apse2, as AWS names AZ IDs."""
    area, *middle, number = region.split("-")
    return area + "".join(_DIRECTIONS.get(w, w[0]) for w in middle) + number


@dataclass(frozen=True)
class _Response:
    status_code: int


def parse_facts(items: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` facts (the value is YAML) into a map, checked."""
    facts = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise FactError(f"account fact {item!r}: expected KEY=VALUE, such as quota:L-DB2E81BA=0")
        try:
            facts[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise FactError(
                f"account fact {key}: the value is not YAML ({str(err).splitlines()[0]})"
            ) from None
    return check_facts(facts)


def read_facts_file(path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise FactError(f"account facts {path}: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise FactError(f"account facts {path}: expected a map of facts such as quota:L-DB2E81BA: 0")
    return check_facts(data)


def check_facts(facts: dict[str, Any]) -> dict[str, Any]:
    for key, value in facts.items():
        kind, _, what = str(key).partition(":")
        if kind == "quota" and re.fullmatch(r"L-[0-9A-F]{8}", what):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise FactError(f"account fact {key} = {value!r}: a quota is a number of vCPUs (0 or more)")
        elif kind == "offering" and what in INSTANCE_TYPES:
            if not isinstance(value, str):
                raise FactError(f"account fact {key} = {value!r}: AZ names separated by commas")
        elif kind == "reservation" and re.fullmatch(r"cr-[0-9a-f]{17}", what):
            if not isinstance(value, dict) or not {"instanceType", "availabilityZone", "total"} <= set(value):
                raise FactError(
                    f"account fact {key}: a map with instanceType, availabilityZone, total "
                    "(and type, state, available, endDate)"
                )
        elif key == "source-credential:github":
            if value not in ("present", "absent"):
                raise FactError(f"account fact {key} = {value!r}: present or absent")
        elif key == "account-stacks":
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise FactError(f"account fact {key} = {value!r}: a list of stack names")
        elif key == "account-roles":
            if not isinstance(value, list) or not all(
                isinstance(v, dict) and {"name", "path", "principal"} <= set(v) for v in value
            ):
                raise FactError(f"account fact {key} = {value!r}: a list of maps with name, path, principal")
        elif kind == "hyperpod-cluster":
            if not isinstance(value, dict) or not {"eksCluster", "instanceGroups"} <= set(value):
                raise FactError(
                    f"account fact {key} = {value!r}: a map with eksCluster, instanceGroups (and status)"
                )
        elif kind == "eks-cluster":
            if not isinstance(value, dict) or not {"version", "zones"} <= set(value):
                raise FactError(f"account fact {key} = {value!r}: a map with version, zones (and nodeGroups)")
        elif (kind == "parameter" and what.startswith("/")) or key == "cluster-creator":
            if not isinstance(value, str):
                raise FactError(f"account fact {key} = {value!r}: a string")
        elif kind == "cluster-objects":
            if not isinstance(value, list) or not all(isinstance(o, dict) and "kind" in o for o in value):
                raise FactError(f"cluster fact {key}: a list of Kubernetes objects (each with a kind)")
        elif kind == "instance-topology" and what:
            if not isinstance(value, list) or not all(
                isinstance(n, list) and n and all(isinstance(i, str) for i in n) for n in value
            ):
                raise FactError(
                    f"account fact {key}: a list of network node sets, one per instance, each a list of "
                    "network node IDs, top layer first (DescribeInstanceTopology's NetworkNodes)"
                )
        elif kind == "log-group" and what.startswith("/"):
            if not isinstance(value, dict):
                raise FactError(f"account fact {key} = {value!r}: a map of its tags ({{}} for none)")
        else:
            raise FactError(f"unknown account fact {key!r}; known: {', '.join(FACT_KINDS)}")
    return facts


_PARAMS = "offline_account_params"


def _keep_params(params: dict[str, Any], context: dict[str, Any], **_) -> None:
    context[_PARAMS] = dict(params)


class OfflineAccount:
    def __init__(self, region: str, facts: dict[str, Any] | None = None):
        self.region = region
        self.facts = check_facts(dict(facts or {}))
        prefix = zone_id_prefix(region)
        ids = ZONE_IDS.get(region, tuple(f"{prefix}-az{i + 1}" for i in range(len(LETTERS))))
        self.zones = [(f"{region}{c}", zone_id) for c, zone_id in zip(LETTERS, ids, strict=True)]
        self.subnets: dict[str, str] = {}  # subnet id -> AZ, of what a running cluster holds

    def instance_topology(self, group: str, count: int, layers: int) -> list[list[str]]:
        """DescribeInstanceTopology's NetworkNodes for a group's `count` instances. Before they run
        nothing says where EC2 puts them: unless a fact says otherwise, they share every network
        node but the bottom layer's, each under its own there (as near as no two are promised)."""
        given = self.facts.get(f"instance-topology:{group}")
        if given is not None:
            return [list(nodes) for nodes in given]
        shared = [f"nn-{group}-{layer}" for layer in range(1, layers)]
        return [[*shared, f"nn-{group}-{layers}-{i}"] for i in range(count)]

    def zone_id(self, name: str) -> str:
        return dict(self.zones)[name]

    def availability_zones(self, args: dict[str, Any]) -> dict[str, Any]:
        """aws.get_availability_zones, honouring exclude_names and exclude_zone_ids."""
        skip_names, skip_ids = set(args.get("excludeNames") or ()), set(args.get("excludeZoneIds") or ())
        kept = [(n, i) for n, i in self.zones if n not in skip_names and i not in skip_ids]
        return {"names": [n for n, _ in kept], "zoneIds": [i for _, i in kept], "id": self.region}

    def offered_zones(self, instance_type: str) -> list[str]:
        fact = self.facts.get(f"offering:{instance_type}")
        if fact is not None:
            return [z.strip() for z in fact.split(",") if z.strip()]
        letters = SCARCE_TYPE_ZONES if instance_type.startswith(("p4", "p5", "p6")) else LETTERS
        return [
            name
            for name, zone_id in self.zones
            if name[-1] in letters and (zone_id not in LIMITED_ZONE_IDS or instance_type in OLD_ZONE_TYPES)
        ]

    def parameters_by_path(self, args: dict[str, Any]) -> dict[str, Any]:
        """SSM GetParametersByPath (not recursive): the parameters directly under the path."""
        path = args["path"].rstrip("/") + "/"
        found = {
            key.partition(":")[2]: value
            for key, value in self.facts.items()
            if key.startswith("parameter:") and key.partition(":")[2].rpartition("/")[0] + "/" == path
        }
        return {
            "id": args["path"],
            "path": args["path"],
            "names": list(found),
            "values": list(found.values()),
            "types": ["String"] * len(found),
            "arns": [f"arn:aws:ssm:{self.region}:123456789012:parameter{n}" for n in found],
            "withDecryption": True,
        }

    def invokes(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """The provider invokes this account answers, by token."""
        return {
            "aws:index/getAvailabilityZones:getAvailabilityZones": self.availability_zones,
            "aws:cloudwatch/getLogGroups:getLogGroups": self.log_groups,
            "aws:cloudwatch/getLogGroup:getLogGroup": self.log_group,
            "aws:eks/getClusters:getClusters": self.clusters,
            "aws:eks/getCluster:getCluster": self.cluster,
            "aws:eks/getNodeGroups:getNodeGroups": self.node_groups,
            "aws:eks/getNodeGroup:getNodeGroup": self.node_group,
            "aws:eks/getAddon:getAddon": self.addon,
            "aws:ssm/getParametersByPath:getParametersByPath": self.parameters_by_path,
            "aws:servicequotas/getServiceQuota:getServiceQuota": self.service_quota,
        }

    def clusters(self, _args: dict[str, Any]) -> dict[str, Any]:
        names = [key.partition(":")[2] for key in self.facts if key.startswith("eks-cluster:")]
        return {"id": self.region, "names": names}

    def _cluster_fact(self, name: str) -> dict[str, Any]:
        fact = self.facts.get(f"eks-cluster:{name}")
        if fact is None:
            raise LookupError(f"ResourceNotFoundException: No cluster found for name: {name}.")
        return fact

    def cluster_subnet(self, zone: str) -> str:
        """The id of the running cluster's private subnet in `zone` (one per AZ, as trainstack makes)."""
        subnet_id = f"subnet-0c{[n for n, _ in self.zones].index(zone):015x}"
        self.subnets[subnet_id] = zone
        return subnet_id

    def cluster(self, args: dict[str, Any]) -> dict[str, Any]:
        fact = self._cluster_fact(args["name"])
        subnets = [self.cluster_subnet(z) for z in fact.get("zones", [])]
        return {
            "id": args["name"],
            "name": args["name"],
            "version": str(fact["version"]),
            "status": "ACTIVE",
            "endpoint": f"https://{hashlib.sha1(args['name'].encode()).hexdigest()[:32].upper()}.gr7.{self.region}.eks.amazonaws.com",
            "certificateAuthorities": [{"data": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}],
            "vpcConfig": {"subnetIds": subnets, "vpcId": "vpc-0c0000000000000000"},
        }

    def addon(self, args: dict[str, Any]) -> dict[str, Any]:
        """An add-on of a running cluster: the fact's `addons` (default: the pod identity agent)."""
        fact = self._cluster_fact(args["clusterName"])
        if args["addonName"] not in fact.get("addons", ["eks-pod-identity-agent"]):
            raise LookupError(
                f"ResourceNotFoundException: No addon: {args['addonName']} found in cluster: {args['clusterName']}"
            )
        return {
            "id": f"{args['clusterName']}:{args['addonName']}",
            "clusterName": args["clusterName"],
            "addonName": args["addonName"],
            "addonVersion": "v1.3.10-eksbuild.3",
        }

    def node_groups(self, args: dict[str, Any]) -> dict[str, Any]:
        fact = self._cluster_fact(args["clusterName"])
        return {
            "id": args["clusterName"],
            "clusterName": args["clusterName"],
            "names": list(fact.get("nodeGroups", {})),
        }

    def node_group(self, args: dict[str, Any]) -> dict[str, Any]:
        """A node group of the running cluster: its fact is its AZ, or `AZ:desired size` (default 0,
        where an autoscaled group sits idle)."""
        fact = self._cluster_fact(args["clusterName"]).get("nodeGroups", {})[args["nodeGroupName"]]
        zone, _, desired = fact.partition(":")
        return {
            "id": f"{args['clusterName']}:{args['nodeGroupName']}",
            "clusterName": args["clusterName"],
            "nodeGroupName": args["nodeGroupName"],
            "subnetIds": [self.cluster_subnet(zone)],
            "scalingConfigs": [{"desiredSize": int(desired or 0), "minSize": 0, "maxSize": 64}],
            "status": "ACTIVE",
        }

    def subnet(self, subnet_id: str, region: str) -> dict[str, Any]:
        """A subnet of the running cluster, or (existing subnets in config) one by its last digit:
        even in AZ a, odd in AZ b."""
        zone = self.subnets.get(subnet_id) or f"{region}{'ab'[int(subnet_id[-1], 16) % 2]}"
        index = [n for n, _ in self.zones].index(zone)
        return {
            "id": subnet_id,
            "availabilityZone": zone,
            "availabilityZoneId": self.zone_id(zone),
            "cidrBlock": f"10.{index}.0.0/19",
            "vpcId": "vpc-existing",
        }

    def log_groups(self, args: dict[str, Any]) -> dict[str, Any]:
        prefix = args.get("logGroupNamePrefix", "")
        names = [k.partition(":")[2] for k in self.facts if k.startswith("log-group:")]
        found = [n for n in names if n.startswith(prefix)]
        return {
            "id": prefix,
            "logGroupNames": found,
            "arns": [f"arn:aws:logs:{self.region}:123456789012:log-group:{n}" for n in found],
        }

    def log_group(self, args: dict[str, Any]) -> dict[str, Any]:
        tags = self.facts.get(f"log-group:{args['name']}")
        if tags is None:
            raise LookupError(
                f"ResourceNotFoundException: The specified log group does not exist: {args['name']}"
            )
        return {"id": args["name"], "name": args["name"], "tags": tags, "retentionInDays": 0}

    def service_quota(self, args: dict[str, Any]) -> dict[str, Any]:
        code = args["quotaCode"]
        value = self.facts.get(f"quota:{code}", DEFAULT_QUOTA_VCPUS)
        return {
            "id": f"{args['serviceCode']}/{code}",
            "serviceCode": args["serviceCode"],
            "quotaCode": code,
            "value": float(value),
            "defaultValue": 0.0,
            "adjustable": True,
            "globalQuota": False,
        }

    def _describe_capacity_reservations(self, context: dict[str, Any], **_) -> tuple[_Response, dict]:
        found = []
        for cr in context[_PARAMS].get("CapacityReservationIds", []):
            fact = self.facts.get(f"reservation:{cr}")
            if fact is None:
                code = (
                    "InvalidCapacityReservationId.NotFound"
                    if cr.startswith("cr-")
                    else "InvalidCapacityReservationId.Malformed"
                )
                return _Response(400), {
                    "Error": {"Code": code, "Message": f"The capacity reservation ID '{cr}' does not exist"}
                }
            end = fact.get("endDate")
            if isinstance(end, str):
                end = datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
            elif isinstance(end, datetime.date) and not isinstance(end, datetime.datetime):
                end = datetime.datetime.combine(end, datetime.time(), datetime.UTC)
            row = {
                "CapacityReservationId": cr,
                "InstanceType": fact["instanceType"],
                "AvailabilityZone": fact["availabilityZone"],
                "AvailabilityZoneId": dict(self.zones).get(fact["availabilityZone"]),
                "ReservationType": fact.get("type", "default"),
                "State": fact.get("state", "active"),
                "TotalInstanceCount": fact["total"],
                "AvailableInstanceCount": fact.get("available", fact["total"]),
            }
            if end is not None:
                row["EndDate"] = end if end.tzinfo else end.replace(tzinfo=datetime.UTC)
            found.append(row)
        return _Response(200), {"CapacityReservations": found}

    def _describe_hyperpod_cluster(self, context: dict[str, Any], **_) -> tuple[_Response, dict]:
        """SageMaker's DescribeCluster of a HyperPod cluster, as the API shapes it."""
        name = context[_PARAMS]["ClusterName"]
        fact = self.facts.get(f"hyperpod-cluster:{name}")
        if fact is None:
            return _Response(400), {
                "Error": {"Code": "ResourceNotFound", "Message": f"Cluster with name {name} not found"}
            }
        arn = f"arn:aws:sagemaker:{self.region}:123456789012:cluster/{name}"
        answer: dict[str, Any] = {
            "ClusterArn": arn,
            "ClusterName": name,
            "ClusterStatus": fact.get("status", "InService"),
            # A list of types is a flexible group's (InstanceRequirements, no InstanceType).
            "InstanceGroups": [
                {"InstanceGroupName": group, "CurrentCount": 1, "TargetCount": 1}
                | (
                    {"InstanceRequirements": {"CurrentInstanceTypes": list(types)}}
                    if isinstance(types, list)
                    else {"InstanceType": types}
                )
                | (
                    {"OnStartDeepHealthChecks": list(deep[group])}
                    if (deep := fact.get("deepHealthChecks") or {}).get(group)
                    else {}
                )
                for group, types in fact["instanceGroups"].items()
            ],
        }
        if fact["eksCluster"]:
            eks = f"arn:aws:eks:{self.region}:123456789012:cluster/{fact['eksCluster']}"
            answer["Orchestrator"] = {"Eks": {"ClusterArn": eks}}
        return _Response(200), answer

    def _list_source_credentials(self, **_) -> tuple[_Response, dict]:
        present = self.facts.get("source-credential:github", "present") == "present"
        arn = f"arn:aws:codebuild:{self.region}:123456789012:token/github"
        infos = [{"arn": arn, "serverType": "GITHUB", "authType": "PERSONAL_ACCESS_TOKEN"}] if present else []
        return _Response(200), {"sourceCredentialsInfos": infos}

    def _list_roles(self, context: dict, **_) -> tuple[_Response, dict]:
        """The roles under the PathPrefix asked: a GitHub deploy role per stack of `account-stacks`,
        and the `account-roles`, each trusting its principal."""
        github = {"Federated": "arn:aws:iam::123456789012:oidc-provider/token.actions.githubusercontent.com"}
        wanted = [
            (f"trainstack-{stack}-github-deploy", f"/trainstack/{stack}/", github)
            for stack in self.facts.get("account-stacks", [])
        ] + [(r["name"], r["path"], r["principal"]) for r in self.facts.get("account-roles", [])]
        prefix = context[_PARAMS].get("PathPrefix", "/")
        roles = [
            {
                "Path": path,
                "RoleName": name,
                "RoleId": f"AROA{hashlib.sha256(name.encode()).hexdigest()[:17].upper()}",
                "Arn": f"arn:aws:iam::123456789012:role{path}{name}",
                "CreateDate": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
                # As IAM sends it: URL-encoded JSON, which botocore's after-call handler decodes.
                "AssumeRolePolicyDocument": urllib.parse.quote(
                    json.dumps(
                        {
                            "Version": "2012-10-17",
                            "Statement": [
                                {"Effect": "Allow", "Principal": principal, "Action": "sts:AssumeRole"}
                            ],
                        }
                    )
                ),
            }
            for name, path, principal in wanted
            if path.startswith(prefix)
        ]
        return _Response(200), {"Roles": roles, "IsTruncated": False}

    @contextlib.contextmanager
    def botocore_answers(self) -> Iterator[None]:
        """Answer the boto3 reads of sessions made inside the block, as botocore's `before-call`
        handlers do (moto works the same way): no credentials, no network."""
        added = [
            # before-call sees the serialized request; the call's own parameters come from here.
            ("before-parameter-build", _keep_params),
            ("before-call.ec2.DescribeCapacityReservations", self._describe_capacity_reservations),
            ("before-call.codebuild.ListSourceCredentials", self._list_source_credentials),
            ("before-call.iam.ListRoles", self._list_roles),
            ("before-call.sagemaker.DescribeCluster", self._describe_hyperpod_cluster),
        ]
        handlers.BUILTIN_HANDLERS.extend(added)
        try:
            yield
        finally:
            for entry in added:
                handlers.BUILTIN_HANDLERS.remove(entry)
