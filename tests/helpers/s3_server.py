"""An S3-compatible server for tests: moto's server mode (``moto[server]``) on a loopback port.

It speaks the S3 HTTP API, so the artifact store talks to it exactly as to real object storage
(boto3 over HTTP). moto accepts any credentials; test ones are set where none are.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from agent_worker.cli.devserver import free_port

TEST_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def s3_server() -> Iterator[str]:
    """Run the server for the block; yields its endpoint URL (``http://127.0.0.1:PORT``)."""
    from moto.server import ThreadedMotoServer

    added = [k for k in TEST_CREDENTIALS if k not in os.environ]
    for key in added:
        os.environ[key] = TEST_CREDENTIALS[key]
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key in added:
            os.environ.pop(key, None)


def new_bucket(endpoint: str) -> str:
    """A fresh, empty bucket on the server at ``endpoint``."""
    import boto3

    name = f"artifacts-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name
