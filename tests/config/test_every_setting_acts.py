"""Every config setting reaches what it configures: set alone to another value on a template or
example that uses it, it changes the plan's resources or manifests; where it acts somewhere they do
not show (a secret's value, a config check, its one allowed value), the table names where. A
setting dropped on the way from the config to its component fails here."""

from __future__ import annotations

import functools
import json
import re
from typing import Any

import pytest
from support.paths import ROOT
from support.setting_values import ACTS_ELSEWHERE, CHANGES, TABLE

from config import SECRET_KEYS, parse_config
from config.reference import reference_rows
from offline.engine import close_event_loops, run_program
from offline.plan import named_cluster_fact
from offline.stack_file import read_stack_file

# One worker runs the module: 155 settings change 28 distinct base plans, each planned once there
# (`_plan` is cached per process) instead of once on each worker.
pytestmark = pytest.mark.xdist_group("every-setting")

LEAVES = sorted(key for key, kind, _, _ in reference_rows() if kind not in ("object", "list of objects"))


def _tokens(path: str) -> list[str | int]:
    """`jobs[0].hyperpod.maxRetries` -> ["trainstack:jobs", 0, "hyperpod", "maxRetries"]."""
    parts: list[str | int] = [
        int(t[1:-1]) if t.startswith("[") else t for t in re.findall(r"\[\d+\]|[^.\[\]]+", path)
    ]
    top = str(parts[0])
    parts[0] = top if ":" in top else f"trainstack:{top}"
    return parts


def _with(values: dict[str, str], path: str, value: Any) -> dict[str, str]:
    """The stack's values with one setting set (None: unset), as the Pulumi CLI would hand them over."""
    top, *inner = _tokens(path)
    values = dict(values)
    if not inner:
        if value is None:
            values.pop(top, None)
        else:
            values[top] = value if isinstance(value, str) else json.dumps(value)
        return values
    whole = json.loads(values[top]) if top in values else ({} if isinstance(inner[0], str) else [])
    node = whole
    for token in inner[:-1]:
        node = node.setdefault(token, {}) if isinstance(token, str) else node[token]
    last = inner[-1]
    if value is None:
        node.pop(last, None)
    elif isinstance(last, int) and last == len(node):
        node.append(value)
    else:
        node[last] = value
    values[top] = json.dumps(whole)
    return values


def _apply(values: dict[str, str], settings: dict[str, Any]) -> dict[str, str]:
    for path, value in settings.items():
        values = _with(values, path, value)
    return values


@functools.cache
def _plan(stack_file: str, frozen_values: str, secret_jobs: bool, frozen_facts: str) -> str:
    """The plan's resources and manifests (every registration's inputs and options), as one string."""
    name = stack_file.rsplit("/", 1)[-1].removeprefix("Pulumi.").removesuffix(".yaml")
    values = json.loads(frozen_values)
    _, secret_keys = read_stack_file(ROOT / stack_file)
    # Set as `pulumi config set --secret` would set them.
    secret_keys = sorted({*secret_keys, *(k for k in SECRET_KEYS if k in values)})
    if secret_jobs:
        secret_keys = sorted({*secret_keys, "trainstack:jobs"})
    try:
        cfg = parse_config(name, values, frozenset(secret_keys))
        run = run_program(name, values, secret_keys, facts=named_cluster_fact(cfg, json.loads(frozen_facts)))
    finally:
        close_event_loops()
    registered = sorted((r.as_json() for r in run.resources), key=lambda r: r["urn"])
    return json.dumps(registered, sort_keys=True, default=str)


def test_every_setting_is_either_changed_in_a_plan_or_named_where_it_acts():
    assert len(CHANGES) == len(TABLE)  # one change per setting
    assert sorted({*CHANGES, *ACTS_ELSEWHERE}) == LEAVES
    assert not set(CHANGES) & set(ACTS_ELSEWHERE)


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_the_setting_changes_the_plan(key):
    change = CHANGES[key]
    values, _ = read_stack_file(ROOT / change.stack_file)
    base = _apply(values, change.base)
    changed = _apply(_with(base, change.path, change.value), change.also)
    assert changed != base, f"{key}: {change.path} is already {change.value!r} in {change.stack_file}"
    facts = json.dumps(change.facts, sort_keys=True)
    before = _plan(change.stack_file, json.dumps(base, sort_keys=True), change.secret_jobs, facts)
    after = _plan(change.stack_file, json.dumps(changed, sort_keys=True), change.secret_jobs, facts)
    assert after != before, f"{key} = {change.value!r} on {change.stack_file} leaves the plan unchanged"
