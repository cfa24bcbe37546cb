"""S3 transfers for datasets and checkpoints (boto3; credentials from EKS Pod Identity on the cluster)."""

from __future__ import annotations

import os
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig

# Checkpoint shards are large: multipart with several threads.
TRANSFER = TransferConfig(multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=8)


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"not an s3://bucket/key URI: {uri!r}")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key.rstrip("/")


def client():
    return boto3.client("s3")


def download_file(bucket: str, key: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    client().download_file(bucket, key, str(tmp), Config=TRANSFER)
    os.replace(tmp, dest)


def upload_dir(local: Path, bucket: str, prefix: str, skip: set[str] = frozenset()) -> list[str]:
    """Upload every file under `local` to s3://bucket/prefix/..., except names in `skip`."""
    s3 = client()
    keys = []
    for path in sorted(p for p in local.rglob("*") if p.is_file() and p.name not in skip):
        key = f"{prefix}/{path.relative_to(local).as_posix()}"
        s3.upload_file(str(path), bucket, key, Config=TRANSFER)
        keys.append(key)
    return keys


def upload_file(path: Path, bucket: str, key: str) -> None:
    client().upload_file(str(path), bucket, key, Config=TRANSFER)


def list_prefixes(bucket: str, prefix: str) -> list[str]:
    """Immediate 'subdirectories' of prefix/ (without the trailing slash)."""
    paginator = client().get_paginator("list_objects_v2")
    found = []
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/", Delimiter="/"):
        found += [p["Prefix"].rstrip("/").rsplit("/", 1)[-1] for p in page.get("CommonPrefixes", [])]
    return found


def exists(bucket: str, key: str) -> bool:
    response = client().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    return any(o["Key"] == key for o in response.get("Contents", []))


def download_prefix(bucket: str, prefix: str, dest: Path) -> None:
    paginator = client().get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for obj in page.get("Contents", []):
            download_file(bucket, obj["Key"], dest / obj["Key"][len(prefix) + 1 :])
