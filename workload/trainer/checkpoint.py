"""Distributed checkpoints (torch.distributed.checkpoint) with a completion marker and S3 sync.

Layout: <root>/step_00000120/ holds the DCP files of step 120: one `__<rank>_0.distcp` per rank and
`.metadata`. Rank 0 writes the marker `COMPLETE` last, atomically, once every rank's files are on
disk; a directory without it is torn and never loaded. With S3, each rank uploads its own files,
rank 0 the metadata, and the marker goes up last, so S3 obeys the same rule (and Ray Train registers
an S3 step only once its marker is there: trainer.ray_train).

`--checkpoint-dir` may be node-local (each node keeps its own ranks' files) or shared by all
nodes; the store finds out which at start. A rank reads more than its own file: DCP plans values
that are not sharded (the optimizer's `step`, `param_groups`) on every rank and keeps one copy
(torch/distributed/checkpoint/_dedup_save_plans.py), which the store has written by the lowest
rank (`dedup_save_to_lowest_rank`), so rank 0's file is read by all. Resuming, the ranks agree on
the newest complete step (S3's, any volume's) that every rank can load: a rank can when every file
its load plan reads (DCP's own planner over the step's `.metadata`) is on its volume, or the step
is complete in S3, from which each volume fetches what its ranks lack (one process per volume).
A complete step that no rank set can load ends the run with a sentence naming the step and the
missing file: never a silent start from step 0. Every node prunes its own copies. Transfers wait
on the long-timeout control group, never on the training collectives' timeout.

A background save copies the state into one host staging buffer that the store keeps for the run
(pinned when CUDA is there), and the next save reuses it only once the previous write is done. A
copy from elsewhere (S3, Ray's restored checkpoint) is filled in a staging directory and renamed
into place whole, so a copy cut short never looks complete either.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from trainer import storage
from trainer.resilience import CheckpointUnavailable

# torch.distributed.checkpoint is imported where it is used: the pod's launcher (trainer.launch,
# through trainer.recreations) reads the layout only, and DCP's import costs it 0.6 s of CPU at
# every start.
if TYPE_CHECKING:
    from torch.distributed.checkpoint.staging import StagingOptions

MARKER = "COMPLETE"
# A step directory set aside when the job starts over without it (resume_step): kept, never read.
ABANDONED = ".abandoned"
METADATA = ".metadata"
_STEP_DIR = re.compile(r"step_([0-9]{8})")


def step_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def complete_steps(root: Path) -> list[int]:
    if not root.is_dir():
        return []
    steps = []
    for child in root.iterdir():
        m = _STEP_DIR.fullmatch(child.name)
        if m and (child / MARKER).is_file():
            steps.append(int(m.group(1)))
    return sorted(steps)


def latest_complete(root: Path) -> int | None:
    steps = complete_steps(root)
    return steps[-1] if steps else None


def _write_marker(path: Path, step: int) -> None:
    tmp = path / f".{MARKER}.tmp"
    tmp.write_text(json.dumps({"step": step, "world_size": dist.get_world_size(), "saved_at": time.time()}))
    os.replace(tmp, path / MARKER)


def marker_step(path: Path) -> int:
    """The step a complete checkpoint directory holds (from its marker)."""
    return int(json.loads((path / MARKER).read_text())["step"])


def rank_files(path: Path, rank: int) -> list[Path]:
    """What one rank uploads: its own shard files; rank 0 also the metadata (not the marker)."""
    own = sorted(path.glob(f"__{rank}_*.distcp"))
    if rank == 0:
        own += [
            p
            for p in sorted(path.iterdir())
            if p.is_file() and p.name != MARKER and not p.name.startswith("__")
        ]
    return own


def retained(steps: list[int], keep: int, every: int) -> set[int]:
    """The steps a run keeps: the newest `keep`, and each multiple of `every` (0: none). The plan's
    copy is domain/retention.py (tests/workload/test_retention.py holds them equal)."""
    ordered = sorted(steps)
    return set(ordered[-keep:]) | {s for s in ordered if every and s % every == 0}


def prune(root: Path, keep: int, every: int = 0) -> None:
    """Keep the complete checkpoints `retained` names on this volume; drop torn ones older than
    the newest. On FSx the volume's deletions are exported to S3, which so keeps the same ones."""
    steps = complete_steps(root)
    if not steps:
        return
    for old in sorted(set(steps) - retained(steps, keep, every)):
        shutil.rmtree(step_dir(root, old), ignore_errors=True)
    for child in root.iterdir():
        m = _STEP_DIR.fullmatch(child.name)
        if m and int(m.group(1)) < steps[-1] and not (child / MARKER).is_file():
            shutil.rmtree(child, ignore_errors=True)


