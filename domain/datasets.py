"""A dataset the stack prepares into its bucket: what `python -m trainer.prepare_data` is run with
(workload/trainer/prepare_data.py `parse_args`), where its files land, and the digest of its spec
that names both the Kubernetes Job and the files' directory, so a changed spec prepares again
beside the old files (jobs still reading them keep them) instead of resuming from the old
`progress.json`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

# What prepare_data writes into `--out` (its `prepare`: train.bin, val.bin beside progress.json).
TRAIN_FILE = "train.bin"
VAL_FILE = "val.bin"
DIGEST_CHARS = 10
# prepare_data writes uint16 token ids for a vocabulary up to 65,536 (the model's is 32,000), uint32
# beyond: 2 bytes a token for every tokenizer the default trainer takes.
BYTES_PER_TOKEN = 2
# Streaming the source and tokenizing it on one system node, assumed (no run measured here): the
# Rust tokenizers encode a few million tokens a second per core, so the source's download, about
# 4 bytes of text a token, is what bounds it; 1M tokens/s is ~4 MB/s of text.
ASSUMED_TOKENS_PER_SECOND = 1_000_000


@dataclass(frozen=True)
class DatasetSpec:
    """Everything that decides the prepared bytes; nothing else (a wait time, say) enters the digest."""

    name: str
    source: str
    config: str
    split: str
    text_field: str
    tokenizer: str
    eos_token: str
    max_tokens: int
    val_tokens: int

    @property
    def digest(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]

    @property
    def directory(self) -> str:
        """Under the bucket's datasets/ prefix."""
        return f"{self.name}/{self.digest}/"

    def prepare_args(self, out: str) -> list[str]:
        """prepare_data's flags, each value as its own argument."""
        return [
            "--out",
            out,
            "--dataset",
            self.source,
            "--config",
            self.config,
            "--split",
            self.split,
            "--text-field",
            self.text_field,
            "--tokenizer",
            self.tokenizer,
            "--eos-token",
            self.eos_token,
            "--max-tokens",
            str(self.max_tokens),
            "--val-tokens",
            str(self.val_tokens),
        ]


def prepared_size_gb(spec: DatasetSpec) -> float:
    """The train and validation files' size in GB (1e9 bytes)."""
    return (spec.max_tokens + spec.val_tokens) * BYTES_PER_TOKEN / 1e9


def preparation_minutes(spec: DatasetSpec) -> float:
    """The preparation's time at ASSUMED_TOKENS_PER_SECOND."""
    return (spec.max_tokens + spec.val_tokens) / ASSUMED_TOKENS_PER_SECOND / 60
