"""The NVIDIA driver on the GPU nodes of a cluster the stack did not create, read before anything
is registered on it: a node whose driver is older than the training image's CUDA needs stops the
program with a sentence (its containers would never start); a node GPU feature discovery has not
labelled is named in the report, unchecked. Nodes an autoscaler has yet to add are not there to
read. The driver each image needs, and how a node says which one it has: domain/drivers.py.
"""

from __future__ import annotations

from typing import Any

import pulumi

from account_checks.operator_decisions import group_labels, group_members
from config import StackConfig
from conventions import driver_major
from domain.drivers import driver_problem, least_driver


class NodeDriverError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': GPU nodes whose NVIDIA driver the training image cannot use:\n{lines}"
        )


def check_drivers(cfg: StackConfig, nodes: list[dict[str, Any]]) -> list[str]:
    """The report's lines per GPU group; raises NodeDriverError where a node's driver is too old."""
    image = cfg.image.base_image.partition("@")[0]
    needed = least_driver(cfg.image.base_image)
    if needed is None:
        return [f"Node drivers: not checked: no driver table for the base image {image}"]
    lines, problems = [f"Node drivers (the training image on {image} needs R{needed} or newer):"], []
    for group, labels in group_labels(cfg).items():
        members = group_members(nodes, labels)
        found = sorted({d for n in members if (d := driver_major(n["labels"])) is not None})
        unknown = [n["name"] for n in members if driver_major(n["labels"]) is None]
        problems += [p for n in members if (p := driver_problem(n["name"], n["labels"], needed, image))]
        seen = ", ".join(f"R{d}" for d in found) or "none labelled"
        lines.append(
            f"  {group}: {len(members)} node(s) now, drivers {seen}"
            + (
                f"; not checked on {', '.join(unknown)}: no GPU feature discovery label "
                "(nvidia.com/cuda.driver-version.major)"
                if unknown
                else ""
            )
        )
    pulumi.log.info("\n".join(lines))
    if problems:
        raise NodeDriverError(cfg.stack, problems)
    return lines
