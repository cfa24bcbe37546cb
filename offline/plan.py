"""The offline plan: run the stack's unchanged program under Pulumi's mock engine.

    python -m offline.plan [--stack dev] [--stack-file FILE] [--out build/plan]
                           [--account-fact KEY=VALUE ...] [--account-facts FILE]

Reads `Pulumi.<stack>.yaml` (or --stack-file, planned as the stack its name says: `Pulumi.<stack>.yaml`,
or its stem), needs no credentials, network or Pulumi CLI, and writes
`<out>/<stack>/resources.json` and `<out>/<stack>/manifests/`. The account it plans against
passes every check; account facts change its answers (offline/simulated_account.py lists them). Exit 0 on
success; 2 when the config is invalid, an account check fails or a job can never start (the
scheduling check, offline/scheduling.py: the message names each problem and its fix, or the job and
the first broken link); 1 when the stack file is missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pulumi
import yaml

from components.kind_image import architecture_problem
from config import PROJECT_ROOT, parse_config, template_values
from config.job_inputs import auto_resume_warnings, gated_model_warnings, mount_warnings
from domain.catalog import image_compressed_gb, image_pull_minutes
from domain.node_health import MAX_FAILING_SHARE
from offline.cost import hourly_cost, job_cost, total, unknown_items
from offline.engine import PlanRun, Registration, close_event_loops, run_program
from offline.first_up import image_sizes, preparations, waits_for_data
from offline.placeholders import placeholder_secrets
from offline.scheduling import Report, check
from offline.simulated_account import FactError, parse_facts, read_facts_file
from offline.stack_file import StackFileError, read_stack_file
from offline.timeline import critical_path, describe, job_start_minutes, until_training
from offline.training_lines import dataset_lines, training_model_lines
from planes.health import burn_in_by_group, gated_groups
from planes.storage import checkpoints_die_with_pods
from stack_outputs import StackOutputs

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE_DIRECTORY = "kubernetes:kustomize/v2:Directory"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"


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
    if reg.type == CONFIG_GROUP:
        # Fetched and applied by the provider at `pulumi up`: the plan shows the pinned files.
        return f"configgroup-{reg.name}.yaml", {"configGroup": reg.name, "files": reg.inputs.get("files", [])}
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
    # Resources register concurrently, so their order (and the order of keys resolved from outputs)
    # varies between runs: sorted, the same config writes the same bytes, and a diff of two plans
    # shows only what changed.
    registered = sorted(run.resources, key=lambda r: r.urn)
    resources = [{**r.as_json(), "dependencies": sorted(r.dependencies)} for r in registered]
    (out_dir / "resources.json").write_text(json.dumps(resources, indent=2, sort_keys=True) + "\n")
    (out_dir / "outputs.json").write_text(
        json.dumps(run.outputs, indent=2, sort_keys=True, default=str) + "\n"
    )
    count = 0
    for reg in registered:
        found = manifest_of(reg)
        if found:
            name, body = found
            (manifests / name).write_text(yaml.safe_dump(body, sort_keys=True))
            count += 1
    return count


def cost_lines(cfg) -> list[str]:
    if cfg.existing_cluster.named:
        where = "the kind cluster" if cfg.image.builder == "kind" else "the cluster"
        aws = (
            "no AWS at all" if not cfg.existing_cluster.uses_aws else "only its bucket and registry (storage)"
        )
        return [
            f"Estimated cost while idle: nothing hourly; {where} and its nodes are its owner's, the stack adds {aws}."
        ]
    cost = hourly_cost(cfg, datetime.date.today())
    lines = ["Estimated cost while idle, no job admitted (us-east-1 on-demand):"]
    for c in cost:
        lines.append(f"  {c.quantity:3d} x {c.item:55s} {c.unit}")
    unknown = unknown_items(cost)
    excludes = f", without {', '.join(unknown)}: price unknown" if unknown else ""
    lines.append(
        f"  idle total: ${total(cost):.2f}/hour (${total(cost) * 24 * 30:,.0f} per 30 days{excludes})"
    )
    return lines


def health_lines(cfg) -> list[str]:
    """Each GPU group's health gate: what a new node goes through before it trains, what that
    takes and costs, or that its nodes are only watched."""
    burn_in = burn_in_by_group(cfg)
    groups = gated_groups(cfg)
    if not groups:
        return []
    pull = image_pull_minutes(image_compressed_gb(cfg.image.base_image))
    by_name = {g.name: g for g in cfg.gpu_node_groups}
    lines = ["Node health gate (gpuNodeGroups[].health):"]
    for g in groups:
        if g.mode != "burnIn":
            lines.append(
                f"  {g.name}: watched (passive): a node whose GPUs the node monitoring agent finds faulty is "
                "tainted at once and its jobs restart on other nodes; no burn-in"
            )
            continue
        settings = g.settings()
        minutes = burn_in[g.name] + pull
        steps = ["GPU inventory and Xids"] + ([f"EFA x{settings['efa']}"] if settings["efa"] else [])
        steps += ["NVLink"] if settings["nvlink"] else []
        published = settings["publishedBusGbps"]
        floor = (
            f"all-reduce at least {g.floor_fraction:g} x the published {published:g} GB/s until 3 nodes calibrate it"
            if published
            else "all-reduce recorded, its floor calibrated from the group's first 3 healthy nodes"
        )
        price = by_name[g.name].hourly_usd
        cost = f", ~${price * minutes / 60:.2f} a node" if price else ""
        pair = "; with a fresh partner, a two-node all-reduce over EFA" if g.efa and g.nodes >= 2 else ""
        lines.append(
            f"  {g.name}: each new node is burnt in for ~{minutes:.1f} min (image pull included{cost}) before it "
            f"trains: {', '.join(steps)}, DCGM level {g.dcgm_level}, {floor}{pair}; a node that fails is tainted and "
            f"its Auto Scaling group replaces it (at most {max(1, int(g.nodes * MAX_FAILING_SHARE))} of "
            f"{g.nodes} at once)"
        )
    return lines


def summary(
    run: PlanRun,
    cfg,
    manifest_count: int,
    out_dir: Path,
    scheduling: Report | None = None,
    stand_ins: list | None = None,
    details: bool = True,
) -> str:
    """The plan as printed, the answer first: each job's fit, time and cost, what a live run stops
    on or warns of, the idle cost, the first `up`, the account's answers and the scheduling; then the
    resource tree and the count by type (`details`; else a line saying where they are).
    `stand_ins`: the stack file's placeholder secrets (offline/placeholders.py)."""
    lines = [f"Offline plan of stack '{run.stack}': {len(run.resources)} resources"]
    image_gb, data = image_sizes(run, cfg), waits_for_data(cfg)
    lines += job_lines(run, cfg, image_gb, data)
    if cfg.datasets:
        lines += ["", *dataset_lines(cfg)]
    # What a live run finds missing, or stops on, that the plan cannot check or only warns of.
    warnings = mount_warnings(cfg.jobs, cfg.datasets) + gated_model_warnings(
        cfg.jobs, cfg.hf_token is not None
    )
    warnings += auto_resume_warnings(cfg.jobs, cfg.gpu_node_groups)
    arch = architecture_problem(platform.machine()) if cfg.image.builder == "kind" else None
    warnings += [f"WARNING: {arch} (`pulumi up` stops here)"] if arch else []
    if warnings:
        lines += ["", *warnings]
    lost = [j.name for j in cfg.jobs if checkpoints_die_with_pods(cfg, j)]
    if lost:
        lines += ["", *checkpoint_warnings(cfg, lost)]
    placeholders = [*template_values(cfg), *(stand_ins or [])]
    if placeholders:
        lines += [
            "",
            f"Template values: a live `pulumi up` of '{run.stack}' refuses them until they are replaced:",
        ]
        lines += [f"  - {p}" for p in placeholders]
    lines += ["", *cost_lines(cfg)]
    gate = health_lines(cfg)
    if gate:
        lines += ["", *gate]
    # A kind image is loaded onto the nodes, never pulled.
    chain = critical_path(
        run.resources, until_training(run.resources), image_gb, preparations(cfg), burn_in_by_group(cfg)
    )
    lines += ["", *describe(chain)]
    checks = [m for m in run.messages if m.startswith("Account checks")]
    if not checks and not cfg.existing_cluster.uses_aws:
        checks = ["Account checks: none; a kubeconfig stack uses no AWS account."]
    checks += [
        m
        for m in run.messages
        if m.startswith(("Cluster operators", "CI access", "Node drivers", "Node health"))
    ]
    if checks:
        lines += ["", *checks]
    if scheduling is not None:
        lines += ["", *scheduling.lines()]
    if cfg.docker_hub_access_token is None and cfg.image.builder in ("codebuild", "docker"):
        lines += [
            "",
            f"Note: the base image {cfg.image.base_image} is pulled from Docker Hub anonymously "
            "(rate-limited per IP); set image.dockerHubUsername and the secret dockerHubAccessToken "
            "to pull it through an ECR cache.",
        ]
    if details:
        lines += ["", *resource_lines(run)]
    else:
        lines += ["", "The resource tree and the count by type: --details (make plan PLAN_ARGS=--details)."]
    lines += ["", f"Wrote {out_dir}/resources.json and {manifest_count} manifest(s) in {out_dir}/manifests/"]
    return "\n".join(lines)


