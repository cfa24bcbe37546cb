"""`trainstack doctor`'s driver check: each GPU group's nodes against the NVIDIA driver the
training image needs (the stack's `driverNeeded` output, domain/drivers.py), read from GPU
feature discovery's label (conventions.driver_major). A node on an older driver fails (its containers cannot start); a node
without the label passes, named as unchecked."""

from __future__ import annotations

from cli.analysis.view import ClusterView, Finding
from conventions import DRIVER_MAJOR_LABELS, NODE_GROUP_LABEL, driver_major


def check_drivers(view: ClusterView) -> list[Finding]:
    needed = view.driver_needed
    if not needed:
        return []
    found = []
    for name, facts in view.gpu_groups.items():
        selector = facts.get("nodeSelector") or {NODE_GROUP_LABEL: name}
        mine = [n for n in view.nodes if selector.items() <= n.get("metadata", {}).get("labels", {}).items()]
        if not mine:
            continue
        majors = {n["metadata"]["name"]: driver_major(n["metadata"].get("labels", {})) for n in mine}
        old = sorted(f"{node} (R{d})" for node, d in majors.items() if d is not None and d < needed)
        unknown = sorted(node for node, d in majors.items() if d is None)
        detail = f"{len(mine) - len(old) - len(unknown)}/{len(mine)} node(s) on R{needed} or newer"
        if old:
            detail += f"; older: {', '.join(old)}"
        if unknown:
            detail += (
                f"; not labelled ({DRIVER_MAJOR_LABELS[0]}, GPU feature discovery): {', '.join(unknown)}"
            )
        found.append(
            Finding(
                f"NVIDIA driver on {name}",
                not old,
                detail,
                f"the training image needs R{needed}: move the group to an AMI with it (the EKS AL2023 "
                "NVIDIA AMIs since late 2025) or drain and replace those nodes"
                if old
                else "",
            )
        )
    return found
