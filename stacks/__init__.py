"""The stacks: one composition per target, each read like the architecture diagram
(docs/architecture.md), the planes beneath (planes/). `build_stack` picks the target the config
names: a cluster the stack creates (created.py), or one it attaches to (attached.py)."""

from __future__ import annotations

from config import StackConfig
from stack_outputs import StackOutputs
from stacks.attached import attached_stack
from stacks.created import created_stack


def build_stack(cfg: StackConfig) -> StackOutputs:
    return attached_stack(cfg) if cfg.existing_cluster.named else created_stack(cfg)
