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
