"""What the offline engine records of a run, as plain data.

A `Registration` is one resource the program registered (or a remote component's provider created
inside it): its parent, what it waits for, its inputs with secrets and unknowns masked, the resource
options the engine acts on and the transforms the program attached. A `PlanRun` is a whole run: the
registrations in order, the stack outputs and what the program logged. A `RemoteChild` is a resource
a remote component creates in its own provider, before it is recorded. Nothing here reads Pulumi's
wire format (pulumi_wire.py turns it into these); `SECRET_MASK` and `UNKNOWN_MASK` are what a plan
shows in place of a secret or a value not known until deployment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
    # What the cluster already ran (`cluster-objects:` facts): its DaemonSets serve the jobs too.
    cluster_objects: list[dict[str, Any]] = field(default_factory=list)
    # What the program asked that cluster (offline/engine/cluster_answers.py Request).
    cluster_requests: list[Any] = field(default_factory=list)
    # The account the run deployed into: the scheduling check asks it where instances would sit in
    # the EC2 network (OfflineAccount.instance_topology).
    account: Any = None

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


@dataclass
class RemoteChild:
    """A resource a remote component creates in its own provider, as the real provider would."""

    type: str
    name: str
    id: str
    state: dict[str, Any]
    depends_on: list[tuple[str, str]] = field(default_factory=list)  # (type, name) of siblings
