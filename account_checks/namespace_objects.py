"""The objects the stack would make in its training namespace on a cluster it did not create, read by
name before anything is registered there. That namespace may be the owner's or another stack's too,
so an object of the same name that is not this stack's stops the run, one sentence per object: with
the shipped provider (pulumi-kubernetes 4.34.2 creates with a plain POST) its create would fail with
AlreadyExists halfway through the `up`; with one that upserts, the stack would take it over and a
later namespace change or `destroy` would delete it.

Not this stack's: no `app.kubernetes.io/part-of: trainstack` label (the owner's, another tool's), or
another stack's name in `trainstack.dev/stack`. One labelled part-of trainstack with no stack name is
what the previous release made (it labelled none), taken as this stack's: this run labels it
(components/ownership.py). Each read is one GET of one name, its metadata only
(PartialObjectMetadata), in that namespace only, so a namespace-scoped role that may get answers."""

from __future__ import annotations

import pulumi

from account_checks.cluster_access import ClusterReader
from config import PROJECT, StackConfig
from conventions import PART_OF, STACK_LABEL, in_shared_namespace


class NamespaceObjectsError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': its namespace holds objects of the names the stack would make, not the "
            f"stack's; nothing was created:\n{lines}"
        )


def whose(labels: dict[str, str], stack: str, name: str | None = None) -> str | None:
    """Whose an object is by its labels, where it is not this stack's (None: this stack's). This
    stack's: labelled with its name (`STACK_LABEL`); or, made by a release before that label, part of
    trainstack (`PART_OF`) with no other stack's label, or, as the release before the labels left its
    Secrets, with no label at all and named with the stack's name (conventions.in_shared_namespace:
    `trainstack-<stack>-...`, a `name` given only for an object in the stack's namespace)."""
    ((part_of, trainstack),) = PART_OF.items()
    owner = labels.get(STACK_LABEL)
    if owner is not None:
        return None if owner == stack else f"stack {owner}'s ({STACK_LABEL}={owner})"
    if labels.get(part_of) == trainstack:
        return None
    if not labels and name is not None and name.startswith(in_shared_namespace(stack, "")):
        return None
    return f"not trainstack's (no {part_of}={trainstack} label)"


def _labels(
    reader: ClusterReader, collection: str, namespace: str | None, name: str
) -> dict[str, str] | None:
    """The labels of the object `name` of `collection` (in `namespace`; None: cluster-wide), read as its
    metadata only; None where there is none."""
    group, _, plural = collection.rpartition("/")
    where = f"/{group}/namespaces/{namespace}/{plural}" if namespace else f"/{group}/{plural}"
    obj = reader.get(f"{where}/{name}", metadata_only=True, one=True)
    return None if obj is None else (obj.get("metadata") or {}).get("labels") or {}


def collisions(
    reader: ClusterReader, namespace: str | None, stack: str, wanted: list[tuple[str, str, str]]
) -> list[str]:
    """One sentence per (kind, name, collection) in `wanted` that exists in `namespace` (None: the
    kind is cluster-wide) and is not this stack's."""
    found = []
    for kind, name, collection in wanted:
        labels = _labels(reader, collection, namespace, name)
        owner = None if labels is None else whose(labels, stack, name if namespace else None)
        if owner is None:
            continue
        if namespace is None:
            found.append(
                f"{kind} {name} is {owner}, and the stack would make one of that name (a cluster-wide name, "
                f"the stack's in it): rename the stack, or remove that {kind} if nothing uses it"
            )
        else:
            found.append(
                f"{kind} {namespace}/{name} is {owner}, and the stack would make one of that name: rename what "
                f"the stack names so (a job or node group, in {PROJECT}:jobs or gpuNodeGroups) or give the "
                f"stack a namespace of its own ({PROJECT}:existingCluster.namespace)"
            )
    return found


def check_namespace_objects(
    reader: ClusterReader,
    cfg: StackConfig,
    wanted: list[tuple[str, str, str]],
    cluster_wide: list[tuple[str, str, str]],
) -> None:
    """Stop with every object of `wanted` (kind, name, collection) in the training namespace, and of
    `cluster_wide`, that is not this stack's."""
    problems = collisions(reader, cfg.training_namespace, cfg.stack, wanted)
    problems += collisions(reader, None, cfg.stack, cluster_wide)
    if problems:
        raise NamespaceObjectsError(cfg.stack, problems)


QUEUE_COLLECTION = "apis/kueue.x-k8s.io/v1beta2/clusterqueues"
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def keeps_earlier_names(reader: ClusterReader, cfg: StackConfig, queues: list[str]) -> bool:
    """Whether the stack already runs under the cluster-wide names releases before per-stack names
    gave it (`trainstack-<group>`): one of `queues` (those names) is there, part of trainstack, and
    the stack's, by its label or, unlabelled as that release left it, by the namespace its
    namespaceSelector admits (the stack's training namespace). Such a stack keeps them: a rename would
    replace its queues, flavors and runtimes, and with them its running TrainJobs (a TrainJob's
    runtimeRef and a LocalQueue's clusterQueue are immutable), while Kueue keeps the old queue until
    its admitted jobs end."""
    for name in queues:
        queue = reader.get(f"/{QUEUE_COLLECTION}/{name}")
        if queue is None:
            continue
        labels = (queue.get("metadata") or {}).get("labels") or {}
        if whose(labels, cfg.stack) is not None:
            continue
        if labels.get(STACK_LABEL) == cfg.stack:
            return True
        admitted = ((queue.get("spec") or {}).get("namespaceSelector") or {}).get("matchLabels") or {}
        if admitted.get(NAMESPACE_NAME_LABEL) == cfg.training_namespace:
            return True
    return False


def relaunches(
    reader: ClusterReader, cfg: StackConfig, other_kinds: list[tuple[str, str, str, str]]
) -> list[str]:
    """A sentence per job the stack runs under a kind other than the one configured now (`other_kinds`:
    the job's name, its configured kind, another kind and that kind's collection): the `up` replaces
    it, which stops it. Read like the names above, before anything is registered."""
    found = []
    for name, kind, other, collection in other_kinds:
        labels = _labels(reader, collection, cfg.training_namespace, name)
        if labels is not None and whose(labels, cfg.stack) is None:
            found.append(
                f"{other} {name} is replaced by a {kind}: the running job stops and resumes from its "
                "last checkpoint (its jobs[].kind changed)"
            )
    return found
