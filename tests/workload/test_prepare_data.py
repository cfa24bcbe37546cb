"""trainer.prepare_data on a small dataset and a tokenizer built here (no hub download)."""

from __future__ import annotations

import json

import boto3
import numpy as np
import pytest
from trainer.prepare_data import main

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]


@pytest.fixture
def corpus(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    docs = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + i % 5)) for i in range(120)]
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": d, "id": i}) + "\n" for i, d in enumerate(docs)))
    tokenizer = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(docs, trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tokenizer_file = tmp_path / "tokenizer.json"
    tokenizer.save(str(tokenizer_file))
    return docs, data, tokenizer_file, Tokenizer.from_file(str(tokenizer_file))


def run(corpus, out, *extra: str) -> int:
    _, data, tokenizer_file, _ = corpus
    return main(
        ["--out", str(out), "--dataset", "json", "--config", "", "--data-files", str(data),
         "--tokenizer", str(tokenizer_file), "--val-every", "10", "--batch-documents", "16", *extra]
    )  # fmt: skip


def expected(corpus, split: str) -> list[int]:
    docs, _, _, tokenizer = corpus
    eos = tokenizer.token_to_id("</s>")
    ids: list[int] = []
    for i, doc in enumerate(docs):
        if (i % 10 == 9) == (split == "val"):
            ids += [*tokenizer.encode(doc, add_special_tokens=False).ids, eos]
    return ids


def test_writes_train_and_validation_files_with_eos_between_documents(tmp_path, corpus, capsys):
    assert run(corpus, tmp_path / "out") == 0
    for split in ("train", "val"):
        tokens = np.fromfile(tmp_path / "out" / f"{split}.bin", dtype=np.uint16)
        assert tokens.tolist() == expected(corpus, split)
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert progress["documents"] == 120 and progress["val_tokens"] == len(expected(corpus, "val"))
    assert '"documents": 120' in capsys.readouterr().out  # a progress line


def test_a_stopped_run_resumes_to_the_same_bytes(tmp_path, corpus):
    run(corpus, tmp_path / "once")
    run(corpus, tmp_path / "twice", "--max-documents", "40")
    assert json.loads((tmp_path / "twice" / "progress.json").read_text())["documents"] == 40
    with (tmp_path / "twice" / "train.bin").open("ab") as f:
        f.write(b"\x07\x00" * 5)  # a batch half-written when the pod died: dropped on resume
    run(corpus, tmp_path / "twice")
    for split in ("train.bin", "val.bin"):
        assert (tmp_path / "once" / split).read_bytes() == (tmp_path / "twice" / split).read_bytes()


def test_token_budgets_stop_the_run(tmp_path, corpus):
    run(corpus, tmp_path / "out", "--max-tokens", "50", "--val-tokens", "10")
    progress = json.loads((tmp_path / "out" / "progress.json").read_text())
    assert 50 <= progress["train_tokens"] < 50 + 16 * 10  # stops within the batch that crossed it
    assert progress["documents"] < 120


def test_uploads_to_s3(tmp_path, corpus, fake_aws):
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="data")
        run(corpus, "s3://data/datasets/tiny", "--work-dir", str(tmp_path / "work"))
        keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="data")["Contents"])
        assert keys == ["datasets/tiny/progress.json", "datasets/tiny/train.bin", "datasets/tiny/val.bin"]
        body = s3.get_object(Bucket="data", Key="datasets/tiny/val.bin")["Body"].read()
        assert np.frombuffer(body, dtype=np.uint16).tolist() == expected(corpus, "val")


def test_the_trainer_reads_what_it_writes(tmp_path, corpus):
    from trainer.data import TokenWindows

    run(corpus, tmp_path / "out")
    windows = TokenWindows(tmp_path / "out" / "train.bin", 256, 8, rank=0, world_size=1)
    x, _ = windows.batch(0, 2)
    assert x.shape == (2, 8) and int(x.max()) < corpus[3].get_vocab_size()
