"""A template's config pointed at the harness's cluster, with its offline plan: the nodes the plan
says the cluster has are the ones the harness makes, so what the real scheduler does can be held
against what the plan says."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from config import parse_config
from offline.engine import PlanRun, run_program
from offline.nodes import Node, plan_nodes
from support.paths import ROOT

# What the stack would build, named instead: the harness has no Docker and no registry, and kwok
# runs no container, so any reference will do as long as the stack sends it unchanged.
PREBUILT_IMAGE = "registry.example.com/trainstack/trainer:prebuilt"


def template_config(template: str) -> dict[str, Any]:
    """Pulumi.<template>.yaml's config as nested values."""
    return dict(yaml.safe_load((ROOT / f"Pulumi.{template}.yaml").read_text())["config"])


def flat(config: dict[str, Any]) -> dict[str, str]:
    """As Pulumi hands config to the program: strings, objects as JSON."""
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}


@dataclass
class PlannedStack:
    name: str
    config: dict[str, Any]
    run: PlanRun
    cfg: Any
    nodes: list[Node]


def planned(
    name: str,
    config: dict[str, Any],
    secret_keys: tuple[str, ...] = (),
    facts: dict[str, Any] | None = None,
) -> PlannedStack:
    values = flat(config)
    cfg = parse_config(name, values, frozenset(secret_keys))
    run = run_program(name, values, list(secret_keys), facts=facts)
    return PlannedStack(name, config, run, cfg, plan_nodes(run, cfg))


def on_cluster(config: dict[str, Any], kubeconfig: Path, context: str) -> dict[str, Any]:
    """An attached-cluster config aimed at the harness: its kubeconfig, a prebuilt image."""
    config = json.loads(json.dumps(config))
    existing = config["trainstack:existingCluster"]
    existing |= {"kubeconfig": str(kubeconfig), "context": context}
    existing.pop("kindClusterName", None)
    config["trainstack:image"] = {**config.get("trainstack:image", {}), "builder": "none"}
    for job in config.get("trainstack:jobs") or []:
        job["image"] = PREBUILT_IMAGE
    return config


@functools.cache
def planned_file(name: str, path: Path) -> PlannedStack:
    """A stack file planned as `make plan` plans it (the account's answers about a named cluster too);
    planned once per session, for the tests that read it (none changes it)."""
    from offline.plan import named_cluster_fact
    from offline.stack_file import read_stack_file

    values, secret_keys = read_stack_file(path)
    cfg = parse_config(name, values, frozenset(secret_keys), stack_file=str(path))
    run = run_program(name, values, secret_keys, facts=named_cluster_fact(cfg, {}))
    return PlannedStack(name, {}, run, cfg, plan_nodes(run, cfg))
