"""Run the unchanged Pulumi program under Pulumi's mock engine and record what it registers.

`OfflineMocks` answers resource registrations and the provider invokes the program makes
(caller identity, partition, region, instance types, subnets, SSM parameters) from fixed values
and the instance catalog, and what the account holds (AZs and their IDs, offerings, quotas,
reservations) from an `OfflineAccount`. Where a real provider does
more than echo its inputs, it does the same: `eks.Cluster` creates pulumi-eks's children (the EKS
cluster, referenced by `eksCluster`, security groups unless skipped, add-ons unless disabled,
access entries) and refuses a second access entry for the cluster creator, as EKS does.
`RecordingMonitor` is Pulumi's own `MockMonitor` that also keeps each registration's parent,
dependencies and raw inputs (so secrets can be masked), remote components' children included.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import runpy
import sys
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime.proto import provider_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from domain.principals import role_of_principal, same_principal
from offline.account import OfflineAccount
from domain.catalog import INSTANCE_TYPES
from config import PROJECT, PROJECT_ROOT

ACCOUNT_ID = "123456789012"
OFFLINE_CALLER_ARN = f"arn:aws:iam::{ACCOUNT_ID}:user/offline"
# The security group EKS itself creates for a cluster (vpcConfig.clusterSecurityGroupId), and the
# one pulumi-eks adds unless skipDefaultSecurityGroups is set: two different groups.
EKS_CLUSTER_SECURITY_GROUP = "sg-0e4c5a1b2c3d4e5f6"
PULUMI_EKS_CLUSTER_SECURITY_GROUP = "sg-0c1a2b3c4d5e6f708"
SECRET_MASK = "[secret]"
UNKNOWN_MASK = "[unknown]"


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    parent: str | None
    custom: bool
    inputs: dict[str, Any]
    dependencies: list[str]
    # Which resources each input property uses outputs of: Pulumi's delete-before-replace takes a
    # dependent down first only through these (step_generator.go, calculateDependentReplacements).
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    # Resource transforms the program attached (a real engine runs them on the provider's children).
    transforms: list[Callable[..., Any]] = field(default_factory=list)
    # Resource options the engine acts on: protect, replaceOnChanges, deleteBeforeReplace, timeouts.
    options: dict[str, Any] = field(default_factory=dict)
    # The inputs with secrets shown, for tests only: never written to the plan.
    revealed: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "inputs": self.inputs,
            "dependencies": self.dependencies,
            "propertyDependencies": self.property_dependencies,
            "transforms": [f"{t.__module__}.{t.__qualname__}" for t in self.transforms],
            "options": self.options,
        }


@dataclass
class PlanRun:
    stack: str
    resources: list[Registration]
    outputs: dict[str, Any] = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)  # what the program logged (pulumi.log)

    def by_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.by_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]

    def taken_down_first(self, replaced: str) -> list[str]:
        """When `replaced` is replaced delete-first, the resources Pulumi deletes before it: those
        with an input property using its outputs, and theirs in turn (a replace_on_changes
        property that becomes unknown is a replacement). A `depends_on` edge alone takes nothing
        down: such a dependent keeps running while the replacement is created."""
        down, todo = [], [replaced]
        while todo:
            urn = todo.pop()
            for r in self.resources:
                if r.urn not in down and any(urn in urns for urns in r.property_dependencies.values()):
                    down.append(r.urn)
                    todo.append(r.urn)
        return down


def _clean(value: Any, reveal: bool = False) -> Any:
    """Turn the wire form of inputs into plain JSON, masking secrets (unless `reveal`) and unknowns."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return _clean(value.get("value"), reveal) if reveal else SECRET_MASK
        if sig == rpc._special_resource_sig:
            return value.get("urn")
        if sig == rpc._special_output_value_sig:
            return SECRET_MASK if value.get("secret") and not reveal else _clean(value.get("value"), reveal)
        if sig in (rpc._special_asset_sig, rpc._special_archive_sig):
            kept = {k: v for k, v in value.items() if k != rpc._special_sig_key}
            return {"asset" if sig == rpc._special_asset_sig else "archive": _clean(kept, reveal)}
        if "__provider" in value:  # a dynamic provider travels pickled: not worth showing
            value = {**value, "__provider": "[serialized dynamic provider]"}
        return {k: _clean(v, reveal) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, reveal) for v in value]
    if value == rpc.UNKNOWN:
        return UNKNOWN_MASK
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _referenced_urns(value: Any) -> set[str]:
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return {value["urn"]}
        return set().union(*(_referenced_urns(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_referenced_urns(v) for v in value))
    return set()


def _refs_to_urns(value: Any) -> Any:
    """Resource references become their URN: deserializing them inside the monitor would try to
    rehydrate the resource on the monitor's own event loop."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return value.get("urn")
        return {k: _refs_to_urns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_refs_to_urns(v) for v in value]
    return value


def _options(request) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if request.protect:
        options["protect"] = True
    if request.retainOnDelete:
        options["retainOnDelete"] = True
    if request.replaceOnChanges:
        options["replaceOnChanges"] = list(request.replaceOnChanges)
    if request.deleteBeforeReplace:
        options["deleteBeforeReplace"] = True
    timeouts = {k: v for k, v in json_format.MessageToDict(request.customTimeouts).items() if v}
    if timeouts:
        options["customTimeouts"] = timeouts
    return options


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, offline_mocks: OfflineMocks):
        super().__init__(offline_mocks)
        self.offline = offline_mocks
        self.registrations: list[Registration] = []

    def RegisterResource(self, request):
        raw = json_format.MessageToDict(request.object)
        request.object.CopyFrom(json_format.ParseDict(_refs_to_urns(raw), struct_pb2.Struct()))
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            # What the resource waits for: depends_on, Output inputs, resources passed by
            # reference, and an explicit provider (default providers are not in the program).
            deps = set(request.dependencies) | _referenced_urns(raw)
            for prop in request.propertyDependencies.values():
                deps.update(prop.urns)
            if request.provider and "::default_" not in request.provider:
                deps.add(request.provider.rsplit("::", 1)[0])
            self.registrations.append(
                Registration(
                    urn=response.urn,
                    type=request.type,
                    name=request.name,
                    # The stack itself is not a registered resource: its children have no parent here.
                    parent=None
                    if request.parent.split("::")[2:3] == ["pulumi:pulumi:Stack"]
                    else request.parent or None,
                    custom=bool(request.custom),
                    inputs=_clean(raw),
                    dependencies=sorted(deps),
                    property_dependencies={
                        key: sorted(prop.urns)
                        for key, prop in request.propertyDependencies.items()
                        if prop.urns
                    },
                    transforms=mocks._resolve_callbacks(request.transforms),
                    options=_options(request),
                    revealed=_clean(raw, reveal=True),
                )
            )
            self._record_remote_children(request.type, request.name, response.urn)
        return response

    def Call(self, request):
        """A method call on a remote component (pulumi-eks's Cluster.getKubeconfig): Pulumi's
        MockMonitor answers invokes only. `__self__` arrives as the component's URN."""
        args = _clean(_refs_to_urns(json_format.MessageToDict(request.args)), reveal=True)
        returned = self.mocks.call(
            mocks.MockCallArgs(token=request.tok, args=args, provider=request.provider)
        )
        proto = _sync_await(rpc.serialize_properties(returned, {}))
        return provider_pb2.CallResponse(**{"return": proto})

    def _record_remote_children(self, type_: str, name: str, parent_urn: str) -> None:
        """Children a remote component (pulumi-eks) creates inside its provider: registered so that
        resource references to them resolve, and recorded so the plan shows them."""
        for child in self.offline.take_children(type_, name):
            urn = self.make_urn(parent_urn, child.type, child.name)
            self.resources[urn] = mocks.MockMonitor.ResourceRegistration(urn, child.id, child.state)
            self.registrations.append(
                Registration(
                    urn=urn,
                    type=child.type,
                    name=child.name,
                    parent=parent_urn,
                    custom=True,
                    inputs=_clean(child.state),
                    dependencies=[self.make_urn(parent_urn, *dep) for dep in child.depends_on],
                )
            )


@dataclass
class RemoteChild:
    """A resource a remote component creates in its own provider, as the real provider would."""

    type: str
    name: str
    id: str
    state: dict[str, Any]
    depends_on: list[tuple[str, str]] = field(default_factory=list)  # (type, name) of siblings


class ProviderRefusal(Exception):
    """What a real provider answers for a request AWS refuses (the offline engine raises it too)."""


def resource_ref(urn: str, id_: str) -> dict[str, str]:
    """A resource reference in the wire format, as a provider returns one in its outputs."""
    return {rpc._special_sig_key: rpc._special_resource_sig, "urn": urn, "id": id_, "packageVersion": ""}


def _arn(service: str, resource: str, region: str, regional: bool = True) -> str:
    return f"arn:aws:{service}:{region if regional else ''}:{ACCOUNT_ID}:{resource}"


def fake_digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("/".join(parts).encode()).hexdigest()


class OfflineMocks(mocks.Mocks):
    """Answers registrations and invokes the way AWS and the providers would, offline."""

    def __init__(
        self, region: str, caller_arn: str = OFFLINE_CALLER_ARN, account: OfflineAccount | None = None
    ):
        self.region = region
        self.caller_arn = caller_arn
        self.account = account or OfflineAccount(region)
        self.account_invokes = self.account.invokes()
        # Registrations run on several threads: children are kept per (type, name) of their parent.
        self._children: dict[tuple[str, str], list[RemoteChild]] = {}
        self._kubeconfig_parts: dict[str, tuple[str, str]] = {}

    def take_children(self, type_: str, name: str) -> list[RemoteChild]:
        return self._children.pop((type_, name), [])

    def new_resource(self, args: mocks.MockResourceArgs):
        if not args.custom and args.typ.startswith(f"{PROJECT}:"):
            return None, {}
        state = dict(args.inputs)
        name = state.get("name") or args.name
        service, _, kind = args.typ.partition(":")[2].partition("/")
        computed: dict[str, Any] = {
            "arn": _arn(service or "custom", f"{kind.split(':')[0]}/{name}", self.region),
        }
        # Autonamed resources get the logical name (or prefix) plus a suffix, as the providers do.
        suffix = hashlib.sha1(args.name.encode()).hexdigest()[:7]
        state.setdefault("name", f"{args.name}-{suffix}")
        t = args.typ
        if t == "aws:s3/bucket:Bucket":
            bucket = state.get("bucket") or f"{state.get('bucketPrefix', args.name + '-')}{suffix}"
            computed = {"bucket": bucket, "arn": f"arn:aws:s3:::{bucket}"}
        elif t == "aws:ecr/repository:Repository":
            computed = {
                "repositoryUrl": f"{ACCOUNT_ID}.dkr.ecr.{self.region}.amazonaws.com/{name}",
                "registryId": ACCOUNT_ID,
                "arn": _arn("ecr", f"repository/{name}", self.region),
            }
        elif t == "aws:iam/openIdConnectProvider:OpenIdConnectProvider":
            host = str(state.get("url", "")).removeprefix("https://")
            computed = {"arn": f"arn:aws:iam::{ACCOUNT_ID}:oidc-provider/{host}"}
        elif t.startswith("aws:iam/"):
            computed = {"arn": _arn("iam", f"{kind.split(':')[0]}/{name}", self.region, False), "name": name}
        elif t == "aws:kms/key:Key":
            computed = {"arn": _arn("kms", f"key/{args.name}", self.region), "keyId": args.name}
        elif t == "aws:cloudwatch/logGroup:LogGroup":
            computed = {"arn": _arn("logs", f"log-group:{name}", self.region)}
        elif t == "aws:codebuild/project:Project":
            computed = {"arn": _arn("codebuild", f"project/{name}", self.region), "name": name}
        elif t == "aws:ec2/launchTemplate:LaunchTemplate":
            computed = {"latestVersion": 1, "defaultVersion": 1}
        elif t == "eks:index:Cluster":
            computed = self._cluster_outputs(args.name, state)
        elif t == "eks:index:ManagedNodeGroup":
            computed = {"nodeGroup": self._node_group_child(args.name, state)}
        elif t == "aws:fsx/lustreFileSystem:LustreFileSystem":
            # FSx names a file system fs-<17 hex>, its DNS name after it, and a mount name of its own.
            digest = hashlib.sha1(args.name.encode()).hexdigest()
            file_system_id = f"fs-0{digest[:16]}"
            computed = {
                "dnsName": f"{file_system_id}.fsx.{self.region}.amazonaws.com",
                "mountName": digest[16:24],
                "arn": _arn("fsx", f"file-system/{file_system_id}", self.region),
            }
            state.update(computed)
            return file_system_id, state
        elif t == "pulumi-python:dynamic:Resource" and "image_tag" in state:
            repo = state["repository_url"]
            computed = {"image_uri": f"{repo}@{fake_digest(repo, state['image_tag'])}", "build_id": ""}
        elif t == "random:index/randomPassword:RandomPassword":
            # Generated once at create and kept in the state: every later run reads the same value.
            computed = {
                "result": hashlib.sha256(args.name.encode()).hexdigest()[: int(state.get("length", 32))]
            }
        elif t == "aws:rds/instance:Instance":
            identifier = state.get("identifier") or f"{args.name}-{suffix}"
            address = f"{identifier}.c{hashlib.sha1(identifier.encode()).hexdigest()[:11]}.{self.region}.rds.amazonaws.com"
            computed = {
                "address": address,
                "endpoint": f"{address}:5432",
                "port": 5432,
                "identifier": identifier,
            }
        elif t == "docker:index/image:Image":
            computed = {"repoDigest": f"{state.get('imageName', '').split(':')[0]}@{fake_digest(args.name)}"}
        state.update(computed)
        return f"{args.name}-id", state

    def _cluster_outputs(self, resource_name: str, state: dict[str, Any]) -> dict[str, Any]:
        name = state.get("name", "cluster")
        eks_cluster = self._eks_cluster_children(resource_name, name, state)
        endpoint = f"https://{hashlib.sha1(name.encode()).hexdigest()[:32].upper()}.gr7.{self.region}.eks.amazonaws.com"
        # The `kubeconfig` output never names a profile (kubeconfigWithoutProfile in pulumi-eks).
        kubeconfig = eks_kubeconfig(name, endpoint, self.region)
        self._kubeconfig_parts[resource_name] = (name, endpoint)
        # pulumi-eks (nodejs/eks/cluster/cluster.ts): clusterSecurityGroupId is its own group when
        # it creates one, else the EKS-created group (`core.clusterSecurityGroup?.id ?? ...`).
        skip_sgs = bool(state.get("skipDefaultSecurityGroups"))
        return {
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "clusterSecurityGroupId": EKS_CLUSTER_SECURITY_GROUP
            if skip_sgs
            else PULUMI_EKS_CLUSTER_SECURITY_GROUP,
            "eksCluster": eks_cluster,
        }

    def _eks_cluster_children(self, resource_name: str, name: str, state: dict[str, Any]) -> dict[str, str]:
        """Queue what pulumi-eks creates inside `eks.Cluster`; return the reference to the EKS cluster."""
        cluster_type = "aws:eks/cluster:Cluster"
        cluster_child = f"{resource_name}-eksCluster"
        on_cluster = [(cluster_type, cluster_child)]
        children = [
            RemoteChild(
                cluster_type,
                cluster_child,
                f"{name}",
                {
                    "name": name,
                    "version": state.get("version"),
                    "arn": _arn("eks", f"cluster/{name}", self.region),
                    "vpcConfig": {
                        "clusterSecurityGroupId": EKS_CLUSTER_SECURITY_GROUP,
                        "vpcId": state.get("vpcId"),
                        "subnetIds": state.get("privateSubnetIds", []) + state.get("publicSubnetIds", []),
                    },
                },
            )
        ]
        if not state.get("skipDefaultSecurityGroups"):
            for suffix, sg in (
                ("eksClusterSecurityGroup", PULUMI_EKS_CLUSTER_SECURITY_GROUP),
                ("nodeSecurityGroup", "sg-0f9e8d7c6b5a40312"),
            ):
                children.append(
                    RemoteChild("aws:ec2/securityGroup:SecurityGroup", f"{resource_name}-{suffix}", sg, {})
                )
        # Add-ons pulumi-eks creates unless told not to (`enabled` defaults to true).
        for addon, key in (
            ("vpc-cni", "vpcCniOptions"),
            ("kube-proxy", "kubeProxyAddonOptions"),
            ("coredns", "corednsAddonOptions"),
        ):
            options = state.get(key) or {}
            if options.get("enabled", True) is False:
                continue
            children.append(
                RemoteChild(
                    "aws:eks/addon:Addon",
                    f"{resource_name}-{addon}",
                    f"{name}:{addon}",
                    {
                        "clusterName": name,
                        "addonName": addon,
                        "addonVersion": options.get("addonVersion") or options.get("version"),
                    },
                    on_cluster,
                )
            )
        # EKS's own entry is for whoever created the cluster, at the first run.
        creator = role_of_principal(self.account.facts.get("cluster-creator", self.caller_arn))
        for key, entry in (state.get("accessEntries") or {}).items():
            principal = entry.get("principalArn", "")
            # bootstrapClusterCreatorAdminPermissions: EKS already made the creator's entry.
            if same_principal(principal, creator):
                raise ProviderRefusal(
                    f"creating EKS access entry {key} for {principal}: ResourceInUseException: "
                    "The specified access entry resource is already in use on this cluster "
                    "(the cluster creator's entry exists)."
                )
            children.append(
                RemoteChild(
                    "aws:eks/accessEntry:AccessEntry",
                    f"{resource_name}-{key}",
                    f"{name}:{principal}",
                    {"clusterName": name, "principalArn": principal},
                    on_cluster,
                )
            )
        self._children[("eks:index:Cluster", resource_name)] = children
        stack_urn_prefix = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}"
        return resource_ref(f"{stack_urn_prefix}::eks:index:Cluster${cluster_type}::{cluster_child}", name)

    def _node_group_child(self, resource_name: str, state: dict[str, Any]) -> dict[str, str]:
        """pulumi-eks's ManagedNodeGroup creates one aws.eks.NodeGroup of the same name; EKS names
        the group's Auto Scaling group `eks-<node group>-<node group uuid>`."""
        name = state.get("nodeGroupName") or resource_name
        uid = str(uuid.UUID(hashlib.md5(name.encode()).hexdigest()))
        node_group_type = "aws:eks/nodeGroup:NodeGroup"
        scaling = state.get("scalingConfig") or {}
        self._children[("eks:index:ManagedNodeGroup", resource_name)] = [
            RemoteChild(
                node_group_type,
                resource_name,
                f"{state.get('clusterName', 'cluster')}:{name}",
                {
                    "nodeGroupName": name,
                    "scalingConfig": scaling,
                    "labels": state.get("labels") or {},
                    "resources": [{"autoscalingGroups": [{"name": f"eks-{name}-{uid}"}]}],
                },
            )
        ]
        stack_urn_prefix = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}"
        return resource_ref(
            f"{stack_urn_prefix}::eks:index:ManagedNodeGroup${node_group_type}::{resource_name}", name
        )

    def _offerings(self, a: dict[str, Any]) -> dict[str, Any]:
        """EC2 DescribeInstanceTypeOfferings by availability zone, filtered by instance type."""
        wanted = next((f["values"] for f in a.get("filters", []) if f["name"] == "instance-type"), None)
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
            "locationTypes": [a.get("locationType", "availability-zone")] * len(rows),
        }

    def call(self, args: mocks.MockCallArgs):
        t, a = args.token, args.args
        account_read = self.account_invokes.get(t)
        if account_read is not None:
            try:
                return account_read(a)
            except LookupError as err:  # what AWS answers for a missing thing: the invoke fails
                return {}, [("", str(err))]
        if t == "eks:index:Cluster/getKubeconfig":
            # pulumi-eks's Cluster.getKubeconfig: the same kubeconfig, with --profile / --role.
            resource_name = str(a["__self__"]).rsplit("::", 1)[-1]
            name, endpoint = self._kubeconfig_parts[resource_name]
            config = eks_kubeconfig(name, endpoint, self.region, a.get("profileName"), a.get("roleArn"))
            return {"result": json.dumps(config)}
        if t == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": self.caller_arn.split(":")[4],
                "arn": self.caller_arn,
                "userId": "AIDAOFFLINE",
                "id": self.caller_arn.split(":")[4],
            }
        if t == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            return self._offerings(a)
        if t == "aws:ec2/getSubnet:getSubnet":
            return self.account.subnet(a["id"], self.region)
        if t == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws"}
        if t == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region, "id": self.region}
        if t == "aws:ec2/getInstanceType:getInstanceType":
            return instance_type_facts(a["instanceType"])
        if t == "aws:ecr/getAuthorizationToken:getAuthorizationToken":
            return {
                "userName": "AWS",
                "password": "offline-registry-token",
                "authorizationToken": "QVdTOm9mZmxpbmU=",
                "proxyEndpoint": f"https://{ACCOUNT_ID}.dkr.ecr.{self.region}.amazonaws.com",
                "expiresAt": "2099-01-01T00:00:00Z",
                "id": self.region,
            }
        if t == "aws:ssm/getParameter:getParameter":
            return {
                "name": a["name"],
                "value": "ami-0" + hashlib.sha1(a["name"].encode()).hexdigest()[:16],
                "type": "String",
            }
        raise NotImplementedError(
            f"the offline plan has no answer for invoke {t}; add one to offline/engine.py (OfflineMocks.call)"
        )


