"""On a cluster the stack did not create, everything the stack makes in its training namespace carries
the stack's name (`STACK_LABEL`). That namespace may be the owner's or another stack's too (HyperPod's
`kubeflow`, a team's own), holding objects of the same kinds: a later run tells its own objects from
theirs by the label before it registers anything (account_checks/namespace_objects.py), and the
stack's default deny selects its own pods by it.

One stack transform (pulumi.runtime.register_resource_transform) adds it, so every object is
labelled wherever in the program, or in a provider's component, it is made. The engine applies it to
the inputs before the provider sees them; a label is an in-place update, so adding it to what an
earlier release made relaunches nothing. Patches are left alone: what they patch is someone else's."""

from __future__ import annotations

import copy
from typing import Any

import pulumi

from conventions import STACK_LABEL


def labelled_as_stack(namespace: str, stack: str):
    """A stack transform: `STACK_LABEL: stack` on every Kubernetes object made in `namespace`."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if not args.type_.startswith("kubernetes:") or args.type_.endswith("Patch"):
            return None
        meta = args.props.get("metadata")
        if not isinstance(meta, dict) or meta.get("namespace") != namespace:
            return None
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or labels.get(STACK_LABEL) == stack:
            return None
        props = copy.copy(args.props)
        props["metadata"] = {**meta, "labels": {**labels, STACK_LABEL: stack}}
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


# The cluster-wide objects the stack makes (Kueue's and Trainer's), and where each kind names another.
SCOPED_KINDS = (
    "ResourceFlavor",
    "ClusterQueue",
    "Topology",
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "ClusterTrainingRuntime",
)


def _renamed(value: Any, renames: dict[str, str]) -> Any:
    return renames.get(value, value) if isinstance(value, str) else value


def _references(kind: str, spec: dict[str, Any], renames: dict[str, str]) -> None:
    """The names of the stack's cluster-wide objects a `kind`'s spec refers to, renamed in place:
    Kueue v1beta2's LocalQueue.clusterQueue, ClusterQueue flavors and admission checks,
    ResourceFlavor.topologyName, AdmissionCheck.parameters; Trainer v1alpha1's TrainJob.runtimeRef."""
    if kind == "LocalQueue":
        spec["clusterQueue"] = _renamed(spec.get("clusterQueue"), renames)
    elif kind == "ClusterQueue":
        for group in spec.get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                flavor["name"] = _renamed(flavor.get("name"), renames)
        for check in (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []:
            check["name"] = _renamed(check.get("name"), renames)
            check["onFlavors"] = [_renamed(f, renames) for f in check.get("onFlavors") or []]
    elif kind == "ResourceFlavor" and "topologyName" in spec:
        spec["topologyName"] = _renamed(spec["topologyName"], renames)
    elif kind == "AdmissionCheck" and isinstance(spec.get("parameters"), dict):
        spec["parameters"]["name"] = _renamed(spec["parameters"].get("name"), renames)
    elif kind == "TrainJob" and isinstance(spec.get("runtimeRef"), dict):
        spec["runtimeRef"]["name"] = _renamed(spec["runtimeRef"].get("name"), renames)


def scoped_cluster_names(renames: dict[str, str], stack: str):
    """A stack transform, on a cluster the stack did not create: each cluster-wide object the stack
    makes takes its name in `renames` (the stack's name in it, so two stacks' queues, flavors and
    runtimes never share one, and one stack's `destroy` never deletes another's), carries the stack's
    name as a label, and every reference to it follows. The program and its models keep one name per
    group (conventions.cluster_queue_name); the sharing is the cluster's concern, so it is applied here,
    once, on the objects sent. The resources keep their Pulumi names: only what is sent changes."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if not args.type_.startswith("kubernetes:") or args.type_.endswith("Patch"):
            return None
        kind = args.type_.rsplit(":", 1)[-1]
        meta, spec = args.props.get("metadata"), args.props.get("spec")
        scoped = kind in SCOPED_KINDS and isinstance(meta, dict) and meta.get("namespace") is None
        refers = kind in ("LocalQueue", "ClusterQueue", "ResourceFlavor", "AdmissionCheck", "TrainJob")
        if not scoped and not (refers and isinstance(spec, dict)):
            return None
        props = copy.deepcopy(dict(args.props))
        if scoped:
            props["metadata"]["name"] = _renamed(meta.get("name"), renames)
            props["metadata"]["labels"] = {**(meta.get("labels") or {}), STACK_LABEL: stack}
        if isinstance(props.get("spec"), dict):
            _references(kind, props["spec"], renames)
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform
