"""trainstack: one `pulumi up` from an empty AWS account to GPU training on EKS."""

import pulumi

from account_checks.world import real_world
from stacks import build_stack

# `pulumi up` meets the real world; the offline plan runs this file in its own (offline/engine/runner.py).
world = globals().get("WORLD") or real_world()
for name, value in build_stack(world).items():
    pulumi.export(name, value)
