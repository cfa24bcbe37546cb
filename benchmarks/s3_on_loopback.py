"""S3 for the benchmarks' training processes: moto's server on loopback, the environment that points
this process and the ones it starts at it, and the bucket `drill`."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

import boto3
from moto.server import ThreadedMotoServer

BUCKET = "drill"


@contextlib.contextmanager
def s3_on_loopback() -> Iterator[None]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the S3 server's line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
    )
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    try:
        yield
    finally:
        server.stop()
