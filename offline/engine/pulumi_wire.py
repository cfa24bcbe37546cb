"""Pulumi's private APIs, in one place: the wire format, the mock monitor and the runtime's state.

Everything the offline engine needs of the Pulumi SDK beyond its public `Mocks` goes through here,
so an SDK upgrade that moves an internal breaks this module only. It decodes the wire form of
inputs (secrets, resource references, output values, assets and unknowns, each an object marked
with Pulumi's signature key) into plain JSON for a `Registration`, reads a RegisterResource
request's options, and builds a resource reference as a provider returns one. `RecordingMonitor` is
Pulumi's own `MockMonitor` that also records each registration's parent, dependencies and raw
inputs, answers method calls on remote components, and registers the children a remote component's
provider creates. The run functions reset the runtime between runs, install the monitor, run the
program as a stack and read the stack's outputs.
"""

from __future__ import annotations

import inspect
import logging
import pickle
from collections.abc import Callable
from typing import Any, Protocol

import pulumi
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import config as runtime_config
from pulumi.runtime import mocks, rpc, settings
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime.proto import provider_pb2, source_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from offline.engine.recording import SECRET_MASK, UNKNOWN_MASK, Registration, RemoteChild


def clean(value: Any, reveal: bool = False) -> Any:
    """Turn the wire form of inputs into plain JSON, masking secrets (unless `reveal`) and unknowns."""
    if isinstance(value, dict):
        sig = value.get(rpc._special_sig_key)
        if sig == rpc._special_secret_sig:
            return clean(value.get("value"), reveal) if reveal else SECRET_MASK
        if sig == rpc._special_resource_sig:
            return value.get("urn")
        if sig == rpc._special_output_value_sig:
            return SECRET_MASK if value.get("secret") and not reveal else clean(value.get("value"), reveal)
        if sig in (rpc._special_asset_sig, rpc._special_archive_sig):
            kept = {k: v for k, v in value.items() if k != rpc._special_sig_key}
            return {"asset" if sig == rpc._special_asset_sig else "archive": clean(kept, reveal)}
        if "__provider" in value:  # a dynamic provider travels pickled: not worth showing
            value = {**value, "__provider": "[serialized dynamic provider]"}
        return {k: clean(v, reveal) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v, reveal) for v in value]
    if value == rpc.UNKNOWN:
        return UNKNOWN_MASK
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def referenced_urns(value: Any) -> set[str]:
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return {value["urn"]}
        return set().union(*(referenced_urns(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(referenced_urns(v) for v in value))
    return set()


def refs_to_urns(value: Any) -> Any:
    """Resource references become their URN: deserializing them inside the monitor would try to
    rehydrate the resource on the monitor's own event loop."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return value.get("urn")
        return {k: refs_to_urns(v) for k, v in value.items()}
    if isinstance(value, list):
        return [refs_to_urns(v) for v in value]
    return value


def resource_ref(urn: str, id_: str) -> dict[str, str]:
    """A resource reference in the wire format, as a provider returns one in its outputs."""
    return {rpc._special_sig_key: rpc._special_resource_sig, "urn": urn, "id": id_, "packageVersion": ""}


def request_options(request) -> dict[str, Any]:
    """The resource options of a RegisterResource request that the engine acts on."""
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


class ProviderAnswers(Protocol):
    """What the monitor asks of the mocks: Pulumi's two questions, and the children a remote
    component's provider created for the registration just answered."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict]: ...

    def call(self, args: pulumi.runtime.MockCallArgs) -> Any: ...

    def take_children(self, type_: str, name: str) -> list[RemoteChild]: ...


class RecordingMonitor(mocks.MockMonitor):
    def __init__(self, offline_mocks: ProviderAnswers):
        super().__init__(offline_mocks)
        self.offline = offline_mocks
        self.registrations: list[Registration] = []
        self.stack_transforms: list[Callable[..., Any]] = []

    def RegisterStackTransform(self, request):
        """pulumi.runtime.register_resource_transform: the engine applies it to every resource
        registered afterwards, after the resource's own and its ancestors'."""
        self.stack_transforms += mocks._resolve_callbacks([request])
        return empty_pb2.Empty()

    def RegisterResource(self, request):
        raw = json_format.MessageToDict(request.object)
        if request.custom and request.type != "pulumi:pulumi:Stack":
            # The engine calls the resource's own transforms, then its ancestors' (a component's
            # reach everything registered below it), before the provider sees the inputs.
            own = mocks._resolve_callbacks(request.transforms)
            raw = apply_transforms(
                request.type, request.name, raw, own + self._transforms_over(request.parent)
            )
        request.object.CopyFrom(json_format.ParseDict(refs_to_urns(raw), struct_pb2.Struct()))
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            # What the resource waits for: depends_on, Output inputs, resources passed by
            # reference, and an explicit provider (default providers are not in the program).
            deps = set(request.dependencies) | referenced_urns(raw)
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
                    inputs=clean(raw),
                    dependencies=sorted(deps),
                    property_dependencies={
                        key: sorted(prop.urns)
                        for key, prop in request.propertyDependencies.items()
                        if prop.urns
                    },
                    transforms=mocks._resolve_callbacks(request.transforms),
                    options=request_options(request),
                    revealed=clean(raw, reveal=True),
                )
            )
            self._record_remote_children(request.type, request.name, response.urn)
        return response

    def _transforms_over(self, urn: str) -> list[Callable[..., Any]]:
        """The transforms that reach a child of `urn`: its own, then each ancestor's, nearest first
        (Pulumi hands a component's transforms to everything registered below it)."""
        by_urn = {r.urn: r for r in self.registrations}
        found: list[Callable[..., Any]] = []
        while urn in by_urn:
            found += by_urn[urn].transforms
            urn = by_urn[urn].parent or ""
        return found + self.stack_transforms

    def Call(self, request):
        """A method call on a remote component (pulumi-eks's Cluster.getKubeconfig): Pulumi's
        MockMonitor answers invokes only. `__self__` arrives as the component's URN."""
        args = clean(refs_to_urns(json_format.MessageToDict(request.args)), reveal=True)
        returned = self.mocks.call(
            mocks.MockCallArgs(token=request.tok, args=args, provider=request.provider)
        )
        proto = _sync_await(rpc.serialize_properties(returned, {}))
        return provider_pb2.CallResponse(**{"return": proto})

    def _record_remote_children(self, type_: str, name: str, parent_urn: str) -> None:
        """Children a remote component (pulumi-eks) creates inside its provider: registered so that
        resource references to them resolve, and recorded so the plan shows them."""
        transforms = self._transforms_over(parent_urn)
        for child in self.offline.take_children(type_, name):
            child.state = transformed(child, transforms)
            urn = self.make_urn(parent_urn, child.type, child.name)
            self.resources[urn] = mocks.MockMonitor.ResourceRegistration(urn, child.id, child.state)
            self.registrations.append(
                Registration(
                    urn=urn,
                    type=child.type,
                    name=child.name,
                    parent=parent_urn,
                    custom=True,
                    inputs=clean(child.state),
                    dependencies=[self.make_urn(parent_urn, *dep) for dep in child.depends_on],
                )
            )


