"""Names every plane's config module shares: the project, its config keys and the name rules."""

from __future__ import annotations

import re
from pathlib import Path

from domain.names import PROJECT  # the config's key namespace, re-exported to every plane's module

__all__ = [
    "LABEL",
    "NAME_RULE",
    "PROFILE_KEY",
    "PROJECT",
    "PROJECT_ROOT",
    "REGION_KEY",
    "STACK_NAME",
    "STACK_NAME_RULE",
]

PROJECT_ROOT = Path(__file__).resolve().parent.parent
REGION_KEY = "aws:region"
PROFILE_KEY = "aws:profile"

# Kubernetes DNS-1123 labels; node groups are also part of AWS names, so they get a tighter bound.
# Whole-string patterns over ASCII classes only (always used with fullmatch): `$` would accept a
# trailing newline, and `\d`/`\w` non-ASCII digits and letters.
LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
NAME_RULE = "lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"

# Pulumi allows more in a stack name; AWS names built from it allow less: ECR repositories and
# pull-through prefixes are lowercase, EKS cluster names take no '.'.
STACK_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
STACK_NAME_RULE = "lowercase letters, digits and '-', starting and ending with a letter or digit"
