"""The offline plan: run the stack's unchanged program under Pulumi's mock engine.

    python -m offline.plan [--stack dev] [--out build/plan]

Reads `Pulumi.<stack>.yaml`, needs no credentials, network or Pulumi CLI, and writes
`<out>/<stack>/resources.json` and `<out>/<stack>/manifests/`. Exit 0 on success; 2 when the
config is invalid (the message names each bad key); 1 when the stack file is missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from offline.engine import SECRET_MASK, PlanRun, Registration, run_program
from offline.timeline import critical_path, describe, until_training
from stacks.config import PROJECT, PROJECT_ROOT, parse_config, template_values
from stacks.cost import hourly_cost, total
from stacks.schema import ConfigError

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE_DIRECTORY = "kubernetes:kustomize/v2:Directory"


def read_stack_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """Flatten a Pulumi.<stack>.yaml `config:` block the way the Pulumi CLI hands it to a program."""
    data = yaml.safe_load(path.read_text()) or {}
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in (data.get("config") or {}).items():
        full_key = key if ":" in key else f"{PROJECT}:{key}"
        if _has_secure(value):
            secret_keys.append(full_key)
            value = _mask_secure(value)
        if isinstance(value, (dict, list)):
            values[full_key] = json.dumps(value)
        elif isinstance(value, bool):
            values[full_key] = "true" if value else "false"
        else:
            values[full_key] = str(value)
    return values, secret_keys


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    return isinstance(value, list) and any(_has_secure(v) for v in value)


def _mask_secure(value: Any) -> Any:
    # Ciphertext needs the stack's secrets provider; the plan only needs a stand-in.
    if isinstance(value, dict):
        return SECRET_MASK if set(value) == {"secure"} else {k: _mask_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_secure(v) for v in value]
    return value


def manifest_of(reg: Registration) -> tuple[str, dict[str, Any]] | None:
    """The object a Kubernetes resource sends to the cluster, with a file name for it."""
    if reg.type == KUSTOMIZE_DIRECTORY:
        # Rendered by the provider from upstream at `pulumi up`: the plan shows its pinned source.
        url = reg.inputs.get("directory", "")
        location, _, ref = url.partition("?ref=")
        repository, _, path = location.rpartition("//")
        return f"kustomize-{reg.name}.yaml", {
            "kustomizeDirectory": reg.name,
            "url": url,
            "repository": repository,
            "path": path,
            "commit": ref,
        }
    if not reg.custom or not reg.type.startswith("kubernetes:"):
        return None
    if reg.type == HELM_RELEASE:
        i = reg.inputs
        release = {
            "helmRelease": i.get("name", reg.name),
            "namespace": i.get("namespace"),
            "chart": i.get("chart"),
            "repository": (i.get("repositoryOpts") or {}).get("repo"),
            "version": i.get("version"),
            "values": i.get("values", {}),
        }
        return f"helm-{release['helmRelease']}.yaml", release
    first = ("apiVersion", "kind", "metadata")
    body = {k: reg.inputs[k] for k in first if k in reg.inputs}
    body.update({k: v for k, v in reg.inputs.items() if k not in first and k != "__defaults"})
    meta = body.get("metadata") or {}
    parts = [body.get("kind", reg.type.rsplit(":", 1)[-1]), meta.get("namespace"), meta.get("name", reg.name)]
    return "-".join(str(p).lower() for p in parts if p) + ".yaml", body


def write_plan(run: PlanRun, out_dir: Path) -> int:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    manifests = out_dir / "manifests"
    manifests.mkdir(parents=True)
    (out_dir / "resources.json").write_text(json.dumps([r.as_json() for r in run.resources], indent=2) + "\n")
    (out_dir / "outputs.json").write_text(json.dumps(run.outputs, indent=2, default=str) + "\n")
    count = 0
    for reg in run.resources:
        found = manifest_of(reg)
        if found:
            name, body = found
            (manifests / name).write_text(yaml.safe_dump(body, sort_keys=False))
            count += 1
    return count


def summary(run: PlanRun, cfg, manifest_count: int, out_dir: Path) -> str:
    lines = [f"Offline plan of stack '{run.stack}': {len(run.resources)} resources", "", "Resource tree:"]
    children: dict[str | None, list[Registration]] = {}
    for reg in run.resources:
        children.setdefault(reg.parent, []).append(reg)

    def walk(parent: str | None, depth: int) -> None:
        for reg in children.get(parent, []):
            lines.append(f"{'  ' * (depth + 1)}{reg.type}  {reg.name}")
            walk(reg.urn, depth + 1)

    walk(None, 0)
    lines += ["", "Resources by type:"]
    for type_, n in sorted(Counter(r.type for r in run.resources).items()):
        lines.append(f"  {n:4d}  {type_}")
    lines += ["", *describe(critical_path(run.resources, until_training(run.resources)))]
    cost = hourly_cost(cfg)
    lines += ["", "Estimated cost while the stack runs (us-east-1 on-demand):"]
    for c in cost:
        unit = "bought as a Capacity Block" if c.unit_usd is None else f"${c.unit_usd:.4f}/h"
        lines.append(f"  {c.quantity:3d} x {c.item:55s} {unit}")
    lines.append(f"  total: ${total(cost):.2f}/hour (${total(cost) * 24 * 30:,.0f} per 30 days)")
    jobs = run.outputs.get("jobs") or {}
    if jobs:
        lines += ["", f"Jobs ({run.outputs.get('gpusTotal', 0)} GPUs in the stack's GPU node groups):"]
        for name, job in jobs.items():
            lines.append(
                f"  {name:30s} {job['kind']:10s} {job['nodes']} node(s) of {job['nodeGroup']}, "
                f"{job['gpus']} GPUs, ${job['hourlyUsd']:.2f}/h of the total while it runs"
            )
    if cfg.docker_hub_access_token is None:
        lines += [
            "",
            f"Note: the base image {cfg.image.base_image} is pulled from Docker Hub anonymously "
            "(rate-limited per IP); set image.dockerHubUsername and the secret dockerHubAccessToken "
            "to pull it through an ECR cache.",
        ]
    placeholders = template_values(cfg)
    if placeholders:
        lines += [
            "",
            f"Template values: a live `pulumi up` of '{run.stack}' refuses them until they are replaced:",
        ]
        lines += [f"  - {p}" for p in placeholders]
    lines += ["", f"Wrote {out_dir}/resources.json and {manifest_count} manifest(s) in {out_dir}/manifests/"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "build" / "plan")
    parser.add_argument("--stack-file", type=Path, help="config to plan with (default: Pulumi.<stack>.yaml)")
    args = parser.parse_args(argv)

    stack_file = args.stack_file or PROJECT_ROOT / f"Pulumi.{args.stack}.yaml"
    if not stack_file.is_file():
        print(
            f"error: no stack file {stack_file}; create it or pick a stack with STACK=<name>",
            file=sys.stderr,
        )
        return 1
    values, secret_keys = read_stack_file(stack_file)
    try:
        cfg = parse_config(args.stack, values, frozenset(secret_keys))
        run = run_program(args.stack, values, secret_keys)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out_dir = args.out / args.stack
    count = write_plan(run, out_dir)
    print(summary(run, cfg, count, out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
