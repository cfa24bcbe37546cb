"""What rank 0 reports: one `metrics {json}` line per record, the figures of a logging window.

Per log interval: window-averaged loss, validation loss, tokens/s and samples/s, step time, MFU
(PaLM/torchtitan FLOPs convention, against the GPU's dense bf16 peak), goodput (checkpoint stalls
included) and data-loader stall time.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import torch.distributed as dist

from trainer.data import TokenWindows
from trainer.distributed import DistContext

# Dense bf16 peak FLOP/s per GPU, for MFU (vendor datasheets). Matched in order against the CUDA
# device name: the PCIe and NVL parts of H100 are slower than the SXM one; "NVIDIA A10G" and
# "NVIDIA A100-SXM4-80GB" both contain "A10", so A100 and A10G come before A10. The plan's copy
# is domain/model_facts.py (tests/workload/test_model_facts.py holds them equal).
PEAK_BF16_FLOPS = (
    ("B200", 2.25e15),  # NVIDIA HGX B200 datasheet: 4.5 PFLOP/s with sparsity, half that dense
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),  # SXM
    ("H200", 989e12),
    ("A100", 312e12),
    # AWS's A10 variant (g5): NVIDIA publishes no datasheet; its tensor cores are slower than the
    # A10's (https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/: 70 TFLOP/s).
    ("A10G", 70e12),
    ("A10", 125e12),  # NVIDIA A10 datasheet (also MosaicML Composer's speed_monitor.py)
    ("L40S", 362e12),
    ("L4", 121e12),
)


def peak_flops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS if k in name), None)


class Window:
    """Figures of one logging window: loss averaged over its steps, time lost to data and saves."""

    def __init__(self, started: float, device: torch.device):
        self.started = started
        self.loss_sum = torch.zeros((), device=device)
        self.steps = 0
        self.data_wait = 0.0
        self.checkpoint_stall = 0.0

    def add(self, loss: torch.Tensor) -> None:
        self.loss_sum += loss.detach().float()
        self.steps += 1

    def metrics(
        self, step: int, ctx: DistContext, tokens_per_step: int, batch_size: int, fpt: float, peak
    ) -> dict:
        mean = self.loss_sum / max(1, self.steps)
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)  # gloo has no AVG: sum, then divide
        mean /= ctx.world_size
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - self.started
        training = max(1e-9, elapsed - self.checkpoint_stall)
        steps = max(1, self.steps)
        tokens_per_s = tokens_per_step * steps / training
        return {
            "step": step,
            "loss": round(mean.item(), 4),
            "tokens_per_s": round(tokens_per_s, 1),
            "samples_per_s": round(batch_size * ctx.world_size * steps / training, 2),
            "step_time_s": round(training / steps, 4),
            "mfu": round(tokens_per_s / ctx.world_size * fpt / peak, 4) if peak else None,
            # Share of wall time spent training: checkpoint stalls count against it.
            "goodput": round(training / max(1e-9, elapsed), 4),
            "checkpoint_stall_s": round(self.checkpoint_stall, 3),
            "data_wait_s": round(self.data_wait, 3),
        }


@torch.no_grad()
def validation_loss(model, data: TokenWindows, ctx: DistContext, batches: int, batch_size: int) -> float:
    """Mean loss over the same held-out windows every time, averaged across ranks."""
    model.eval()
    total = torch.zeros((), device=ctx.device)
    for i in range(batches):
        inputs, targets = (t.to(ctx.device) for t in data.fixed_batch(i, batch_size))
        total += model(inputs, targets).float()
    model.train()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / (batches * ctx.world_size)


def log(ctx: DistContext, record: dict) -> None:
    if ctx.rank == 0:
        # One write, newline included: print() writes the text and the newline apart when Python
        # runs unbuffered (PYTHONUNBUFFERED), and another process's warning on the same pipe can
        # land between them, splicing itself into the metrics line.
        sys.stdout.write(f"metrics {json.dumps(record)}\n")
        sys.stdout.flush()
