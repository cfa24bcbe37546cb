"""Value rules over a whole `StackConfig`: each plane's own checks, in plane order, and the rules
that span planes (a job's node group exists and holds it, its operator is installed, the jobs
`pulumi up` waits for fit their group together)."""

from __future__ import annotations

import typing
from collections import Counter

from conventions import SYSTEM_GROUP
from stacks.config.build import check_image, check_registry, check_storage
from stacks.config.ci import check_ci
from stacks.config.cluster import check_cluster
from stacks.config.jobs import JobConfig, check_job_env_and_wait, check_job_name, check_job_run
from stacks.config.names import PROJECT
from stacks.config.network import check_network
from stacks.config.node_groups import GpuNodeGroupConfig, check_node_groups
from stacks.config.operators import OperatorsConfig, check_operators
from stacks.schema import Reader

if typing.TYPE_CHECKING:
    from stacks.config import StackConfig

_TAG_PUNCTUATION = set(" _.:/=+-@")


def check(c: StackConfig, r: Reader) -> None:
    """Value and cross-field rules. They run on every value that parsed (a malformed one keeps its
    default); problems about a malformed key, or rules leaning on malformed groups, stay quiet."""
    checks = Reader()
    groups_sound = not any(
        r.under_malformed(k) or k.startswith((f"{PROJECT}:gpuNodeGroups", f"{PROJECT}:cluster"))
        for k in r.malformed_keys
    )
    _check_values(c, checks, groups_sound)
    r.problems += [p for p in checks.problems if not r.under_malformed(p.key)]


def _check_values(c: StackConfig, r: Reader, groups_sound: bool) -> None:
    _check_tags(c.tags, r)
    check_network(c.network, r)
    check_cluster(c.cluster, r)
    check_node_groups(c.gpu_node_groups, c.region, r)
    by_name = {g.name: g for g in c.gpu_node_groups} if groups_sound else None
    _check_jobs(c, by_name, r)
    check_image(c.image, c.docker_hub_access_token is not None, r)
    check_operators(c.operators, r)
    check_ci(c.ci, r)
    check_registry(c.registry, c.storage.protect, r)
    check_storage(c.storage, r)


def _aws_tag_text(text: str) -> bool:
    """AWS tags allow letters, digits, spaces and _ . : / = + - @ (no control characters)."""
    return all(ch.isalnum() or ch in _TAG_PUNCTUATION for ch in text)


def _check_tags(tags: dict[str, str], r: Reader) -> None:
    for k, v in tags.items():
        if (
            k.lower().startswith("aws:")
            or not 1 <= len(k) <= 128
            or len(v) > 256
            or not (_aws_tag_text(k) and _aws_tag_text(v))
        ):
            r.problem(
                f"{PROJECT}:tags.{k}",
                v,
                "not a valid AWS tag",
                "keys of 1-128 characters not starting with 'aws:', values up to 256, of letters, digits, "
                "spaces and _ . : / = + - @",
            )


def _check_jobs(c: StackConfig, by_name: dict[str, GpuNodeGroupConfig] | None, r: Reader) -> None:
    """`by_name` is None when the node groups did not parse: nothing to check a job against."""
    p = PROJECT
    for name, n in Counter(j.name for j in c.jobs).items():
        if n > 1:
            r.problem(f"{p}:jobs", name, f"name used by {n} jobs", "unique names")
    system_nodes = c.cluster.system_node_group.desired_size
    _check_waited_jobs_fit(c.jobs, by_name or {}, r)
    for i, j in enumerate(c.jobs):
        k = f"{p}:jobs[{i}]"
        check_job_name(j, k, r)
        _check_job_placement(j, by_name, system_nodes, k, r)
        check_job_run(j, k, r)
        _check_job_operator(j, c.operators, k, r)
        check_job_env_and_wait(j, k, r)


def _check_waited_jobs_fit(
    jobs: tuple[JobConfig, ...], by_name: dict[str, GpuNodeGroupConfig], r: Reader
) -> None:
    waited: Counter[str] = Counter()
    waited_jobs: Counter[str] = Counter()
    for j in jobs:
        if j.wait != "none":
            waited[j.node_group] += j.nodes
            waited_jobs[j.node_group] += 1
    for name, needed in waited.items():
        # One job too large for its group is reported on its own `nodes`.
        if name in by_name and waited_jobs[name] > 1 and needed > by_name[name].node_count:
            r.problem(
                f"{PROJECT}:jobs",
                name,
                f"the jobs `pulumi up` waits for on node group '{name}' need {needed} nodes at once; "
                f"it has {by_name[name].node_count}, so some would never start",
                "wait: none for jobs that may queue, fewer nodes, or a larger nodeCount",
            )


def _check_job_placement(
    j: JobConfig, groups: dict[str, GpuNodeGroupConfig] | None, system_nodes: int, k: str, r: Reader
) -> None:
    if groups is None:
        return
    if j.node_group == SYSTEM_GROUP:
        count, label = system_nodes, f"the system node group has {system_nodes} node(s) at creation"
    elif j.node_group in groups:
        count = groups[j.node_group].node_count
        label = f"node group '{j.node_group}' has {count} node(s)"
    else:
        r.problem(
            f"{k}.nodeGroup",
            j.node_group,
            "no node group has that name",
            ", ".join([*groups, SYSTEM_GROUP]),
        )
        return
    if count and not 1 <= j.nodes <= count:
        r.problem(f"{k}.nodes", j.nodes, label, f"1-{count}")


def _check_job_operator(j: JobConfig, operators: OperatorsConfig, k: str, r: Reader) -> None:
    needs, enabled = operators.runs(j.kind)
    if not enabled:
        r.problem(
            f"{k}.kind",
            j.kind,
            f"operators.{needs} is turned off, and nothing else in the stack runs a {j.kind}",
            f"turn operators.{needs} back on, or remove the job",
        )
