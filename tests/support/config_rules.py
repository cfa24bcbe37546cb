"""A config refused, as the tests of its rules read it: the list of problems, each naming its key."""

from __future__ import annotations

import json

import pytest

from config import parse_config
from config.schema import ConfigError
from support.plans import plan

BASE = {"aws:region": "us-east-1"}


def problems(**overrides) -> list[str]:
    """The problems `parse_config` finds in a dev stack of BASE and the `trainstack:<key>` overrides."""
    values = dict(BASE)
    for key, value in overrides.items():
        full = key if ":" in key else f"trainstack:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    with pytest.raises(ConfigError) as err:
        parse_config("dev", values)
    return [str(p) for p in err.value.problems]


def config_problems(**overrides) -> list[str]:
    """The problems the program finds in the dev template with the overrides, before any resource."""
    with pytest.raises(ConfigError) as err:
        plan("dev", **overrides)
    return [str(p) for p in err.value.problems]


def group(**fields) -> dict:
    return {"name": "gpu", "instanceType": "g6.xlarge", **fields}


def job(**fields) -> dict:
    return {"name": "train", "kind": "PyTorchJob", "nodeGroup": "gpu", **fields}
