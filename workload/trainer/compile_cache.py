"""torch.compile's work kept across a gang's restarts, beside the checkpoints.

A restarted pod starts with an empty container: Inductor's and Triton's caches (under /tmp) are
gone, and every block compiles again before the first step, minutes on a GPU. torch's own portable
cache ("Mega-Cache": torch.compiler.save_cache_artifacts / load_cache_artifacts, torch 2.13
torch/compiler/__init__.py) serializes what a run compiled (Inductor's FX graph and autotuning
entries, AOTAutograd's, Triton's kernels) into one blob that another process hot-loads before it
compiles. After the first step, each rank of the first node that compiled anything the cache lacked
saves its own (the keys hold the device's index) into the checkpoint directory's `compile-cache/`
and, for a job that mirrors its checkpoints, to S3 beside them, where the same local rank of every
node of a later run of the job finds it and loads it before its first step.

The blob's name keys what decides whether its entries can hit: the model, the world size, the
device, the torch release and the local rank. Inductor checks every entry against its own key (the graph, the
inputs' shapes, the source of torch and Triton), so a stale entry is a miss, never a wrong kernel.
A missing or unreadable blob is a cold compile, as before, and a new image whose code misses is
saved again. Graphs compiled after the first step (validation, a recompile) are not in it.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import torch

from trainer import storage

CACHE_DIR = "compile-cache"


def cache_name(model: str, world_size: int, device: torch.device, float8: bool, local_rank: int) -> str:
    """One blob per local rank: Inductor's and AOTAutograd's keys hold the device's index, so what
    cuda:0 compiled never hits on cuda:1."""
    kind = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    key = f"{model}|{world_size}|{kind}|{'float8' if float8 else 'bf16'}|{torch.__version__}"
    return f"{model}-{hashlib.sha256(key.encode()).hexdigest()[:16]}-local{local_rank}.bin"


def load(root: Path, s3_uri: str | None, name: str) -> int:
    """Hot-loads the blob `name` from the checkpoint directory or, where it lacks it, from S3 into
    memory (the ranks of a pod share the directory: none writes what another may be reading); the
    bytes loaded, 0 when there is none or torch could not read it."""
    path = root / CACHE_DIR / name
    blob = path.read_bytes() if path.is_file() else None
    if blob is None and s3_uri:
        bucket, prefix = storage.split_s3_uri(s3_uri)
        blob = storage.read_bytes(bucket, f"{prefix}/{CACHE_DIR}/{name}")
    if not blob or torch.compiler.load_cache_artifacts(blob) is None:
        return 0
    return len(blob)


def save(root: Path, s3_uri: str | None, name: str) -> tuple[int, threading.Thread | None]:
    """Writes what this process compiled as the blob `name` and starts its upload to S3 in the
    background (the step goes on); the bytes written (0: nothing compiled) and the upload's thread."""
    saved = torch.compiler.save_cache_artifacts()
    if saved is None:
        return 0, None
    blob, _ = saved
    path = root / CACHE_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(blob)
    os.replace(tmp, path)
    if not s3_uri:
        return len(blob), None
    bucket, prefix = storage.split_s3_uri(s3_uri)
    upload = threading.Thread(
        target=storage.upload_file,
        args=(path, bucket, f"{prefix}/{CACHE_DIR}/{name}"),
        name="compile-cache-upload",
        daemon=True,
    )
    upload.start()
    return len(blob), upload


def lookups() -> dict[str, int]:
    """This process's cache hits and misses so far: Inductor's FX graphs, AOTAutograd's entries."""
    from torch._dynamo.utils import counters

    inductor, aot = counters["inductor"], counters["aot_autograd"]
    return {
        "fx_graph_hits": inductor["fxgraph_cache_hit"],
        "fx_graph_misses": inductor["fxgraph_cache_miss"],
        "aot_autograd_hits": aot["autograd_cache_hit"],
        "aot_autograd_misses": aot["autograd_cache_miss"],
    }


def missed(found: dict[str, int]) -> bool:
    """Whether this process compiled anything the cache lacked: then its blob is saved anew (what hit
    is recorded too, so the new blob is whole)."""
    return found["fx_graph_misses"] > 0 or found["aot_autograd_misses"] > 0
