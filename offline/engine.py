"""Run the unchanged Pulumi program under Pulumi's mock engine and record what it registers.

`OfflineMocks` answers resource registrations and the provider invokes the program makes
(availability zones, caller identity, partition, region, instance types, SSM parameters) from
fixed values and the instance catalog. `RecordingMonitor` is Pulumi's own `MockMonitor` that
also keeps each registration's parent, dependencies and raw inputs (so secrets can be masked).
"""

from __future__ import annotations

import hashlib
import json
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from stacks.catalog import INSTANCE_TYPES
from stacks.config import PROJECT, PROJECT_ROOT

ACCOUNT_ID = "123456789012"
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

    def as_json(self) -> dict[str, Any]:
        return {
            "urn": self.urn,
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "inputs": self.inputs,
            "dependencies": self.dependencies,
        }


@dataclass
class PlanRun:
    stack: str
    resources: list[Registration]
    outputs: dict[str, Any] = field(default_factory=dict)

    def by_type(self, type_: str) -> list[Registration]:
        return [r for r in self.resources if r.type == type_]

    def one(self, type_: str, name: str | None = None) -> Registration:
        found = [r for r in self.by_type(type_) if name is None or r.name == name]
        if len(found) != 1:
            raise LookupError(f"expected one {type_} {name or ''}, found {[r.name for r in found]}")
        return found[0]


def _clean(value: Any) -> Any:
    """Turn the wire form of inputs into plain JSON, masking secrets and unknowns."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return SECRET_MASK
        if sig == rpc._special_resource_sig:
            return value.get("urn")
        if sig == rpc._special_output_value_sig:
            return SECRET_MASK if value.get("secret") else _clean(value.get("value"))
        if sig in (rpc._special_asset_sig, rpc._special_archive_sig):
            kept = {k: v for k, v in value.items() if k != rpc._special_sig_key}
            return {"asset" if sig == rpc._special_asset_sig else "archive": _clean(kept)}
        if "__provider" in value:  # a dynamic provider travels pickled: not worth showing
            value = {**value, "__provider": "[serialized dynamic provider]"}
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
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


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, offline_mocks: mocks.Mocks):
        super().__init__(offline_mocks)
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
                )
            )
        return response


def _arn(service: str, resource: str, region: str, regional: bool = True) -> str:
    return f"arn:aws:{service}:{region if regional else ''}:{ACCOUNT_ID}:{resource}"


def fake_digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("/".join(parts).encode()).hexdigest()


class OfflineMocks(mocks.Mocks):
    """Answers registrations and invokes the way AWS and the providers would, offline."""

    def __init__(self, region: str):
        self.region = region

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
            computed = self._cluster_outputs(state)
        elif t == "pulumi-python:dynamic:Resource" and "context_hash" in state:
            repo = state["repository_url"]
            computed = {"image_uri": f"{repo}@{fake_digest(repo, state['context_hash'])}", "build_id": ""}
        elif t == "docker:index/image:Image":
            computed = {"repoDigest": f"{state.get('imageName', '').split(':')[0]}@{fake_digest(args.name)}"}
        state.update(computed)
        return f"{args.name}-id", state

    def _cluster_outputs(self, state: dict[str, Any]) -> dict[str, Any]:
        name = state.get("name", "cluster")
        endpoint = f"https://{hashlib.sha1(name.encode()).hexdigest()[:32].upper()}.gr7.{self.region}.eks.amazonaws.com"
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": name, "cluster": {"server": endpoint, "certificate-authority-data": "LS0t"}}
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
            "users": [
                {
                    "name": name,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": ["eks", "get-token", "--cluster-name", name, "--region", self.region],
                        }
                    },
                }
            ],
        }
        return {
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "clusterSecurityGroupId": "sg-0c1a2b3c4d5e6f708",
        }

    def call(self, args: mocks.MockCallArgs):
        t, a = args.token, args.args
        if t == "aws:index/getAvailabilityZones:getAvailabilityZones":
            letters = "abcdef"
            return {
                "names": [f"{self.region}{c}" for c in letters],
                "zoneIds": [f"use1-az{i + 1}" for i in range(len(letters))],
                "id": self.region,
            }
        if t == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": ACCOUNT_ID,
                "arn": f"arn:aws:iam::{ACCOUNT_ID}:user/offline",
                "userId": "AIDAOFFLINE",
                "id": ACCOUNT_ID,
            }
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
) -> PlanRun:
    """Run `program` as `pulumi up` would, against the mock engine, and return what it registered."""
    from pulumi.runtime import config as runtime_config

    runtime_config.set_all_config(dict(config), list(secret_keys or []))
    settings.ROOT.set(None)
    monitor = RecordingMonitor(OfflineMocks(config.get("aws:region", "us-east-1")))
    mocks.set_mocks(monitor.mocks, project=PROJECT, stack=stack, preview=False, monitor=monitor)
    root = str(PROJECT_ROOT)
    if root not in sys.path:
        sys.path.insert(0, root)

    def program_main():
        runpy.run_path(str(program), run_name="__main__")

    _sync_await(run_pulumi_func(program_main))
    outputs = {}
    for key, value in settings.get_root_resource().outputs.items():
        out = pulumi.Output.from_input(value)
        outputs[key] = SECRET_MASK if _sync_await(out.is_secret()) else _sync_await(out.future())
    return PlanRun(stack, monitor.registrations, outputs)