def eks_kubeconfig(
    cluster: str, endpoint: str, region: str, profile: str | None = None, role_arn: str | None = None
) -> dict[str, Any]:
    """The kubeconfig pulumi-eks generates (nodejs/eks/cluster/cluster.ts, generateKubeconfig)."""
    args = ["--region", region, "eks", "get-token", "--cluster-name", cluster, "--output", "json"]
    if role_arn:
        args += ["--role", role_arn]
    if profile:  # --profile, not AWS_PROFILE: ambient credentials would override the variable
        args += ["--profile", profile]
    return {
        "apiVersion": "v1",
        "clusters": [
            {"cluster": {"server": endpoint, "certificate-authority-data": "LS0t"}, "name": "kubernetes"}
        ],
        "contexts": [{"context": {"cluster": "kubernetes", "user": "aws"}, "name": "aws"}],
        "current-context": "aws",
        "kind": "Config",
        "users": [
            {
                "name": "aws",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": args,
                        "env": [
                            {
                                "name": "KUBERNETES_EXEC_INFO",
                                "value": '{"apiVersion": "client.authentication.k8s.io/v1beta1"}',
                            }
                        ],
                    }
                },
            }
        ],
    }


def instance_type_facts(name: str) -> dict[str, Any]:
    """What `aws.ec2.get_instance_type` returns for a catalog instance type."""
    it = INSTANCE_TYPES[name]
    return {
        "id": name,
        "instanceType": name,
        "defaultVcpus": it.vcpus,
        "memorySize": it.memory_gib * 1024,
        "efaSupported": it.efa_supported,
        "maximumNetworkCards": it.network_cards,
        "efaMaximumInterfaces": it.max_efa_interfaces,
        "networkPerformance": it.network,
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


def run_program(
    stack: str,
    config: dict[str, str],
    secret_keys: list[str] | None = None,
    program: Path = PROJECT_ROOT / "__main__.py",
    caller_arn: str = OFFLINE_CALLER_ARN,
    facts: dict[str, Any] | None = None,
    registered: list[Registration] | None = None,
) -> PlanRun:
    """Run `program` as `pulumi up` would, against the mock engine, and return what it registered.
    `facts` change what the offline account answers (see offline/account.py); `registered`, when
    given, receives each registration as it happens (so a failed run shows how far it got)."""
    from pulumi.runtime import config as runtime_config

    _fresh_event_loop()
    runtime_config.set_all_config(dict(config), list(secret_keys or []))
    settings.ROOT.set(None)
    region = config.get("aws:region", "us-east-1")
    account = OfflineAccount(region, facts)
    monitor = RecordingMonitor(OfflineMocks(region, caller_arn, account))
    if registered is not None:
        monitor.registrations = registered
    messages: list[str] = []
    mocks.set_mocks(
        monitor.mocks,
        project=PROJECT,
        stack=stack,
        preview=False,
        logger=_recording_logger(messages),
        monitor=monitor,
    )
    root = str(PROJECT_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)

    def program_main():
        runpy.run_path(str(program), run_name="__main__")

    with account.botocore_answers():
        _sync_await(run_pulumi_func(program_main))
    outputs = {}
    for key, value in settings.get_root_resource().outputs.items():
        out = pulumi.Output.from_input(value)
        outputs[key] = SECRET_MASK if _sync_await(out.is_secret()) else _sync_await(out.future())
    return PlanRun(stack, monitor.registrations, outputs, messages)


class _Recorder(logging.Handler):
    def __init__(self, messages: list[str]):
        super().__init__(logging.DEBUG)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _recording_logger(messages: list[str]) -> logging.Logger:
    logger = logging.getLogger(f"{__name__}.program")
    logger.handlers[:] = [_Recorder(messages)]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


# Event loops the mock engine's worker threads run on (pulumi's monitor calls go through the main
# loop's default executor, and each worker thread needs a loop of its own).
_THREAD_LOOPS: list[asyncio.AbstractEventLoop] = []


def _own_event_loop() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    _THREAD_LOOPS.append(loop)


def _fresh_event_loop() -> None:
    """A usable loop for this run (also after `close_event_loops`), whose worker threads' loops
    are known, so they can be closed rather than left to the garbage collector."""
    try:
        loop = asyncio.get_event_loop()
        if loop.is_closed():
            raise RuntimeError("closed")
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    if not getattr(loop, "_trainstack_executor", False):
        loop.set_default_executor(ThreadPoolExecutor(initializer=_own_event_loop))
        loop._trainstack_executor = True


def close_event_loops() -> None:
    """Close the mock engine's event loops: left to interpreter shutdown or the garbage collector,
    closing them can print `Exception ignored ... Invalid file descriptor` after a successful plan."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        return
    if not loop.is_closed():
        loop.run_until_complete(loop.shutdown_default_executor())  # joins the worker threads
        loop.close()
    while _THREAD_LOOPS:
        _THREAD_LOOPS.pop().close()
    asyncio.set_event_loop(None)  # a later run in this process starts a fresh loop
