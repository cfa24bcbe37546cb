"""Distributed checkpoints (torch.distributed.checkpoint) with a completion marker and S3 sync.

Layout: <root>/step_00000120/ holds the DCP files of step 120. Rank 0 writes the marker file
`COMPLETE` last, atomically, once every rank has finished writing; a directory without it is a
torn checkpoint and is never loaded. With an S3 URI, the files are uploaded after the local save
and the marker is uploaded last, so S3 obeys the same rule.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from trainer import storage

MARKER = "COMPLETE"
_STEP_DIR = re.compile(r"^step_(\d{8})$")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def complete_steps(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / MARKER).is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)


def latest_complete(root: Path) -> int | None:
    steps = complete_steps(root)
    return steps[-1] if steps else None


def _local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def _write_marker(path: Path, step: int) -> None:
    tmp = path / f".{MARKER}.tmp"
    tmp.write_text(json.dumps({"step": step, "world_size": dist.get_world_size(), "saved_at": time.time()}))
    os.replace(tmp, path / MARKER)


def save(root: Path, step: int, model, optimizer, s3_uri: str | None = None, keep: int = 3) -> Path:
    """Collective: every rank calls it. Returns the checkpoint directory."""
    path = step_dir(root, step)
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path))
    dist.barrier()  # every rank's shards are on disk
    if dist.get_rank() == 0:
        _write_marker(path, step)
    dist.barrier()
    if s3_uri:
        bucket, prefix = storage.split_s3_uri(s3_uri)
        if _local_rank() == 0:  # one uploader per node: covers node-local and shared volumes
            storage.upload_dir(path, bucket, f"{prefix}/{path.name}", skip={MARKER})
        dist.barrier()
        if dist.get_rank() == 0:
            storage.upload_file(path / MARKER, bucket, f"{prefix}/{path.name}/{MARKER}")
    if dist.get_rank() == 0:
        prune(root, keep)
    dist.barrier()
    return path


def prune(root: Path, keep: int) -> None:
    """Keep the newest `keep` complete checkpoints locally; drop torn ones older than the newest.

    S3 copies are left alone: the bucket's lifecycle rule decides how long they live.
    """
    steps = complete_steps(root)
    if not steps:
        return
    for old in steps[:-keep]:
        shutil.rmtree(step_dir(root, old), ignore_errors=True)
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and int(m.group(1)) < steps[-1] and not (child / MARKER).is_file():
            shutil.rmtree(child, ignore_errors=True)


def fetch_latest_from_s3(root: Path, s3_uri: str) -> int | None:
    """Download the newest complete S3 checkpoint if it is newer than the local one."""
    bucket, prefix = storage.split_s3_uri(s3_uri)
    remote = sorted(
        int(m.group(1))
        for name in storage.list_prefixes(bucket, prefix)
        if (m := _STEP_DIR.match(name)) and storage.exists(bucket, f"{prefix}/{name}/{MARKER}")
    )
    local = latest_complete(root)
    if not remote or (local is not None and local >= remote[-1]):
        return local
    path = step_dir(root, remote[-1])
    # Download beside the target and rename: an interrupted download never looks complete.
    staging = root / f".{path.name}.download"
    shutil.rmtree(staging, ignore_errors=True)
    storage.download_prefix(bucket, f"{prefix}/{path.name}", staging)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)
    return remote[-1]


def load_latest(root: Path, model, optimizer, s3_uri: str | None = None) -> int:
    """Collective. Load the newest complete checkpoint; return its step (0 when there is none)."""
    if s3_uri and _local_rank() == 0:
        fetch_latest_from_s3(root, s3_uri)
    dist.barrier()
    # Rank 0 decides, so every rank loads the same step even if directories change meanwhile.
    decision = [latest_complete(root) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(decision, src=0)
    step = decision[0]
    if step is None:
        return 0
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(step_dir(root, step)))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return step
