"""The stacks: one composition per target, each read like the architecture diagram
(docs/architecture.md), the planes beneath (planes/). `build_stack` picks the target the config
names: a cluster the stack creates (created.py), or one it attaches to (attached.py). Each receives
the world outside the program (account_checks.world): the real one, or the offline plan's."""

from __future__ import annotations

from account_checks.world import World
from config import load_config
from stack_outputs import StackOutputs
from stacks.attached import attached_stack
from stacks.created import created_stack


def build_stack(world: World) -> StackOutputs:
    """The running stack's config, read and checked, composed for its target in `world`."""
    cfg = load_config(world.strict)
    return attached_stack(cfg, world) if cfg.existing_cluster.named else created_stack(cfg, world)