def job_lines(run: PlanRun, cfg, image_gb, data) -> list[str]:
    """Each job: its kind, nodes, queue, what it adds to the bill and when it trains, then its
    modeled fit, checkpoints, step, faults and run (offline/training_lines.py)."""
    outputs = cast(StackOutputs, run.outputs)  # what the program exported, as `trainstack` reads it
    jobs = outputs.get("jobs") or {}
    if not jobs:
        return []
    gpus = outputs.get("gpusTotal", 0)
    lines = [
        "",
        f"Jobs ({gpus} GPUs at the GPU node groups' maximum size):"
        if gpus
        else "Jobs (on CPU nodes, no GPUs):",
    ]
    starts = job_start_minutes(run.resources, image_gb, cfg.training_namespace, data, burn_in_by_group(cfg))
    configured = {j.name: j for j in cfg.jobs}
    for name, job in jobs.items():
        start = starts.get(name)
        # From the config, not the summary's hourlyUsd (every node of the job): a node the idle
        # total already counts is not counted again.
        adds = job_cost(cfg, configured[name]).describe()
        lines.append(
            f"  {name:30s} {job['kind']:10s} {job['nodes']} node(s) of {job['nodeGroup']} "
            f"(queue {job['queue']}), {job['gpus']} GPUs, {adds}"
            + (f", trains ~{start.total:.1f} min after admission ({start.describe()})" if start else "")
        )
        model = training_model_lines(cfg, name, start.after_admission if start else 0.0)
        lines += [f"      {line}" for line in model]
    return lines