def s3_complete_steps(s3_uri: str) -> list[int]:
    bucket, prefix = storage.split_s3_uri(s3_uri)
    return sorted(
        int(m.group(1))
        for name in storage.list_prefixes(bucket, prefix)
        if (m := _STEP_DIR.fullmatch(name)) and storage.exists(bucket, f"{prefix}/{name}/{MARKER}")
    )


def prune_s3(s3_uri: str, keep: int, every: int) -> None:
    """Delete the S3 checkpoints `retained` no longer names, and torn ones older than the newest
    complete step (an upload a fault cut short). On a versioned bucket each delete leaves a
    noncurrent version, which the bucket's lifecycle removes a day later (components/bucket.py)."""
    bucket, prefix = storage.split_s3_uri(s3_uri)
    complete = s3_complete_steps(s3_uri)
    if not complete:
        return
    keep_steps = retained(complete, keep, every)
    for name in storage.list_prefixes(bucket, prefix):
        m = _STEP_DIR.fullmatch(name)
        if m and int(m.group(1)) < complete[-1] and int(m.group(1)) not in keep_steps:
            storage.delete_prefix(bucket, f"{prefix}/{name}")


def _install(path: Path, fill: Callable[[Path], None]) -> None:
    """Put a whole checkpoint at `path`: `fill` writes it into a staging directory unique to this
    process (two nodes on a shared volume never write the same one), renamed at the end."""
    staging = path.parent / f".{path.name}.incoming-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        fill(staging)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # only what a failure left: a rename moved it


