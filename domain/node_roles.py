"""How the pods of a node group the stack creates find its nodes: the role label (gpu, or cpu for a
`gpu: false` group) and the group's name. The node group's labels, its queue's flavor and the job
manifests all take this one selector. The role keeps a Ray head (role system) from ever being
given a group's flavor."""

from __future__ import annotations

from conventions import GPU_NODE_LABEL, NODE_GROUP_LABEL, ROLE_LABEL

CPU_NODE_LABEL = {ROLE_LABEL: "cpu"}


def group_selector(group: str, gpu: bool) -> dict[str, str]:
    return {**(GPU_NODE_LABEL if gpu else CPU_NODE_LABEL), NODE_GROUP_LABEL: group}
