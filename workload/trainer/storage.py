"""S3 transfers for datasets and checkpoints (boto3; credentials from EKS Pod Identity on the cluster)."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3
from boto3.s3.transfer import TransferConfig

# Checkpoint shards are large: multipart with several threads.
TRANSFER = TransferConfig(multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=8)
# Files fetched at once (a restart's checkpoint, a dataset's shards): one at a time left a node's
# network idle between files, most of a restart's fetch for many small shards.
FILES_IN_FLIGHT = 8


def split_s3_uri(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"not an s3://bucket/key URI: {uri!r}")
    bucket, _, key = uri[5:].partition("/")
    return bucket, key.rstrip("/")


def client():
    return boto3.client("s3")


def download_file(bucket: str, key: str, dest: Path, s3=None) -> None:
    """One object to `dest`, whole or not at all: it lands under a `.part` name of its own (two pods
    on a node, each its own PID namespace, may fetch the same object into a cache they share), then
    is renamed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{uuid.uuid4().hex}.part")
    (s3 or client()).download_file(bucket, key, str(tmp), Config=TRANSFER)
    os.replace(tmp, dest)


def download_files(bucket: str, wanted: list[tuple[str, Path]]) -> None:
    """Each (key, target), FILES_IN_FLIGHT at a time, through one client (a boto3 client is safe to
    share between threads; making one per thread is not); the first failure is raised once every
    started download has ended."""
    if not wanted:
        return
    s3 = client()
    with ThreadPoolExecutor(
        max_workers=min(FILES_IN_FLIGHT, len(wanted)), thread_name_prefix="s3-fetch"
    ) as pool:
        started = [pool.submit(download_file, bucket, key, target, s3) for key, target in wanted]
    for done in started:
        done.result()


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


def read_bytes(bucket: str, key: str) -> bytes | None:
    """An object's bytes, whole, in memory; None when there is none."""
    s3 = client()
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        return None


def read_text(bucket: str, key: str) -> str | None:
    """A small object's text; None when there is none."""
    found = read_bytes(bucket, key)
    return None if found is None else found.decode()


def write_text(text: str, bucket: str, key: str) -> None:
    client().put_object(Bucket=bucket, Key=key, Body=text.encode())


def delete_prefix(bucket: str, prefix: str) -> None:
    """Delete every object under prefix/ (a delete marker each, on a versioned bucket)."""
    s3 = client()
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:  # a page holds at most 1,000 keys, DeleteObjects' limit
            s3.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})


def delete_object(bucket: str, key: str) -> None:
    """Delete one object (a delete marker, on a versioned bucket); none there is no error."""
    client().delete_object(Bucket=bucket, Key=key)


def etag(bucket: str, key: str) -> str:
    """The object's ETag, without its quotes: a new upload under the same key has another."""
    return client().head_object(Bucket=bucket, Key=key)["ETag"].strip('"')


def exists(bucket: str, key: str) -> bool:
    response = client().list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    return any(o["Key"] == key for o in response.get("Contents", []))


def local_path(dest: Path, bucket: str, prefix: str, key: str) -> Path | None:
    """Where the object `key` under prefix/ lands in `dest`; None for a directory marker (a key
    ending in /, as pyarrow's create_dir writes). A key that would land outside `dest` (`..`, an
    absolute path) is refused: whoever can write the prefix must not write the node elsewhere."""
    relative = key[len(prefix) + 1 :]
    if relative.endswith("/"):
        return None
    base = dest.resolve()
    target = (base / relative).resolve()
    if relative.startswith("/") or not target.is_relative_to(base) or target == base:
        raise ValueError(
            f"refusing s3://{bucket}/{key}: it would be written to {target}, outside {base}; "
            f"keys under s3://{bucket}/{prefix}/ must be relative paths inside it"
        )
    return target


def download_prefix(bucket: str, prefix: str, dest: Path) -> None:
    """Every object under prefix/ into dest, keys checked before anything is written."""
    paginator = client().get_paginator("list_objects_v2")
    keys = [
        o["Key"]
        for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/")
        for o in page.get("Contents", [])
    ]
    targets = {key: local_path(dest, bucket, prefix, key) for key in keys}
    download_files(bucket, [(key, target) for key, target in targets.items() if target is not None])
