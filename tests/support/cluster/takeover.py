"""The takeover detector: around every `up` and `destroy` of a stack on the tier, the objects that were
on the cluster before the stack's first operation, and that the stack does not declare as a patch,
must neither gain the stack's marks nor go away.

What the provider does to an object that is already there depends on its version: v4.25.0, which the
tier builds, creates by server-side apply (an upsert: it co-owns the object, sets its fields and labels
it), while 4.34.2, which the stack ships, creates with a POST and stops on AlreadyExists. Either way
the stack has reached an object that is not its own; comparing the cluster before and after makes that
visible whichever provider runs. The marks (pulumi-kubernetes provider pkg/provider/provider.go
fieldManagerName, pkg/metadata/labels.go TrySetManagedByLabel; helm pkg/action/validate.go):
  - a field manager of the provider's: `pulumi-kubernetes` (client-side apply) or
    `pulumi-kubernetes-<random>` (server-side apply), or the one Helm writes with inside it, the
    provider binary's name `pulumi-resource-kubernetes` (helm v3.18 pkg/kube/client.go: the manager
    defaults to the program's name);
  - the labels `app.kubernetes.io/managed-by: pulumi`, `app.kubernetes.io/part-of: trainstack` and
    `trainstack.dev/stack`, or Helm's release annotation (the stack's releases adopting it);
  - an owner reference it did not have.
An object with a controller owner may be replaced by its controller: it is held to its marks only.

Two kinds of object the stack may co-own by design, declared in its state: a patch
(`kubernetes:<group>/<version>:<Kind>Patch`), and a CRD another trainstack stack applied and kept
when it went (labelled `app.kubernetes.io/part-of: trainstack` before the operation:
components/operators.py retained_crds), which an install takes over (account_checks/operator_decisions.py
`_kept_crd`)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

from conventions import PART_OF, STACK_LABEL
from support.cluster.objects import INVENTORY, Objects, serves

PROVIDER_MANAGERS = ("pulumi-kubernetes", "pulumi-resource-kubernetes")
MANAGED_BY = ("app.kubernetes.io/managed-by", "pulumi")
HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"

Key = tuple[str, str, str, str]  # apiVersion, kind, namespace ("" when cluster-scoped), name


@dataclass(frozen=True)
class Held:
    """What an object carries that the stack could take from it."""

    uid: str
    managers: frozenset[str]
    marks: frozenset[str]  # the stack's labels and Helm's release annotation, as `key=value`
    owners: frozenset[str]  # owner uids
    controlled: bool  # a controller owns it (and may replace it)

    @classmethod
    def of(cls, obj: dict) -> Held:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        marks = {f"{k}={labels[k]}" for k in (*PART_OF, STACK_LABEL, MANAGED_BY[0]) if k in labels}
        if HELM_RELEASE_ANNOTATION in annotations:
            marks.add(f"{HELM_RELEASE_ANNOTATION}={annotations[HELM_RELEASE_ANNOTATION]}")
        owners = meta.get("ownerReferences") or []
        return cls(
            meta["uid"],
            frozenset(m.get("manager", "") for m in meta.get("managedFields") or []),
            frozenset(marks),
            frozenset(o["uid"] for o in owners),
            any(o.get("controller") for o in owners),
        )


def snapshot(objects: Objects) -> dict[Key, Held]:
    """Every object of the inventory's kinds, but those being deleted (in a namespace that is, too)."""
    served = [(a, k) for a, k in INVENTORY if serves(objects, a, k)]
    found: dict[Key, Held] = {}
    terminating = {
        o["metadata"]["name"]
        for o in objects.list("v1", "Namespace")
        if o["metadata"].get("deletionTimestamp")
    }
    for api_version, kind in served:
        for o in objects.list(api_version, kind):
            meta = o["metadata"]
            if meta.get("deletionTimestamp") or meta.get("namespace") in terminating:
                continue
            found[(api_version, kind, meta.get("namespace") or "", meta["name"])] = Held.of(o)
    return found


def violations(before: dict[Key, Held], after: dict[Key, Held], patched: set[Key]) -> list[str]:
    """One line per foreign object `after` shows taken over or gone."""
    found = []
    for key, held in sorted(before.items()):
        if key in patched:
            continue
        _, kind, namespace, name = key
        what = f"{kind} {namespace + '/' if namespace else ''}{name}"
        now = after.get(key)
        if now is None or now.uid != held.uid:
            if not held.controlled:
                found.append(f"{what}: {'deleted' if now is None else 'replaced'}")
            continue
        gained = sorted(m for m in now.managers - held.managers if m.startswith(PROVIDER_MANAGERS))
        if gained:
            found.append(f"{what}: gained the field manager {', '.join(gained)}")
        if now.marks - held.marks:
            found.append(f"{what}: gained {', '.join(sorted(now.marks - held.marks))}")
        if now.owners - held.owners:
            found.append(f"{what}: gained owner {', '.join(sorted(now.owners - held.owners))}")
    return found


def declared_patches(state: dict) -> set[Key]:
    """The objects the stack's state declares as patches (`kubernetes:<group>/<version>:<Kind>Patch`):
    those it may co-own by design. Keyed for every apiVersion the detector might list them by."""
    keys = set()
    for r in (state.get("deployment") or {}).get("resources") or []:
        token = r.get("type", "")
        if not (token.startswith("kubernetes:") and token.endswith("Patch")):
            continue
        group_version, kind = token.split(":")[1], token.split(":")[2].removesuffix("Patch")
        api_version = group_version.removeprefix("core/")
        meta = (r.get("outputs") or r.get("inputs") or {}).get("metadata") or {}
        if isinstance(meta.get("name"), str):
            keys.add((api_version, kind, meta.get("namespace") or "", meta["name"]))
    return keys


CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
KEPT_MARK = "{}={}".format(*next(iter(PART_OF.items())))


def declared_kept_crds(state: dict, before: dict[Key, Held]) -> set[Key]:
    """The CRDs the stack's state declares that were trainstack's kept CRDs before it: those it took
    over by design."""
    keys = set()
    for r in (state.get("deployment") or {}).get("resources") or []:
        if r.get("type") != CRD_TYPE:
            continue
        name = ((r.get("outputs") or r.get("inputs") or {}).get("metadata") or {}).get("name")
        key = ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", name)
        if key in before and KEPT_MARK in before[key].marks:
            keys.add(key)
    return keys


class TakeoverDetector:
    """Held by an Engine: the foreign objects are those of the first snapshot (before the stack's
    first operation); each later operation is compared against them."""

    def __init__(self, objects: Objects):
        self.objects = objects
        self.foreign: dict[Key, Held] | None = None
        self.patched: set[Key] = set()

    def before(self) -> None:
        if self.foreign is None:
            self.foreign = snapshot(self.objects)

    def rebase(self) -> None:
        """The cluster as it is now is what this stack's next operations must leave: what another
        stack removed in between was not this one's doing."""
        self.foreign = None

    def after(self, operation: str, state: dict) -> None:
        """Raises with every object taken over or gone, by name."""
        assert self.foreign is not None, "before() was not called"
        self.patched |= declared_patches(state) | declared_kept_crds(state, self.foreign)
        found = violations(self.foreign, snapshot(self.objects), self.patched)
        if found:
            raise AssertionError(
                f"`{operation}` reached objects that were not the stack's:\n  " + "\n  ".join(found)
            )


def exported_state(pulumi: str, directory, stack: str, env: dict) -> dict:
    done = subprocess.run(
        [pulumi, "stack", "export", "--stack", stack],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)
