"""Time and cost to a token budget on more or fewer nodes, from a measured throughput."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class EstimateRow:
    nodes: int
    tokens_per_s: float
    hours: float
    cost_usd: float | None  # None: the node's price is unknown (an `ml.` type, say)


def estimate(
    tokens: float,
    measured_tokens_per_s: float,
    measured_nodes: int,
    hourly_usd_per_node: float | None,
    max_nodes: int,
    efficiency: float,
) -> list[EstimateRow]:
    """Time and cost to train `tokens` on 1, 2, 4, ... nodes: throughput scales with the node count
    times `efficiency` per doubling away from the measured configuration."""
    scales = {}
    nodes = 1
    while nodes <= max_nodes:
        # Fewer nodes than measured scale up by the same rule (less communication per node).
        scales[nodes] = (nodes / measured_nodes) * efficiency ** math.log2(nodes / measured_nodes)
        nodes *= 2
    return rows_of(tokens, measured_tokens_per_s, scales, hourly_usd_per_node)


def modeled(
    tokens: float,
    measured_tokens_per_s: float,
    measured_nodes: int,
    hourly_usd_per_node: float | None,
    model: dict[int, float],
    max_nodes: int,
) -> list[EstimateRow] | None:
    """The same table, the throughput scaled by the plan's model (`model`: its tokens/s per node
    count) from where it was measured; None where the model lacks the measured node count."""
    anchor = model.get(measured_nodes)
    if not anchor:
        return None
    scales = {n: v / anchor for n, v in sorted(model.items()) if n <= max_nodes}
    return rows_of(tokens, measured_tokens_per_s, scales, hourly_usd_per_node)


def rows_of(
    tokens: float, measured: float, scales: dict[int, float], hourly_usd_per_node: float | None
) -> list[EstimateRow]:
    rows = []
    for nodes, scale in scales.items():
        tput = measured * scale
        hours = tokens / tput / 3600
        cost = None if hourly_usd_per_node is None else hours * nodes * hourly_usd_per_node
        rows.append(EstimateRow(nodes, tput, hours, cost))
    return rows
