"""A stale state lock left by a killed apply is released only when its holder is gone.

Terraform's real ``http`` backend talks to a small lock-and-state server started by the test
(it stands in for the S3 backend's lock object, which needs AWS)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from burst.infra.teardown import destroy_run
from burst.infra.terraform import terraform_argv, terraform_env

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


class LockServer(ThreadingHTTPServer):
    state: bytes | None = None
    lock: dict | None = None
    forced: int = 0


class Handler(BaseHTTPRequestHandler):
    server: LockServer

    def log_message(self, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, code: int, body: bytes = b"") -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.server.state is None:
            self._reply(404)
        else:
            self._reply(200, self.server.state)

    def do_POST(self) -> None:
        self.server.state = self._body()
        self._reply(200)

    def do_DELETE(self) -> None:
        self.server.state = None
        self._reply(200)

    def do_LOCK(self) -> None:
        info = json.loads(self._body() or b"{}")
        if self.server.lock is not None:
            self._reply(423, json.dumps(self.server.lock).encode())
        else:
            self.server.lock = info
            self._reply(200)

    def do_UNLOCK(self) -> None:
        body = self._body()
        if not body:  # force-unlock sends no lock info
            self.server.forced += 1
        self.server.lock = None
        self._reply(200)


@pytest.fixture
def lock_server() -> Iterator[LockServer]:
    srv = LockServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()


def _workdir(tmp_path: Path, srv: LockServer, sleep_s: int) -> Path:
    port = srv.server_address[1]
    wd = tmp_path / "terraform"
    wd.mkdir()
    (wd / "main.tf").write_text(f"""
terraform {{
  backend "http" {{
    address        = "http://127.0.0.1:{port}/state"
    lock_address   = "http://127.0.0.1:{port}/lock"
    unlock_address = "http://127.0.0.1:{port}/lock"
  }}
}}
resource "terraform_data" "first" {{}}
resource "terraform_data" "slow" {{
  depends_on = [terraform_data.first]
  provisioner "local-exec" {{ command = "sleep {sleep_s}" }}
}}
""")
    return wd


def _start_apply(wd: Path) -> subprocess.Popen[bytes]:
    env = terraform_env()
    subprocess.run(
        [*terraform_argv(), f"-chdir={wd}", "init", "-input=false"],
        env=env,
        check=True,
        capture_output=True,
    )
    return subprocess.Popen(
        [*terraform_argv(), f"-chdir={wd}", "apply", "-auto-approve", "-input=false"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_locked(srv: LockServer) -> None:
    deadline = time.monotonic() + 60
    while srv.lock is None:
        assert time.monotonic() < deadline, "apply never took the lock"
        time.sleep(0.1)


def test_killed_apply_leaves_a_lock_that_teardown_releases(
    tmp_path: Path, lock_server: LockServer
) -> None:
    wd = _workdir(tmp_path, lock_server, 60)
    apply = _start_apply(wd)
    _wait_locked(lock_server)
    time.sleep(1.0)
    os.killpg(apply.pid, signal.SIGKILL)  # nothing in Terraform can clean up
    apply.wait()
    assert lock_server.lock is not None, "the killed apply's lock should still be held"

    held = lock_server.lock["ID"]
    result = destroy_run(wd, retries=3, backoff_s=0.1)
    assert result.destroyed is True, result
    assert result.resources_remaining == 0
    assert result.stale_locks_released == [held]
    assert lock_server.forced == 1
    assert lock_server.lock is None


def test_lock_of_a_live_apply_is_not_broken(tmp_path: Path, lock_server: LockServer) -> None:
    wd = _workdir(tmp_path, lock_server, 30)
    apply = _start_apply(wd)
    try:
        _wait_locked(lock_server)
        result = destroy_run(wd, retries=1, backoff_s=0.1)
        assert result.destroyed is False
        assert result.stale_locks_released == []
        assert any("state lock" in e for e in result.errors), result
        assert lock_server.forced == 0
        assert lock_server.lock is not None
    finally:
        os.killpg(apply.pid, signal.SIGKILL)
        apply.wait()