def files_read(path: Path, state: dict) -> set[str]:
    """Every file this rank's load of `state` from `path` opens: DCP's own load plan over the
    step's metadata, each read item's file as FileSystemReader.read_data finds it
    (torch/distributed/checkpoint/filesystem.py), and the metadata itself."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    metadata = dcp.FileSystemReader(str(path)).read_metadata()
    planner = DefaultLoadPlanner()
    planner.set_up_planner(state, metadata, is_coordinator=False)
    storage_data = metadata.storage_data
    return {METADATA} | {
        storage_data[item.storage_index].relative_path for item in planner.create_local_plan().items
    }


def fetch_files(root: Path, s3_uri: str, step: int, names: list[str]) -> None:
    """Download `names` of S3's complete `step` into root's step directory, then its marker. The
    names come from the step's metadata, which whoever can write the prefix wrote: each must land
    inside the directory (storage.local_path), all checked before anything is written. Each file
    lands whole (storage.download_file renames it into place); the marker comes last, so a fetch
    cut short leaves the step incomplete on this volume, to be completed next time. The files come
    several at once (storage.download_files), the marker after all of them."""
    path = step_dir(root, step)
    bucket, prefix = storage.split_s3_uri(s3_uri)
    step_prefix = f"{prefix}/{path.name}"
    targets = {name: storage.local_path(path, bucket, step_prefix, f"{step_prefix}/{name}") for name in names}
    missing = [(f"{step_prefix}/{name}", target) for name, target in targets.items() if not target.is_file()]
    storage.download_files(bucket, missing)
    if not (path / MARKER).is_file():
        storage.download_file(bucket, f"{step_prefix}/{MARKER}", path / MARKER)


def install_copy(root: Path, source: Path) -> int:
    """Copy a complete checkpoint directory from elsewhere (Ray's restored one) into root; return
    its step. A step root already holds complete is left as it is."""
    step = marker_step(source)
    path = step_dir(root, step)
    if not (path / MARKER).is_file():
        try:
            _install(path, lambda staging: shutil.copytree(source, staging))
        except OSError:
            if not (path / MARKER).is_file():
                raise
            # Another node on a shared volume renamed the same copy into place first.
    return step


def staging_options() -> StagingOptions:
    """One staging buffer for the run: pinned, filled by non-blocking copies, when CUDA is there.

    Pinning and non-blocking copies need CUDA (DefaultStager raises without an accelerator;
    StateDictStager ignores pin_memory without CUDA). Staging stays synchronous: the loop's next
    optimizer step would change the state under a background copy. No shared memory: the writer
    is a thread (dcp.async_save's default), not a process.
    """
    from torch.distributed.checkpoint.staging import StagingOptions

    cuda = torch.cuda.is_available()
    return StagingOptions(
        use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=cuda
    )


class CheckpointStore:
    """Collective: every rank constructs it and calls its methods in the same order."""

    def __init__(
        self,
        root: Path,
        control: dist.ProcessGroup | None,
        s3_uri: str | None = None,
        keep: int = 3,
        keep_every: int = 0,
    ):
        self.root = root
        self.control = control
        self.s3_uri = s3_uri
        self.keep, self.keep_every = keep, keep_every  # what `retained` keeps, here and in S3
        self.rank = dist.get_rank()
        # Each rank's volume, named by the lowest rank that sees it: one per node, or one in all.
        self.volumes = self._volumes()
        self.shared = len(set(self.volumes)) == 1
        # One process writes what a volume holds once: per node, or once in all on a shared volume.
        self.volume_writer = self.volumes[self.rank] == self.rank
        self._upload: tuple[Path, threading.Thread] | None = None
        self._upload_error: Exception | None = None
        # torch/distributed/checkpoint/_state_dict_stager.py (StateDictStager): staged storages are
        # cached per source storage and copied into again by each save, where dcp.async_save's own
        # stager (state_dict_saver.py) allocates the whole state afresh, unpinned, every save.
        from torch.distributed.checkpoint.staging import DefaultStager

        self.stager = DefaultStager(staging_options())
        self._writing: Future | None = None

    def _gather(self, value) -> list:
        found: list = [None] * dist.get_world_size()
        dist.all_gather_object(found, value, group=self.control)
        return found

    def _barrier(self) -> None:
        dist.barrier(group=self.control)

    def _volumes(self) -> list[int]:
        """For each rank, the lowest rank whose probe file it sees in the checkpoint directory (every
        rank leaves one): the ranks of one node see each other's, and a shared volume shows all."""
        self.root.mkdir(parents=True, exist_ok=True)
        token = [uuid.uuid4().hex if self.rank == 0 else None]
        dist.broadcast_object_list(token, src=0, group=self.control)
        probe = self.root / f".probe-{token[0]}-{self.rank}"
        probe.touch()
        self._barrier()
        seen = min(int(p.name.rsplit("-", 1)[1]) for p in self.root.glob(f".probe-{token[0]}-*"))
        volumes = self._gather(seen)
        self._barrier()
        probe.unlink(missing_ok=True)
        return volumes

    def resume_step(self, state: dict) -> int | None:
        """The newest complete step every rank can load, fetching from S3 what a volume lacks; None
        when no volume and no S3 prefix holds a complete step. Candidates, newest first: S3's
        complete steps and every volume's; a step only some volumes hold, which S3 does not, is
        passed over for an older one, and when none is left the run ends (CheckpointUnavailable),
        unless S3 is set and holds no complete step yet: then it starts from step 0 (None), loudly."""
        listed = [s3_complete_steps(self.s3_uri) if self.rank == 0 and self.s3_uri else []]
        dist.broadcast_object_list(listed, src=0, group=self.control)
        in_s3 = set(listed[0])
        candidates = sorted(in_s3.union(*self._gather(complete_steps(self.root))), reverse=True)
        refused: list[tuple[int, int, str]] = []
        for step in candidates:
            lacking = self._gather(self._lacking(step, state, step in in_s3))
            if step in in_s3:
                self._fetch(step, lacking)
                return step
            absent = [(rank, names[0]) for rank, names in enumerate(lacking) if names]
            if not absent:
                return step
            refused.append((step, *absent[0]))
            if self.rank == 0:
                sys.stderr.write(f"checkpoint: step {step} passed over: {self._missing(*refused[-1])}\n")
        if refused and self.s3_uri and not in_s3:
            # A pod was lost before the first checkpoint reached S3 (its replacement's volume is
            # empty): what the other volumes hold can never be loaded whole, and starting over
            # loses only the steps since the start, so that is what the job does, loudly.
            if self.rank == 0:
                sys.stderr.write(
                    f"checkpoint: {self._missing(*refused[0])}, and S3 holds no complete step yet (a pod "
                    "was lost before the first checkpoint reached it): STARTING FROM STEP 0, the steps "
                    f"trained so far are trained again; the steps no rank set can load are kept as "
                    f"step_*{ABANDONED}\n"
                )
                sys.stderr.flush()
            # Kept, out of the way: the new run's steps are older, and retention, which keeps the
            # newest, would prune them as they are saved.
            for step, *_ in refused:
                path = step_dir(self.root, step)
                if self.volume_writer and path.is_dir():  # a name of its own: it may happen twice
                    path.rename(path.with_name(f"{path.name}{ABANDONED}-{time.time_ns()}"))
            self._barrier()
            return None
        if refused:
            unavailable = CheckpointUnavailable(
                f"{self._missing(*refused[0])}; not starting from step 0 while a complete checkpoint "
                "exists: give every node the checkpoint's files (--s3-checkpoints, or one shared "
                "--checkpoint-dir) and restart"
            )
            sys.stderr.write(f"checkpoint: {unavailable}\n")  # every rank's log says why it exits
            sys.stderr.flush()
            raise unavailable
        return None

    def _missing(self, step: int, rank: int, name: str) -> str:
        where = (
            f"S3 ({self.s3_uri}) does not hold it complete" if self.s3_uri else "no --s3-checkpoints is set"
        )
        return f"step {step} is complete but rank {rank} cannot load it: its volume lacks {name} and {where}"

    def _lacking(self, step: int, state: dict, in_s3: bool) -> list[str]:
        """The files of `step` this rank would read that its volume does not hold."""
        path = step_dir(self.root, step)
        if in_s3:  # the load plan needs the metadata: each volume fetches it first
            if self.volume_writer and not (path / METADATA).is_file():
                bucket, prefix = storage.split_s3_uri(self.s3_uri)
                storage.download_file(bucket, f"{prefix}/{path.name}/{METADATA}", path / METADATA)
            self._barrier()
        if not (path / METADATA).is_file():
            return [METADATA]
        return sorted(name for name in files_read(path, state) if not (path / name).is_file())

    def _fetch(self, step: int, lacking: list[list[str]]) -> None:
        """Each volume's writer fetches, from S3, the files any rank on its volume lacks."""
        if self.volume_writer:
            mine = {
                name
                for rank, names in enumerate(lacking)
                if self.volumes[rank] == self.rank
                for name in names
            }
            fetch_files(self.root, self.s3_uri, step, sorted(mine))
        self._barrier()

    def load_latest(self, model, optimizer) -> int:
        """Load the agreed checkpoint; return its step (0 when there is none)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        step = self.resume_step(state)
        if step is None:
            return 0
        dcp.load(state, checkpoint_id=str(step_dir(self.root, step)), process_group=self.control)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return step

    def start_upload(self, path: Path) -> None:
        """Upload this rank's own files of `path` to S3 on a thread (each rank its own: no copies)."""
        bucket, prefix = storage.split_s3_uri(self.s3_uri)

        def upload() -> None:
            for file in rank_files(path, self.rank):
                storage.upload_file(file, bucket, f"{prefix}/{path.name}/{file.name}")

        self._upload = (path, threading.Thread(target=self._guarded(upload), name="s3-upload", daemon=True))
        self._upload[1].start()

    def _guarded(self, fn):
        def run() -> None:
            try:
                fn()
            except Exception as err:  # reported where the upload is settled, on the training thread
                self._upload_error = err

        return run

    def uploading(self) -> bool:
        """This rank's S3 upload is still running (it never blocks)."""
        return self._upload is not None and self._upload[1].is_alive()

    def has_upload(self) -> bool:
        """An upload was started and its S3 marker is not written yet."""
        return self._upload is not None

    def settle_uploads(self) -> None:
        """Collective: wait for every rank's pending upload, then rank 0 uploads the marker."""
        if self._upload is None:
            return
        path, thread = self._upload
        thread.join()
        self._upload = None
        error, self._upload_error = self._upload_error, None
        failed = self._gather(error is not None)
        if any(failed):
            raise RuntimeError(f"uploading {path.name} to {self.s3_uri} failed on a rank: {error!r}")
        if self.rank == 0:
            bucket, prefix = storage.split_s3_uri(self.s3_uri)
            storage.upload_file(path / MARKER, bucket, f"{prefix}/{path.name}/{MARKER}")
            prune_s3(self.s3_uri, self.keep, self.keep_every)  # a newer step is complete in S3 now
        self._barrier()

    def save(self, step: int, model, optimizer, background: bool = False) -> PendingSave:
        """Start writing `step`; with `background` the files are written while training goes on.
        The returned save must be finished (marker, S3, pruning) before the next one starts."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
        from torch.distributed.checkpoint.state_dict import get_state_dict

        path = step_dir(self.root, step)
        # A resumed run saves again steps the run before it may have marked complete on this volume
        # (the resume came from an older step every rank could load): the marker goes before any
        # file is rewritten, so a crash mid-write leaves a torn step, not one that looks complete.
        # Every rank of the volume unlinks it before the save's first collective, so before any
        # rank writes. So does rank 0 with S3's marker of the step, before any rank uploads the new
        # files (each uploads after this save, past that collective): a fault mid-upload then
        # leaves S3 a torn step, never a "complete" one of two saves' shards.
        (path / MARKER).unlink(missing_ok=True)
        if self.s3_uri and self.rank == 0:
            bucket, prefix = storage.split_s3_uri(self.s3_uri)
            marker = f"{prefix}/{path.name}/{MARKER}"
            if storage.exists(bucket, marker):  # a step saved again: no delete marker for every save
                storage.delete_object(bucket, marker)
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        # One writer thread per rank (FileSystemWriter's thread_count=1): a node's ranks already
        # write their own files at once (8 on p4d/p5), and fsync hands the kernel all of a file's
        # pages together, so more threads per rank add files to upload, not disk throughput.
        if self._writing is not None:  # the staging buffer is that write's source until it is on disk
            self._writing.result()
            self._writing = None
        # Values every rank holds alike go to rank 0's file, whose copy every node can fetch.
        planner = DefaultSavePlanner(dedup_save_to_lowest_rank=True)
        if background:
            # Staged into the buffer now, written by a thread; its collectives use the control group.
            future = dcp.async_save(
                state,
                checkpoint_id=str(path),
                process_group=self.control,
                async_stager=self.stager,
                planner=planner,
            )
            self._writing = future
        else:
            dcp.save(state, checkpoint_id=str(path), process_group=self.control, planner=planner)
            future = None
        return PendingSave(self, step, path, future)

    def close(self) -> None:
        """Release the staging buffer for the end of the run. Safe on an error path too: a write
        still running holds its staged state itself, and the pinning ends when that is freed."""
        self.stager.close()


class PendingSave:
    def __init__(self, store: CheckpointStore, step: int, path: Path, future):
        self.store, self.step, self.path, self.future = store, step, path, future

    def written(self) -> bool:
        """This rank's files are on disk (never blocks)."""
        return self.future is None or self.future.done()

    def finish(self, background_upload: bool = False) -> Path:
        """Collective: wait for the files, mark the checkpoint complete, prune, mirror it to S3.
        With `background_upload` each rank's upload runs on a thread while training goes on; the
        S3 marker follows when the store next settles its uploads (`settle_uploads`)."""
        store = self.store
        if self.future is not None:
            self.future.result()
        store.settle_uploads()  # the previous checkpoint's S3 copy is complete before this one starts
        store._barrier()  # every rank's shards are on disk
        if store.volume_writer:  # each volume records that the step is complete everywhere
            _write_marker(self.path, self.step)
        store._barrier()
        if store.volume_writer:  # every node prunes its own copies (never the newest, uploading now)
            prune(store.root, store.keep, store.keep_every)
        if store.s3_uri:
            store.start_upload(self.path)
            if not background_upload:
                store.settle_uploads()
        store._barrier()
        return self.path
