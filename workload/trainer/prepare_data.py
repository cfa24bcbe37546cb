"""Tokenize a text dataset into the trainer's token files (train and validation), locally or to S3.

    python -m trainer.prepare_data --out s3://bucket/datasets/c4-en \\
        --dataset allenai/c4 --config en --tokenizer hf-internal-testing/llama-tokenizer \\
        --max-tokens 2000000000 --val-tokens 10000000

Streams the dataset (never downloads it whole), tokenizes documents in batches, appends the end-of-
text token after each, and writes `train.bin` and `val.bin` in the trainer's format (uint16 token
ids for vocabularies up to 65,536). Every `--val-every`-th document goes to validation until it
holds `--val-tokens`. Progress is printed and saved in `progress.json` beside the files: a run that
is stopped resumes where it left off (the same documents, the same bytes). With an s3:// `--out`,
files are built in `--work-dir` (keep it on a volume to resume) and uploaded when done.

`--dataset` is anything `datasets.load_dataset` takes (a hub name, or `json` with `--data-files`);
`--tokenizer` a `tokenizer.json` path or a hub repository holding one. The defaults match the
reference FSDP runs: allenai/c4 `en` and the Llama tokenizer (32,000 tokens, the model's vocabulary).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

from trainer import storage
from trainer.data import token_dtype

PROGRESS = "progress.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory or s3://bucket/prefix for train.bin, val.bin")
    p.add_argument("--dataset", default="allenai/c4")
    p.add_argument("--config", default="en", help="dataset configuration (empty: none)")
    p.add_argument("--data-files", nargs="*", default=None, help="for local formats such as json")
    p.add_argument("--split", default="train")
    p.add_argument("--text-field", default="text")
    p.add_argument("--tokenizer", default="hf-internal-testing/llama-tokenizer")
    p.add_argument("--eos-token", default="</s>")
    p.add_argument("--max-tokens", type=float, default=1e9, help="stop after this many training tokens")
    p.add_argument(
        "--max-documents", type=int, default=0, help="stop after this many documents (0: no limit)"
    )
    p.add_argument("--val-tokens", type=float, default=1e7)
    p.add_argument("--val-every", type=int, default=100, help="every N-th document is held out")
    p.add_argument("--batch-documents", type=int, default=256)
    p.add_argument("--progress-every", type=float, default=30.0, help="seconds between progress lines")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/trainstack-prepare"))
    return p.parse_args(argv)


def load_tokenizer(name: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(name) if Path(name).is_file() else Tokenizer.from_pretrained(name)


def documents(args: argparse.Namespace, skip: int):
    from datasets import load_dataset

    stream = load_dataset(
        args.dataset, args.config or None, data_files=args.data_files, split=args.split, streaming=True
    )
    return (row[args.text_field] for row in stream.skip(skip))


class Progress:
    """Documents read and tokens written, saved after every batch, so a rerun resumes exactly."""

    def __init__(self, directory: Path):
        self.path = directory / PROGRESS
        saved = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.documents = saved.get("documents", 0)
        self.tokens = {"train": saved.get("train_tokens", 0), "val": saved.get("val_tokens", 0)}
        self.done = saved.get("done", False)

    def save(self, done: bool = False) -> None:
        self.done = done
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(
            json.dumps(
                {
                    "documents": self.documents,
                    "train_tokens": self.tokens["train"],
                    "val_tokens": self.tokens["val"],
                    "done": done,
                }
            )
        )
        tmp.replace(self.path)


def prepare(args: argparse.Namespace) -> dict:
    remote = args.out.startswith("s3://")
    key = hashlib.sha256(args.out.encode()).hexdigest()[:12]
    directory = args.work_dir / key if remote else Path(args.out)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(args.tokenizer)
    eos = tokenizer.token_to_id(args.eos_token)
    if eos is None:
        raise SystemExit(f"--eos-token {args.eos_token!r} is not in the tokenizer's vocabulary")
    dtype = token_dtype(tokenizer.get_vocab_size())
    progress = Progress(directory)
    files = {}
    for split in ("train", "val"):
        path = directory / f"{split}.bin"
        path.touch()
        # Bytes written after the last saved progress (a stop mid-batch) are dropped.
        with path.open("r+b") as f:
            f.truncate(progress.tokens[split] * dtype.itemsize)
        files[split] = path.open("ab")
    started, last_line = time.monotonic(), 0.0
    resumed = progress.documents
    limit_tokens, val_tokens = int(args.max_tokens), int(args.val_tokens)
    try:
        batch: list[tuple[int, str]] = []
        for text in documents(args, progress.documents):
            batch.append((progress.documents + len(batch), text))
            if len(batch) == args.batch_documents:
                write_batch(batch, tokenizer, eos, dtype, files, progress, args, val_tokens)
                batch = []
                if time.monotonic() - last_line >= args.progress_every:
                    last_line = time.monotonic()
                    report(progress, started, resumed)
            if progress.tokens["train"] >= limit_tokens or (
                args.max_documents and progress.documents + len(batch) >= args.max_documents
            ):
                break
        if batch:
            write_batch(batch, tokenizer, eos, dtype, files, progress, args, val_tokens)
    finally:
        for f in files.values():
            f.close()
    progress.save(done=True)
    report(progress, started, resumed)
    if remote:
        bucket, prefix = storage.split_s3_uri(args.out)
        for name in ("train.bin", "val.bin", PROGRESS):
            storage.upload_file(directory / name, bucket, f"{prefix}/{name}")
    return {"documents": progress.documents, **{f"{k}_tokens": v for k, v in progress.tokens.items()}}


def write_batch(batch, tokenizer, eos, dtype, files, progress: Progress, args, val_tokens: int) -> None:
    encoded = tokenizer.encode_batch([text for _, text in batch], add_special_tokens=False)
    chunks: dict[str, list[np.ndarray]] = {"train": [], "val": []}
    added = {"train": 0, "val": 0}
    for (index, _), enc in zip(batch, encoded, strict=True):
        ids = np.fromiter((*enc.ids, eos), dtype=np.int64)
        held_out = (
            index % args.val_every == args.val_every - 1
            and progress.tokens["val"] + added["val"] < val_tokens
        )
        split = "val" if held_out else "train"
        chunks[split].append(ids)
        added[split] += len(ids)
    for split, parts in chunks.items():
        if parts:
            files[split].write(np.concatenate(parts).astype(dtype).tobytes())
            files[split].flush()
    progress.documents += len(batch)
    for split, n in added.items():
        progress.tokens[split] += n
    progress.save()


def report(progress: Progress, started: float, resumed: int) -> None:
    elapsed = max(1e-9, time.monotonic() - started)
    print(
        "prepare "
        + json.dumps(
            {
                "documents": progress.documents,
                "train_tokens": progress.tokens["train"],
                "val_tokens": progress.tokens["val"],
                "documents_per_s": round((progress.documents - resumed) / elapsed, 1),
                "done": progress.done,
            }
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    prepare(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