def transformed(child: RemoteChild, transforms: list[Callable[..., Any]]) -> dict[str, Any]:
    """A remote component's child as its provider registers it: the real engine calls the
    component's transforms back for each child it creates (pulumi-eks's node group gets
    `nodeRepairConfig` this way), so the offline one does too."""
    return apply_transforms(child.type, child.name, child.state, transforms)


def apply_transforms(
    type_: str, name: str, props: dict[str, Any], transforms: list[Callable[..., Any]]
) -> dict[str, Any]:
    """`props` after each transform in turn."""
    for transform in transforms:
        args = pulumi.ResourceTransformArgs(True, type_, name, props, pulumi.ResourceOptions())
        result = transform(args)
        if inspect.isawaitable(result):
            result = _sync_await(result)
        if result is not None:
            props = dict(result.props)
    return props


def reset_runtime(config: dict[str, str], secret_keys: list[str]) -> None:
    """Start a run afresh: this run's config, and no stack left over from an earlier run."""
    runtime_config.set_all_config(config, secret_keys)
    settings.ROOT.set(None)


def _no_stack_trace() -> source_pb2.StackTrace:
    return source_pb2.StackTrace()


def install(monitor: RecordingMonitor, project: str, stack: str, logger: logging.Logger) -> None:
    """Make `monitor` (and its mocks) the engine the program talks to; `logger` gets pulumi.log.
    The SDK sends the engine, with each registration, the program's call stack (to show where in
    the program a resource was made); it walks and converts the whole Python stack to do so, twice
    a registration, 12% of a plan's time. The mock engine records what is registered, not where:
    it gets an empty stack. The SDK's function is read first, so an upgrade that renames it fails
    here rather than quietly planning slower."""
    if runtime_resource._get_stack_trace is not _no_stack_trace:
        runtime_resource._get_stack_trace = _no_stack_trace
    mocks.set_mocks(
        monitor.mocks, project=project, stack=stack, preview=False, logger=logger, monitor=monitor
    )


# What the SDK's `serialize_provider` (pulumi/dynamic/dynamic.py) replaces on pickle's Python pickler
# to pickle a dynamic provider with sorted dicts, and never puts back: each dynamic resource wraps
# `_batch_setitems` once more, so a process that plans many stacks grew a chain of wrappers until
# pickling any dict overflowed the stack (dill, in a later test of the same worker).
_PICKLER_PATCHED = ("_batch_setitems", "save_dict")


def run_stack(main: Callable[[], None]) -> None:
    """Run `main` as the stack's program, as `pulumi up` does, until every registration is answered;
    pickle's Python pickler is left as it was found."""
    saved = {name: getattr(pickle._Pickler, name) for name in _PICKLER_PATCHED}
    try:
        _sync_await(run_pulumi_func(main))
    finally:
        for name, method in saved.items():
            setattr(pickle._Pickler, name, method)


def stack_outputs() -> dict[str, Any]:
    """The outputs the program exported, secrets masked."""
    outputs = {}
    for key, value in settings.get_root_resource().outputs.items():
        out = pulumi.Output.from_input(value)
        outputs[key] = SECRET_MASK if _sync_await(out.is_secret()) else _sync_await(out.future())
    return outputs
