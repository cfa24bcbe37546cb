"""Prepare a public dataset in VERL's RL format (parquet), as a VERL job's init container does.

    python -m trainer.verl_data --dataset gsm8k --out /data/gsm8k

Each row: `data_source`, a chat `prompt`, `ability`, `reward_model` (`style: rule` and the
`ground_truth` VERL's rule-based reward compares with: for GSM8K the number after `####`), and
`extra_info` (split, index). VERL picks the reward function by `data_source`.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SOURCES = {"gsm8k": ("openai/gsm8k", "main")}
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def gsm8k_answer(solution: str) -> str:
    """The final number of a GSM8K solution (`... #### 72`), without thousands separators."""
    found = re.search(r"####\s*(-?[0-9.,]+)", solution)
    if found is None:
        raise ValueError(f"no '#### <answer>' in solution: {solution[-80:]!r}")
    return found.group(1).replace(",", "")


def gsm8k_row(example: dict, index: int, split: str) -> dict:
    return {
        "data_source": SOURCES["gsm8k"][0],
        "prompt": [{"role": "user", "content": f"{example['question']} {INSTRUCTION}"}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": gsm8k_answer(example["answer"])},
        "extra_info": {"split": split, "index": index},
    }


def prepare(dataset: str, out: Path, load=None) -> dict[str, int]:
    """Write train.parquet and test.parquet under `out`; returns the rows per file."""
    import datasets

    name, config = SOURCES[dataset]
    load = load or (lambda: datasets.load_dataset(name, config))
    splits = load()
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split in ("train", "test"):
        rows = splits[split].map(
            lambda example, index, s=split: gsm8k_row(example, index, s),
            with_indices=True,
            remove_columns=splits[split].column_names,
        )
        rows.to_parquet(str(out / f"{split}.parquet"))
        counts[split] = len(rows)
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", choices=sorted(SOURCES), default="gsm8k")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    counts = prepare(a.dataset, a.out)
    print(f"verl_data: {a.dataset} -> {a.out}: " + ", ".join(f"{k} {v} rows" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
