"""`trainstack estimate JOB --tokens 1e11`: time and cost to a token budget on 1, 2, 4, ... nodes,
from the job's measured throughput (its latest metrics, or --tokens-per-s), scaled to the other node
counts by the plan's step model (the stack's outputs carry it per job), or by a share kept per
doubling (--efficiency, or where the model does not know the job)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass

from cli.analysis import estimates
from cli.analysis.estimates import EstimateRow
from cli.commands.common import metric_records
from cli.errors import EXIT_FAILED, CliError
from cli.output import Output
from cli.stack import connect, known_job, load_outputs


@dataclass
class Estimate:
    measured: float  # tokens/s
    nodes: int  # that it was measured on
    rows: list[EstimateRow]
    unpriced: str | None = None  # the node group whose price is unknown
    scaling: str = "efficiency"  # "model": the plan's step model; "efficiency": a share per doubling


# Without the plan's model (an older stack's outputs, a job it does not model) or with
# --efficiency: throughput kept per doubling of nodes.
DEFAULT_EFFICIENCY = 0.9


def run(args: argparse.Namespace, out: Output) -> int:
    return render(args, fetch(args), out)


def fetch(args: argparse.Namespace) -> Estimate:
    outputs = load_outputs(args)
    job = known_job(outputs, args.job)
    if job is None:
        raise CliError(f"no job {args.job} in the stack's outputs: the stack launches no jobs")
    measured = args.tokens_per_s
    if measured is None:
        cluster = connect(args, outputs)
        records = metric_records(cluster, cluster.job_pods(args.job))
        measured = records[-1].get("tokens_per_s") if records else None
    if not measured:
        raise CliError("no measured throughput yet: wait for metrics, or pass --tokens-per-s", EXIT_FAILED)
    nodes = int(job["nodes"])
    group = (outputs.get("gpuNodeGroups") or {}).get(job["nodeGroup"], {})
    hourly = job.get("hourlyUsd")
    per_node_usd = None if hourly is None else hourly / nodes if nodes else 0.0
    if args.hourly_usd is not None:
        per_node_usd = args.hourly_usd
    # The group cannot grow past its maximum, so a larger row would price nodes it never gets; outputs
    # without the group (a kubeconfig stack's) leave the table at the job's own size.
    largest = args.max_nodes or int(group.get("nodes", nodes))
    unpriced = None if per_node_usd is not None else job["nodeGroup"]
    model = {int(n): v for n, v in (job.get("modeledTokensPerS") or {}).items()}
    if args.efficiency is None and model:
        rows = estimates.modeled(args.tokens, measured, nodes, per_node_usd, model, largest)
        if rows is not None:
            return Estimate(measured, nodes, rows, unpriced, "model")
    efficiency = DEFAULT_EFFICIENCY if args.efficiency is None else args.efficiency
    rows = estimates.estimate(args.tokens, measured, nodes, per_node_usd, largest, efficiency)
    return Estimate(measured, nodes, rows, unpriced)


def efficiency_of(args: argparse.Namespace) -> float:
    return DEFAULT_EFFICIENCY if args.efficiency is None else args.efficiency


def usd(cost: float | None) -> str:
    return "unknown" if cost is None else "$" + format(cost, ",.0f")


def render(args: argparse.Namespace, estimate: Estimate, out: Output) -> int:
    measured, nodes, rows = estimate.measured, estimate.nodes, estimate.rows
    if out.as_json:
        out.dump(
            {
                "job": args.job,
                "tokens": args.tokens,
                "measured": {"tokensPerS": measured, "nodes": nodes},
                "scaling": estimate.scaling,
                **(
                    {"efficiencyPerDoubling": efficiency_of(args)} if estimate.scaling == "efficiency" else {}
                ),
                "rows": [asdict(r) for r in rows],
            }
        )
        return 0
    scaled = (
        "other node counts scaled by the plan's step model (compute, FSDP's traffic over the link, "
        "the launch floor)"
        if estimate.scaling == "model"
        else f"{efficiency_of(args):.0%} scaling efficiency per doubling"
    )
    out.line(f"{args.tokens:.3g} tokens, measured {measured:,.0f} tokens/s on {nodes} node(s), {scaled}")
    out.line(f"{'NODES':>6} {'TOKENS/S':>14} {'HOURS':>10} {'COST':>12}")
    for r in rows:
        out.line(f"{r.nodes:>6} {r.tokens_per_s:>14,.0f} {r.hours:>10.1f} {usd(r.cost_usd):>12}")
    if estimate.unpriced is not None:
        out.line(
            f"cost unknown: node group {estimate.unpriced} has no price; set its hourlyUsd "
            "(trainstack:gpuNodeGroups[<i>].hourlyUsd) and run `pulumi up`, or pass --hourly-usd"
        )
    return 0
