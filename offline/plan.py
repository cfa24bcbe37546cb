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
import dataclasses
import datetime
import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any, cast

import pulumi
import yaml

from config import PROJECT, PROJECT_ROOT, parse_config, template_values
from domain.catalog import image_compressed_gb
from domain.datasets import ASSUMED_TOKENS_PER_SECOND, preparation_minutes, prepared_size_gb
from domain.goodput import ASSUMED_MFU, CheckpointPath, modeled_goodput, step_seconds
from domain.memory_fit import GIB, gpu_memory_bytes, gpu_memory_need
from domain.model_facts import MODEL_SHAPES, peak_bf16_flops
from domain.run_estimate import RunEstimate
from offline.cost import JobCost, hourly_cost, job_cost, total, unknown_items
from offline.engine import SECRET_MASK, PlanRun, Registration, close_event_loops, run_program
from offline.scheduling import Report, check
from offline.simulated_account import FactError, parse_facts, read_facts_file
from offline.timeline import critical_path, describe, job_start_minutes, until_training
from planes.storage import checkpoint_home, checkpoints_die_with_pods
from stack_outputs import StackOutputs

HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE_DIRECTORY = "kubernetes:kustomize/v2:Directory"
CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"


class StackFileError(Exception):
    """A stack file that cannot be read as Pulumi config; the message is one line."""


MAX_DEPTH = 64  # nested lists/maps in one value
MAX_NODES = 100_000  # values after aliases are expanded (an alias bomb stays small on disk)
MAX_INT_DIGITS = 100


MERGE_TAG = "tag:yaml.org,2002:merge"


class _StackFileLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as the Pulumi CLI does: the last one would win.

    Merge keys (`<<: *anchor`) are read as the Pulumi CLI's YAML reader reads them: the anchor's
    keys come in, and the mapping's own keys override them; only its own keys count as duplicates."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key (a list or map): reported by the caller
                continue
            if duplicate:
                mark = key_node.start_mark
                raise StackFileError(
                    f"line {mark.line + 1}, column {mark.column + 1}: duplicate key {key!r} "
                    f"(first at line {seen[key].line + 1}); keep one"
                )
            seen[key] = key_node.start_mark
        try:
            self.flatten_mapping(node)  # resolves `<<`
        except yaml.constructor.ConstructorError as err:
            raise yaml.constructor.ConstructorError(
                None, None, f"the merge key `<<` {err.problem}", err.problem_mark
            ) from None
        return super().construct_mapping(node, deep=deep)


