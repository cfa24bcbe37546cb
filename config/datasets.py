"""Datasets config: text datasets the stack tokenizes once into its bucket (datasets/<name>/...)
with the image's `trainer.prepare_data`, for jobs to name; and the rule that a job's own `s3://`
arguments stay where its pods can read."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from config.names import LABEL, NAME_RULE, PROJECT
from config.schema import Reader, setting
from domain.datasets import DatasetSpec

# A Job's name is `prepare-<name>-<digest>`: within a DNS label (63) with the digest.
MAX_DATASET_NAME = 40
_S3_ARG = re.compile(r"s3://([^/\s]+)")


@dataclass(frozen=True)
class DatasetConfig:
    name: str = setting(
        "name", f"Dataset name ({NAME_RULE}; at most {MAX_DATASET_NAME}); jobs name it in jobs[].dataset."
    )
    source: str = setting(
        "source", "Hugging Face dataset to stream (anything datasets.load_dataset takes).", "allenai/c4"
    )
    config: str = setting("config", "The dataset's configuration (empty: none).", "en")
    split: str = setting("split", "The split to read.", "train")
    text_field: str = setting("textField", "The field holding each document's text.", "text")
    tokenizer: str = setting(
        "tokenizer",
        "Hub repository (or tokenizer.json path) of the tokenizer; its vocabulary must be the model's.",
        "hf-internal-testing/llama-tokenizer",
    )
    eos_token: str = setting("eosToken", "End-of-text token appended to each document.", "</s>")
    max_tokens: int = setting(
        "maxTokens", "Training tokens to prepare (1,000-1,000,000,000,000).", 1_000_000_000
    )
    val_tokens: int = setting("valTokens", "Validation tokens to hold out (0-10,000,000,000).", 10_000_000)
    timeout_minutes: int = setting(
        "timeoutMinutes",
        "How long `pulumi up` waits for the preparation to complete (10-2880); jobs naming it wait too.",
        240,
    )

    @property
    def spec(self) -> DatasetSpec:
        return DatasetSpec(
            self.name,
            self.source,
            self.config,
            self.split,
            self.text_field,
            self.tokenizer,
            self.eos_token,
            self.max_tokens,
            self.val_tokens,
        )


def check_datasets(datasets: tuple[DatasetConfig, ...], has_bucket: bool, r: Reader) -> None:
    """`has_bucket`: the stack has its own bucket and pod identities (not a kubeconfig stack)."""
    k = f"{PROJECT}:datasets"
    if datasets and not has_bucket:
        r.problem(
            k,
            [d.name for d in datasets],
            "datasets are prepared into the stack's S3 bucket; a kubeconfig stack has none",
            "no datasets on a kubeconfig stack (prepare one with python -m trainer.prepare_data)",
        )
    for name, n in Counter(d.name for d in datasets).items():
        if n > 1:
            r.problem(k, name, f"name used by {n} datasets", "unique names")
    for i, d in enumerate(datasets):
        if not LABEL.fullmatch(d.name) or len(d.name) > MAX_DATASET_NAME:
            r.problem(
                f"{k}[{i}].name",
                d.name,
                "not a valid dataset name",
                f"{NAME_RULE}; at most {MAX_DATASET_NAME}",
            )
        for key, value in (("source", d.source), ("tokenizer", d.tokenizer), ("split", d.split)):
            if not value.strip():
                r.problem(f"{k}[{i}].{key}", value, "empty", "a non-empty value")
        r.ranges(
            f"{k}[{i}]",
            (
                ("maxTokens", d.max_tokens, 1_000, 10**12),
                ("valTokens", d.val_tokens, 0, 10**10),
                ("timeoutMinutes", d.timeout_minutes, 10, 2880),
            ),
        )


S3_LOCATION = re.compile(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/\S*)?")


def readable(uri: str, reads: tuple[str, ...]) -> bool:
    """Whether `uri` (s3://bucket/key) is within one of `reads` (s3://bucket or s3://bucket/prefix)."""
    return any(uri == r or uri.startswith(r.rstrip("/") + "/") for r in reads)


def check_job_s3_read(reads: tuple[str, ...], own_role: bool, k: str, r: Reader) -> None:
    """`s3Read` is granted in the role the stack makes for the job: nowhere else to grant it."""
    for i, location in enumerate(reads):
        if not S3_LOCATION.fullmatch(location):
            r.problem(
                f"{k}.s3Read[{i}]", location, "not an S3 location", "s3://bucket or s3://bucket/prefix/"
            )
        elif not own_role:
            r.problem(
                f"{k}.s3Read[{i}]",
                location,
                "granted in the job's own Pod Identity role, which the stack makes only on EKS without "
                "existingCluster.podRoleArn",
                "unset (grant it in your own role instead)",
            )


def check_job_s3_args(
    job: str,
    args: tuple[str, ...],
    reachable: str | None,
    datasets: tuple[DatasetConfig, ...],
    k: str,
    r: Reader,
    reads: tuple[str, ...] = (),
) -> None:
    """A job's pods reach only what their identity allows: the stack's bucket (named at `pulumi up`,
    so no arg can name it) for their own checkpoints and the declared datasets, the locations of
    its `s3Read`, or, on a kubeconfig stack, the bucket of `existingCluster.s3`. `reachable`: that
    bucket, or None."""
    for arg in args:
        found = _S3_ARG.search(arg)
        if found is None or found.group(1) == reachable:
            continue
        uri = S3_LOCATION.search(arg)
        if uri is not None and readable(uri.group(0), reads):
            continue
        names = ", ".join(d.name for d in datasets) or "none declared"
        r.problem(
            f"{k}.args",
            arg,
            f"job '{job}' reads {found.group(0)}, outside what its pods can reach (the stack's bucket: "
            "its datasets and the job's own checkpoints)",
            f"a declared dataset named by jobs[].dataset (datasets: {names}), /datasets/... with "
            "storage.datasetsMount, or a location of the job's s3Read",
        )