def resource_lines(run: PlanRun) -> list[str]:
    """The resource tree, each resource under its parent, and the count of each type."""
    lines = ["Resource tree:"]
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
    return lines


def checkpoint_warnings(cfg, jobs: list[str]) -> list[str]:
    """Jobs that keep checkpoints only in their pods' emptyDir: a relaunch, a lost node or the end of
    the job takes them."""
    keep = (
        "existingCluster.checkpointClaim (a ReadWriteMany claim such as FSx)"
        if cfg.existing_cluster.named
        else "storage.fsx for the job's node group"
    )
    lines = []
    for name in jobs:
        lines.append(
            f"WARNING: job {name}: its checkpoints in /checkpoints are on an emptyDir with no S3 copy "
            f"(only the default trainer uploads them), and are lost with its pods; keep them on {keep}"
        )
    return lines


def named_cluster_fact(cfg, facts: dict) -> dict:
    """The offline account holds the EKS cluster a stack names (1.36, three AZs), and the HyperPod
    cluster it names by its own name (orchestrated by `<name>-eks`, an instance group per GPU node
    group, with both deep health checks), unless a fact says otherwise: planning an existing-cluster stack needs no fact of its own."""
    name = cfg.existing_cluster.eks_cluster_name
    hyperpod = cfg.existing_cluster.hyper_pod_cluster_name
    if hyperpod is not None:
        key = f"hyperpod-cluster:{hyperpod}"
        groups = {g.name: g.instance_type for g in cfg.gpu_node_groups}
        # Its GPU groups run both deep health checks, as a cluster set up for training does.
        deep = {g.name: ["InstanceStress", "InstanceConnectivity"] for g in cfg.gpu_node_groups if g.gpu}
        facts = {
            key: {"eksCluster": f"{hyperpod}-eks", "instanceGroups": groups, "deepHealthChecks": deep},
            **facts,
        }
        name = facts[key]["eksCluster"]
    key = f"eks-cluster:{name}"
    if name is None or key in facts:
        return facts
    zones = [f"{cfg.region}{c}" for c in "abc"]
    return {**facts, key: {"version": "1.36", "zones": zones}}


