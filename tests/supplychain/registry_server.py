"""A real OCI registry on loopback for the tests: Debian's ``docker-registry`` (distribution 2.8).

Started on 127.0.0.1 and a free port with a config file of our own and a temporary storage
directory; stopped with SIGTERM (SIGKILL after 10 s). When the binary is missing and we run as
root with apt-get, it is installed (``apt-get install -y docker-registry``, after
``apt-get update`` if needed); otherwise the fixture fails with the command to run.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import requests

BINARIES = ("docker-registry", "registry")
INSTALL = "apt-get update && apt-get install -y docker-registry"


def find_or_install_registry() -> str:
    for name in BINARIES:
        path = shutil.which(name)
        if path:
            return path
    if os.geteuid() == 0 and shutil.which("apt-get"):
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        cmd = ["apt-get", "install", "-y", "-q", "docker-registry"]
        if subprocess.run(cmd, env=env, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            subprocess.run(cmd, env=env, capture_output=True, check=False)
        for name in BINARIES:
            path = shutil.which(name)
            if path:
                return path
    raise RuntimeError(f"docker-registry is not installed; run: {INSTALL}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalRegistry:
    binary: str
    workdir: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> LocalRegistry:
        self.port = free_port()
        storage = self.workdir / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: 127.0.0.1:{self.port}\n  secret: {secrets.token_hex(16)}\n",
            encoding="utf-8",
        )
        log = (self.workdir / "registry.log").open("wb")
        self.proc = subprocess.Popen(
            [self.binary, "serve", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"docker-registry exited with {self.proc.returncode}: "
                    + (self.workdir / "registry.log").read_text(errors="replace")[-500:]
                )
            try:
                if requests.get(f"http://{self.host}/v2/", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("docker-registry did not answer on /v2/ within 30 s")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
