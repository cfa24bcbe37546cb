"""trainstack: one `pulumi up` from an empty AWS account to GPU training on EKS."""

import pulumi

from config import load_config
from stacks import build_stack

config = load_config()
for name, value in build_stack(config).items():
    pulumi.export(name, value)