DEFAULT_STACK = "dev"
STACK_FILE_NAME = re.compile(r"Pulumi\.(?P<stack>.+)\.ya?ml")


def stack_name(given: str | None, stack_file: Path | None) -> tuple[str, str | None]:
    """The stack to plan: --stack, else the one a `Pulumi.<stack>.yaml` file name says (the Pulumi
    CLI's name for stack <stack>'s file), else the file's stem (examples/llama-c4.yaml: llama-c4),
    so a plan never lands in another stack's output directory; without a file, dev. The note says
    which stack was taken where the file's name does not say it plainly."""
    if stack_file is None:
        return given or DEFAULT_STACK, None
    named = STACK_FILE_NAME.fullmatch(stack_file.name)
    from_file = named.group("stack") if named else None
    if given is not None:
        if from_file is not None and from_file != given:
            return given, f"planning {stack_file} as stack '{given}' (--stack)"
        return given, None
    if from_file is not None:
        return from_file, None
    stem = stack_file.name.removesuffix(".yaml").removesuffix(".yml")
    return stem, f"planning {stack_file} as stack '{stem}', its name; pass --stack NAME to plan it as another"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--stack",
        help=f"the stack to plan (default: the one --stack-file's name says, else {DEFAULT_STACK})",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=PROJECT_ROOT / "build" / "plan",
        help="directory the plan writes <stack>/ under (default: build/plan)",
    )
    parser.add_argument("--stack-file", type=Path, help="config to plan with (default: Pulumi.<stack>.yaml)")
    parser.add_argument(
        "--account-fact",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="what the offline account answers instead, e.g. quota:L-DB2E81BA=0 (repeatable)",
    )
    parser.add_argument("--account-facts", type=Path, metavar="FILE", help="a YAML map of account facts")
    parser.add_argument(
        "--details", action="store_true", help="also print the resource tree and the count of each type"
    )
    args = parser.parse_args(argv)
    try:
        facts = read_facts_file(args.account_facts) if args.account_facts else {}
        facts |= parse_facts(args.account_fact)
    except FactError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    args.stack, note = stack_name(args.stack, args.stack_file)
    if note:
        print(f"note: {note}", file=sys.stderr)
    stack_file = args.stack_file or PROJECT_ROOT / f"Pulumi.{args.stack}.yaml"
    # Errors name the file the user gave; the default is the stack's own Pulumi.<stack>.yaml.
    named_file = str(args.stack_file) if args.stack_file else None
    if not stack_file.is_file():
        print(
            f"error: no stack file {stack_file}; create it or pick a stack with STACK=<name>",
            file=sys.stderr,
        )
        return 1
    try:
        values, secret_keys = read_stack_file(stack_file)
    except StackFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        cfg = parse_config(args.stack, values, frozenset(secret_keys), stack_file=named_file)
        facts = named_cluster_fact(cfg, facts)
        run = run_program(args.stack, values, secret_keys, facts=facts)
    except pulumi.RunError as err:  # ConfigError, or a fact of the account (an AZ, say)
        print(f"error: {err}", file=sys.stderr)
        return 2
    finally:
        close_event_loops()
    scheduling = check(run, cfg)
    if scheduling.never_start or scheduling.daemonset_problems:
        # A job that can never start, or a node a DaemonSet the stack relies on (device plugins,
        # DCGM, CSI nodes) never reaches, is a config error: nothing is written, as for any other.
        for chain in scheduling.never_start:
            print(f"error: job {chain.job} can never start: {chain.broken}", file=sys.stderr)
        for problem in scheduling.daemonset_problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    out_dir = args.out / args.stack
    count = write_plan(run, out_dir)
    print(
        summary(run, cfg, count, out_dir, scheduling, placeholder_secrets(stack_file), details=args.details)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
