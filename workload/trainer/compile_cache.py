"""torch.compile's work kept across a gang's restarts, beside the checkpoints.

A restarted pod starts with an empty container: Inductor's and Triton's caches (under /tmp) are
gone, and every block compiles again before the first step, minutes on a GPU. torch's own portable
cache ("Mega-Cache": torch.compiler.save_cache_artifacts / load_cache_artifacts, torch 2.13
torch/compiler/__init__.py) serializes what a run compiled (Inductor's FX graph and autotuning
entries, AOTAutograd's, Triton's kernels) into one blob that another process hot-loads before it
compiles. Rank 0 saves it after the first step, once, into the checkpoint directory's
`compile-cache/` and, for a job that mirrors its checkpoints, to S3 beside them, where a pod of a
later run of the same job finds it. Each rank loads it before its first step.

The blob's name keys what decides whether its entries can hit: the model, the world size, the
device and the torch release. Inductor checks every entry against its own key (the graph, the
inputs' shapes, the source of torch and Triton), so a stale entry is a miss, never a wrong kernel.
A missing or unreadable blob is a cold compile, as before.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import torch

from trainer import storage

CACHE_DIR = "compile-cache"


def cache_name(model: str, world_size: int, device: torch.device, float8: bool) -> str:
    kind = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    key = f"{model}|{world_size}|{kind}|{'float8' if float8 else 'bf16'}|{torch.__version__}"
    return f"{model}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.bin"


def load(root: Path, s3_uri: str | None, name: str) -> int:
    """Hot-loads the blob `name` from the checkpoint directory or, where it lacks it, from S3 into
    memory (the ranks of a pod share the directory: none writes what another may be reading); the
    bytes loaded, 0 when there is none."""
    path = root / CACHE_DIR / name
    blob = path.read_bytes() if path.is_file() else None
    if blob is None and s3_uri:
        bucket, prefix = storage.split_s3_uri(s3_uri)
        blob = storage.read_bytes(bucket, f"{prefix}/{CACHE_DIR}/{name}")
    if not blob:
        return 0
    torch.compiler.load_cache_artifacts(blob)
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
    """This process's FX graph cache hits and misses so far (Inductor's counters)."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return {"fx_graph_hits": inductor["fxgraph_cache_hit"], "fx_graph_misses": inductor["fxgraph_cache_miss"]}
