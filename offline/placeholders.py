"""Secrets a template stack file carries as stand-ins: the examples and templates ship a `secure:`
value that is not Pulumi ciphertext (`v1:ReplaceMe:...`), so they plan offline; a live `pulumi up`
cannot decrypt it. The plan lists them with the other template values, each with the command that
writes a real one."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from config.names import PROJECT
from config.schema import Problem

# What the Pulumi CLI writes: `v1:<nonce>:<ciphertext>`, both base64.
_CIPHERTEXT = re.compile(r"v1:[A-Za-z0-9+/]+=*:[A-Za-z0-9+/]+=*")


def placeholder_secrets(stack_file: Path) -> list[Problem]:
    """Top-level `secure:` values of the stack file that are not ciphertext."""
    config = (yaml.safe_load(stack_file.read_text()) or {}).get("config") or {}
    found = []
    for key, value in config.items():
        secure = value.get("secure") if isinstance(value, dict) and set(value) == {"secure"} else None
        if isinstance(secure, str) and not _CIPHERTEXT.fullmatch(secure):
            full = key if ":" in key else f"{PROJECT}:{key}"
            name = full.partition(":")[2]
            found.append(
                Problem(
                    full,
                    "(placeholder)",
                    "a stand-in, not ciphertext of this stack's secrets provider: `pulumi up` cannot decrypt it",
                    f"pulumi config set --secret {name} <value>",
                )
            )
    return found