def _load(path: Path) -> Any:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise StackFileError(
            f"not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})"
        ) from None
    try:
        documents = list(yaml.load_all(text, Loader=_StackFileLoader))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise StackFileError(f"{where}{err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise StackFileError(str(err).replace("\n", " ")) from None
    except RecursionError:
        raise StackFileError(f"nested more than YAML can read here; at most {MAX_DEPTH} levels") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4300 digits
        raise StackFileError(
            f"an integer of more than {MAX_INT_DIGITS} digits ({str(err).split(':')[0]})"
        ) from None
    if len(documents) > 1:
        raise StackFileError(f"{len(documents)} YAML documents; a stack file is one (remove the extra '---')")
    return documents[0] if documents else None


def _check_value(value: Any, key: str) -> None:
    """Refuse what Pulumi config cannot hold: cycles (self-referencing anchors), alias bombs,
    very deep nesting, integers too long to be a number anyone meant."""
    nodes = 0
    stack: list[tuple[Any, int, frozenset[int]]] = [(value, 0, frozenset())]
    while stack:
        item, depth, parents = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise StackFileError(f"{key}: expands to more than {MAX_NODES} values (YAML aliases?)")
        if depth > MAX_DEPTH:
            raise StackFileError(f"{key}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, (dict, list)):
            if id(item) in parents:
                raise StackFileError(f"{key}: a YAML anchor refers to itself")
            inner = parents | {id(item)}
            children = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            for child_key, child in children:
                if isinstance(item, dict) and not isinstance(child_key, str):
                    raise StackFileError(f"{key}: key {child_key!r} is not a string; quote it")
                stack.append((child, depth + 1, inner))
        elif (
            isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > MAX_INT_DIGITS * 3.33
        ):
            raise StackFileError(f"{key}: an integer of more than {MAX_INT_DIGITS} digits")
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            raise StackFileError(
                f"{key}: a {type(item).__name__} value ({item!r}); quote it to make it a string"
            )


def read_stack_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """Flatten a Pulumi.<stack>.yaml `config:` block the way the Pulumi CLI hands it to a program.
    Raises StackFileError, with the file and (where YAML gives them) line and column."""
    try:
        data = _load(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise StackFileError(f"the file is a {type(data).__name__}; expected a map with a `config:` key")
        config = data.get("config") or {}
        if not isinstance(config, dict):
            raise StackFileError(f"`config:` is a {type(config).__name__}; expected a map of keys to values")
        values: dict[str, str] = {}
        secret_keys: list[str] = []
        for key, value in config.items():
            if not isinstance(key, str):
                raise StackFileError(
                    f"config key {key!r} is not a string; write keys such as trainstack:jobs"
                )
            full_key = key if ":" in key else f"{PROJECT}:{key}"
            _check_value(value, full_key)
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
    except StackFileError as err:
        raise StackFileError(f"{path}: {err}") from None


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


def summary(run: PlanRun, cfg, manifest_count: int, out_dir: Path, scheduling: Report | None = None) -> str:
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
    checks = [m for m in run.messages if m.startswith("Account checks")]
    if not checks and not cfg.existing_cluster.uses_aws:
        checks = ["Account checks: none; a kubeconfig stack uses no AWS account."]
    checks += [m for m in run.messages if m.startswith("Cluster operators")]
    if checks:
        lines += ["", *checks]
    # A kind image is loaded onto the nodes, never pulled.
    image_gb = 0.0 if cfg.image.builder == "kind" else image_compressed_gb(cfg.image.base_image)
    lines += ["", *describe(critical_path(run.resources, until_training(run.resources), image_gb))]
    lines += ["", *cost_lines(cfg)]
    outputs = cast(StackOutputs, run.outputs)  # what the program exported, as `trainstack` reads it
    jobs = outputs.get("jobs") or {}
    if jobs:
        lines += ["", f"Jobs ({outputs.get('gpusTotal', 0)} GPUs at the GPU node groups' maximum size):"]
        starts = job_start_minutes(run.resources, image_gb, cfg.training_namespace)
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
            model = training_model_lines(cfg, name, start.total if start else 0.0)
            lines += [f"      {line}" for line in model]
    if cfg.datasets:
        lines += ["", *dataset_lines(cfg)]
    lost = [j.name for j in cfg.jobs if checkpoints_die_with_pods(cfg, j)]
    if lost:
        lines += ["", *checkpoint_warnings(cfg, lost)]
    if scheduling is not None:
        lines += ["", *scheduling.lines()]
    if cfg.docker_hub_access_token is None and cfg.image.builder in ("codebuild", "docker"):
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


# Below this, a step's time is its kernel launches and Python, which FLOPs over a peak do not model.
SHORTEST_MODELED_STEP_S = 0.01


def dataset_lines(cfg) -> list[str]:
    """Each declared dataset: what the stack prepares, how large, how long, and who reads it."""
    lines = [
        f"Datasets (prepared once into the bucket by a Job; time at an assumed "
        f"{ASSUMED_TOKENS_PER_SECOND / 1e6:g}M tokens/s):"
    ]
    for d in cfg.datasets:
        spec = d.spec
        readers = ", ".join(j.name for j in cfg.jobs if j.dataset == d.name) or "no job yet"
        lines.append(
            f"  {d.name:30s} {spec.source}/{spec.config or '-'} {spec.split}: "
            f"{spec.max_tokens + spec.val_tokens:,} tokens, ~{prepared_size_gb(spec):.1f} GB, "
            f"~{preparation_minutes(spec):.0f} min; read by {readers}"
        )
    return lines


def training_model_lines(cfg, job_name: str, start_minutes: float = 0.0) -> list[str]:
    """What the plan models of a job that runs the default trainer on a GPU group: its memory per
    GPU, its checkpoints per node and disk, its step time and goodput (domain/memory_fit.py,
    domain/goodput.py), and the time and cost of its `steps` (domain/run_estimate.py), the job
    admitted `start_minutes` before its first step. Nothing for a command, VERL, a RayCluster or a
    CPU job."""
    j = next((j for j in cfg.jobs if j.name == job_name), None)
    group = next((g for g in cfg.gpu_node_groups if j is not None and g.name == j.node_group), None)
    if j is None or group is None or not j.runs_default_trainer or not group.instance.has_nvidia_gpus:
        return []
    instance, run, shape = group.instance, j.trainer_settings(), MODEL_SHAPES[j.model]
    world = max(1, j.nodes) * instance.gpus
    need = gpu_memory_need(shape, run.batch_size, run.seq_len, world)
    memory = (
        f"memory: the {j.model} model at batch {run.batch_size} x {run.seq_len} tokens needs "
        f"~{need.total / GIB:.1f} of {gpu_memory_bytes(instance) / GIB:.1f} GiB per {instance.gpu_model}"
    )
    peak = peak_bf16_flops(instance.gpu_model or "")
    if peak is None:
        return [
            memory,
            f"modeled: no bf16 peak figure for {instance.gpu_model}; step time, goodput and the run's "
            "time and cost not modeled",
        ]
    cost = job_cost(cfg, j)
    estimate = RunEstimate(
        steps=j.steps,
        step_s=step_seconds(shape, run.batch_size, run.seq_len, peak),
        tokens_per_step=run.batch_size * run.seq_len * world,
        goodput=1.0,
        start_minutes=start_minutes,
        added_nodes=cost.added_nodes,
        node_hourly_usd=group.hourly_usd,
        release_minutes=cfg.queueing.idle_node_minutes,
    )
    home = checkpoint_home(cfg, group.name)
    if home == "fsx":
        return [
            memory,
            "checkpoints: on FSx for Lustre, shared by the nodes; goodput not modeled",
            run_line(estimate, cost, modeled_goodput=False),
        ]
    if home == "claim":
        claim = cfg.existing_cluster.checkpoint_claim
        return [
            memory,
            f"checkpoints: on the claim {claim}, shared by the nodes; goodput not modeled",
            run_line(estimate, cost, modeled_goodput=False),
        ]
    disk = group.checkpoint_disk
    uploads = home == "s3"
    g = modeled_goodput(
        shape,
        batch_size=run.batch_size,
        seq_len=run.seq_len,
        world_size=world,
        ranks_per_node=instance.gpus,
        peak_flops=peak,
        checkpoint_every=run.checkpoint_every,
        checkpoint_minutes=run.checkpoint_minutes,
        path=CheckpointPath(disk.write_gb_per_s, instance.network_gbps, uploads),
    )
    cadence = [f"{run.checkpoint_every} steps"] if run.checkpoint_every > 0 else []
    if run.checkpoint_minutes > 0:
        cadence.append(f"{run.checkpoint_minutes:g} min")
    saves = "checkpoints: none by steps or time"
    if cadence:
        saves = (
            f"checkpoints: {_size(g.checkpoint_gb_per_node)} per node every {' or '.join(cadence)} "
            f"({_duration(g.interval_s)} of training) to {disk.description}: write {_duration(g.write_s)}"
            + (f", S3 upload {_duration(g.upload_s)}" if uploads else "")
            + f", staging stall {_duration(g.stage_s)}"
        )
    bound = f" (bound by the checkpoint {g.bottleneck})" if cadence and g.bottleneck != "training" else ""
    if g.step_s < SHORTEST_MODELED_STEP_S:
        bound += "; a step this short is bound by kernel launches, not FLOPs, so both are floors"
    return [
        memory,
        saves,
        f"modeled: step {_duration(g.step_s)} at {ASSUMED_MFU:.0%} MFU (assumed), goodput {g.goodput:.1%}{bound}",
        run_line(dataclasses.replace(estimate, goodput=g.goodput), cost, modeled_goodput=True),
    ]


def run_line(e: RunEstimate, cost: JobCost, modeled_goodput: bool) -> str:
    """The time to finish the job's steps and what the run adds to the idle stack's bill."""
    short = e.step_s < SHORTEST_MODELED_STEP_S  # launch-bound: the time is a floor, the pace a ceiling
    floor, ceiling = ("at least ", "at most ") if short else ("~", "~")
    pace = f"{ceiling}{e.tokens_per_s:,.0f} tokens/s at {ASSUMED_MFU:.0%} MFU (assumed)"
    pace += f", goodput {e.goodput:.1%}" if modeled_goodput else ", checkpoint stalls not counted"
    time = (
        f"run: {e.steps:,} steps in {floor}{_span(e.training_s)} ({pace}), "
        f"{floor}{_span(e.wall_hours * 3600)} from admission"
    )
    if cost.owners_nodes:
        return f"{time}; on the cluster owner's nodes, so the stack adds nothing"
    if not e.added_nodes:
        return f"{time}; its nodes are in the idle total, so it adds nothing to it"
    nodes = (
        f"{e.added_nodes} added node(s) x {e.paid_node_hours / e.added_nodes:.2f} h "
        f"(with the {e.release_minutes} min queueing.idleNodeMinutes before they are removed)"
    )
    if e.cost_usd is None:
        return f"{time}; {nodes}: price unknown"
    return f"{time}; {floor}${e.cost_usd:,.2f} for {nodes}"


def _span(seconds: float) -> str:
    """A run's length in the unit a person plans with."""
    if seconds < 90:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 72 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{seconds * 1000:.2g} ms"


def _size(gb: float) -> str:
    return f"{gb:.2f} GB" if gb >= 0.1 else f"{gb * 1000:.2g} MB"


def named_cluster_fact(cfg, facts: dict) -> dict:
    """The offline account holds the EKS cluster a stack names (1.36, three AZs), unless a fact
    says otherwise: planning an existing-cluster stack needs no fact of its own."""
    name = cfg.existing_cluster.eks_cluster_name
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
    print(summary(run, cfg, count, out_dir, scheduling))
    return 0


if __name__ == "__main__":
    sys.exit(main())
