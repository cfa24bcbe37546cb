"""The stacks: one composition per target, each read like the architecture diagram
(docs/architecture.md), the planes beneath (planes/). `build_stack` picks the target the config
names: a cluster the stack creates (created.py), or one it attaches to (attached.py). Each receives
the world outside the program (account_checks.world): the real one, or the offline plan's."""

from __future__ import annotations

import gc

from account_checks.world import World
from config import load_config
from stack_outputs import StackOutputs
from stacks.attached import attached_stack
from stacks.created import created_stack


def build_stack(world: World) -> StackOutputs:
    """The running stack's config, read and checked, composed for its target in `world`."""
    cfg = load_config(world.strict)
    return attached_stack(cfg, world) if cfg.existing_cluster.named else created_stack(cfg, world)


def _freeze_what_a_full_collection_kept(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def freeze_what_full_collections_keep() -> None:
    """Python's collector, set for a process that registers a stack: the Pulumi SDK keeps every
    resource's Outputs, futures and tasks alive until the program ends, and their churn starts a
    full collection every few dozen registrations, each walking them all again (about 40% of a
    plan's CPU time). What a full collection kept is moved out of its sight (`gc.freeze`), so the
    next walks only newer objects; garbage frozen in a cycle stays until the process ends, which
    for a program run is soon. Installed once per process, however often the program runs in it."""
    if _freeze_what_a_full_collection_kept not in gc.callbacks:
        gc.callbacks.append(_freeze_what_a_full_collection_kept)
