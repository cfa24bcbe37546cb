"""Tokenized training data: a flat file of token ids, read in fixed windows, sharded by rank.

The format is nanoGPT's: little-endian uint16 token ids (uint32 when the vocabulary needs it),
one file, no header. Batch contents depend only on (seed, step, rank), so a resumed run reads
exactly what an uninterrupted one would have, without saving loader state.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import threading
import time
from pathlib import Path, PurePosixPath

import numpy as np
import torch

from trainer import storage


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= 2**16 else np.dtype(np.uint32)


# The (a, b) of each run's rule t[i+1] = (a*t[i] + b) mod V.
SYNTHETIC_RULES = ((1, 1), (1, 3), (3, 7), (5, 1))


def write_synthetic_dataset(path: Path, n_tokens: int, vocab_size: int, seed: int = 0) -> Path:
    """Learnable generated data: runs of an affine sequence t[i+1] = (a*t[i] + b) mod V.

    Each run (16 to 63 tokens) starts at a random token with one of a few (a, b) rules, so a model
    must learn the rules and infer which one is active from context: loss falls steadily, well
    below ln(V). Computed whole with numpy (a token loop took most of a second of a pod's start):
    k steps into a run, t = a^k * t0 + b * (a^(k-1) + ... + 1) mod V, from a table per rule.
    """
    rng = np.random.default_rng(seed)
    runs = n_tokens // 16 + 1  # enough: no run is shorter than 16
    lengths = rng.integers(16, 64, size=runs)
    rule = rng.integers(len(SYNTHETIC_RULES), size=runs)
    first_token = rng.integers(vocab_size, size=runs)
    scale = np.empty((len(SYNTHETIC_RULES), 64), dtype=np.int64)
    shift = np.empty((len(SYNTHETIC_RULES), 64), dtype=np.int64)
    for r, (a, b) in enumerate(SYNTHETIC_RULES):
        s, c = 1, 0
        for k in range(64):
            scale[r, k], shift[r, k] = s, c
            s, c = (a * s) % vocab_size, (a * c + b) % vocab_size
    run = np.repeat(np.arange(runs), lengths)[:n_tokens]
    k = np.arange(len(run)) - (np.cumsum(lengths) - lengths)[run]
    out = (scale[rule[run], k] * first_token[run] + shift[rule[run], k]) % vocab_size
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name per process: nodes sharing the cache (a shared file system) each write their own.
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    out.astype(token_dtype(vocab_size)).tofile(tmp)
    os.replace(tmp, path)
    return path


class TokenWindows:
    """Fixed-length windows (inputs, next-token targets) over a token file, sharded by rank."""

    def __init__(self, path: Path, vocab_size: int, seq_len: int, rank: int, world_size: int, seed: int = 0):
        self.path = path
        self.tokens = np.memmap(path, dtype=token_dtype(vocab_size), mode="r")
        self.seq_len = seq_len
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        # Window w covers tokens [w*seq_len, w*seq_len + seq_len + 1): the +1 is the last target.
        self.num_windows = (len(self.tokens) - 1) // seq_len
        if self.num_windows < world_size:
            raise ValueError(
                f"{path} holds {len(self.tokens)} tokens: too few for {world_size} ranks at seq_len {seq_len}"
            )

        self._epoch: int | None = None
        self._permutation: np.ndarray | None = None

    def _order(self, epoch: int) -> np.ndarray:
        # Once per epoch, not per step: a permutation of millions of windows takes 100+ ms.
        if self._epoch != epoch:
            self._permutation = np.random.default_rng((self.seed, epoch)).permutation(self.num_windows)
            self._epoch = epoch
        return self._permutation

    def _rows(self, windows) -> tuple[torch.Tensor, torch.Tensor]:
        rows = np.stack(
            [
                self.tokens[w * self.seq_len : w * self.seq_len + self.seq_len + 1].astype(np.int64)
                for w in windows
            ]
        )
        data = torch.from_numpy(rows)
        # Contiguous, not two views of one buffer: a pinned view keeps the view's strides, and
        # CUDA copies a non-contiguous tensor through an unpinned staging copy, synchronously
        # (non_blocking or not).
        return data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def fixed_batch(self, index: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The same held-out windows every time (validation): batch `index` of this rank."""
        per_step = batch_size * self.world_size
        first = (index * per_step) % max(1, self.num_windows - per_step + 1) + self.rank
        return self._rows(range(first, first + per_step, self.world_size)[:batch_size])

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This rank's batch for a global step: rank r takes every world_size-th window."""
        per_step = batch_size * self.world_size
        per_epoch = self.num_windows // per_step
        if per_epoch == 0:
            raise ValueError(f"{self.num_windows} windows cannot fill one global batch of {per_step}")
        epoch, offset = divmod(step, per_epoch)
        order = self._order(epoch)
        first = offset * per_step + self.rank
        return self._rows(order[first : first + per_step : self.world_size])


class Prefetcher:
    """Prepares the batches of steps [start, end) on a background thread, `depth` ahead, in pinned
    memory on GPUs so the copy to the device overlaps compute."""

    def __init__(self, data: TokenWindows, start: int, end: int, batch_size: int, depth: int, pin: bool):
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(data, start, end, batch_size, pin), daemon=True, name="prefetch"
        )
        self._thread.start()

    def _run(self, data: TokenWindows, start: int, end: int, batch_size: int, pin: bool) -> None:
        try:
            for step in range(start, end):
                batch = data.batch(step, batch_size)
                if pin:
                    batch = tuple(t.pin_memory() for t in batch)
                while not self._stop.is_set():
                    try:
                        self._queue.put(batch, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if self._stop.is_set():
                    return
        except Exception as err:  # surfaced in the training loop, not lost in this thread
            self._queue.put(err)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        item = self._queue.get()
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# A copy of an older upload, or a download a killed pod left, is removed once it is this old: a pod
# still reading the older copy keeps its open file (Linux frees it at the last close), and one that
# resolved it a moment ago has long opened it.
STALE_SECONDS = 3600


def resolve_dataset(uri: str, cache_dir: Path) -> Path:
    """A local path as it is; an s3:// object downloaded once into cache_dir (atomically), under
    its ETag: the cache may be the node's and outlive the pod (a restart reads it again without a
    download), and an object uploaded anew under the same key is fetched anew. The ETag is read
    again after the download: an upload in between would put new bytes under the old name, so the
    download is redone. Older copies and left-over partial downloads go once STALE_SECONDS old."""
    if not uri.startswith("s3://"):
        return Path(uri)
    bucket, key = storage.split_s3_uri(uri)
    versions = cache_dir / key
    for _ in range(3):
        etag = storage.etag(bucket, key)
        local = versions / etag / PurePosixPath(key).name
        if local.exists():
            break
        storage.download_file(bucket, key, local)
        if storage.etag(bucket, key) == etag:
            break
        local.unlink(missing_ok=True)  # replaced while it came down: fetch the new one
    else:
        raise RuntimeError(f"{uri} changed during each of 3 downloads; upload it once and start again")
    now = time.time()
    for old in [*versions.iterdir(), *local.parent.glob("*.part")]:
        with contextlib.suppress(FileNotFoundError):  # another pod's cleanup got there first
            if old != local.parent and now - old.stat().st_mtime > STALE_SECONDS:
                if old.is_dir():
                    shutil.rmtree(old, ignore_errors=True)
                else:
                    old.unlink()
    return local
