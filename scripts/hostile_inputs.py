# ruff: noqa: E501  (a table of cases: long literal lines read better unwrapped)
"""A hostile tester's battery: bad inputs against every ``burst`` command, each in a subprocess
with a time limit, checked against the project's bar for bad input (README "Exit codes"):
one line naming what is wrong and where, exit 2 (bad input), 3 (refused) or 4 (infrastructure),
no traceback, no "unexpected error", no hang, nothing provisioned.

    python scripts/hostile_inputs.py [-k SUBSTRING] [--jobs N] [--json OUT]

Each case runs in a scratch directory of its own (the quickstart's examples/ linked in), so a
run directory or Terraform state left behind is seen. Nothing here talks to the internet: the
"remote" endpoints are loopback servers started by the script (one that never answers, one
that answers garbage) or closed ports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8")
BAD = "bad input"


@dataclass
class Case:
    name: str
    args: list[str]
    files: dict[str, str | bytes] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    expect: tuple[int, ...] = (2,)
    timeout: float = 60.0
    setup: Callable[[Path], None] | None = None
    lines: int = 1  # at most this many stderr lines
    where: str | None = None  # a text the error must contain (file, field, variable)


@dataclass
class Result:
    case: str
    code: int | None
    err_lines: int
    problems: list[str]
    first: str
    seconds: float


def spec_with(old: str, new: str) -> str:
    assert old in QUICKSTART, old
    return QUICKSTART.replace(old, new, 1)


# --------------------------------------------------------------------------- loopback servers


class Silent:
    """Accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)


class Garbage(Silent):
    """Answers every connection with bytes that are not HTTP."""

    def _run(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                c.recv(65536)
                c.sendall(b"\x00\xffSSH-2.0-garbage\r\n\r\nnot http at all\n" * 4)
            except OSError:
                pass
            c.close()


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# --------------------------------------------------------------------------- cases


def spec_cases() -> list[Case]:
    """Every way a job spec can be wrong, through validate --offline (and a few commands)."""
    sub = spec_with
    specs: dict[str, str | bytes] = {
        "empty": "",
        "only-comment": "# nothing\n",
        "null": "null\n",
        "list": "- a\n- b\n",
        "scalar": "hello\n",
        "json-object": json.dumps({"name": "x"}),
        "json-full": "",  # filled below
        "binary": bytes(range(256)) * 4,
        "latin1": QUICKSTART.replace("Example Labs", "Exämple Labs").encode("latin-1"),
        "utf16": QUICKSTART.encode("utf-16"),
        "bom": "\ufeff" + QUICKSTART,
        "crlf": QUICKSTART.replace("\n", "\r\n"),
        "cr-only": QUICKSTART.replace("\n", "\r"),
        "tabs": QUICKSTART.replace("  name: Example", "\tname: Example"),
        "nul-byte": QUICKSTART.replace("alice", "al\x00ice"),
        "long-line": sub("owner: alice", "owner: " + "a" * 1_000_000),
        "long-key": QUICKSTART + "k" * 100_000 + ": 1\n",
        "deep-flow": "a: " + "[" * 5000 + "]" * 5000 + "\n",
        "deep-block": "".join("  " * i + f"k{i}:\n" for i in range(3000)),
        "deep-flow-map": "a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n",
        "alias-bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}" + f",*{chr(97 + i)}" * 9 + "]\n"
            for i in range(8)
        ),
        "recursive-alias": "a: &a [*a]\n",
        "undefined-alias": QUICKSTART + "x: *nope\n",
        "python-tag": sub("owner: alice", "owner: !!python/object/apply:os.system ['true']"),
        "custom-tag": sub("owner: alice", "owner: !secret alice"),
        "binary-tag": sub("owner: alice", "owner: !!binary aGVsbG8="),
        "set-tag": sub("owner: alice", "owner: !!set {a, b}"),
        "omap-tag": sub("owner: alice", "owner: !!omap [a: 1]"),
        "timestamp-owner": sub("owner: alice", "owner: 2026-01-01"),
        "bad-date": sub("owner: alice", "owner: 2026-13-45"),
        "feb30": sub("owner: alice", "owner: 2026-02-30"),
        "merge-key": sub(
            "organization:\n", "base: &b {name: X, headquarters: SG}\norganization:\n  <<: *b\n"
        ),
        "merge-bad": sub("organization:\n", "organization:\n  <<: 5\n"),
        "merge-list": sub("organization:\n", "organization:\n  <<: [1, 2]\n"),
        "dup-top": QUICKSTART + "budget:\n  max_usd: 1\n  max_hours: 1\n",
        "dup-nested": sub("  max_hours: 24", "  max_hours: 24\n  max_hours: 25"),
        "dup-null-key": QUICKSTART + "~: 1\n~: 2\n",
        "null-key": QUICKSTART + "~: 1\n",
        "int-key": QUICKSTART + "1: 1\n",
        "complex-key": QUICKSTART + "? [a, b]\n: 1\n",
        "multi-doc": QUICKSTART + "---\nname: other\n",
        "two-empty-docs": "---\n---\n",
        "yaml-directive": "%YAML 1.1\n---\n" + QUICKSTART,
        "bad-directive": "%YAML 9.9\n---\n" + QUICKSTART,
        "tag-directive": "%TAG ! tag:evil.com,2000:\n---\n" + QUICKSTART,
        "steps-true": sub("steps: 30", "steps: true"),
        "steps-string": sub("steps: 30", 'steps: "30"'),
        "steps-float": sub("steps: 30", "steps: 30.5"),
        "steps-float-int": sub("steps: 30", "steps: 30.0"),
        "steps-neg": sub("steps: 30", "steps: -1"),
        "steps-zero": sub("steps: 30", "steps: 0"),
        "steps-1e16": sub("steps: 30", "steps: 1e16"),
        "steps-huge-int": sub("steps: 30", "steps: " + "9" * 100),
        "steps-hex": sub("steps: 30", "steps: 0x1e"),
        "steps-octal": sub("steps: 30", "steps: 0o36"),
        "steps-sexagesimal": sub("steps: 30", "steps: 1:30"),
        "steps-underscore": sub("steps: 30", "steps: 3_0"),
        "steps-null": sub("steps: 30", "steps: null"),
        "steps-list": sub("steps: 30", "steps: [30]"),
        "steps-map": sub("steps: 30", "steps: {a: 1}"),
        "steps-inf": sub("steps: 30", "steps: .inf"),
        "seed-2^70": sub("seed: 1234", "seed: 1180591620717411303424"),
        "seed-neg": sub("seed: 1234", "seed: -5"),
        "lr-nan": sub("learning_rate: 0.01", "learning_rate: .nan"),
        "lr-inf": sub("learning_rate: 0.01", "learning_rate: .inf"),
        "lr-1e999": sub("learning_rate: 0.01", "learning_rate: 1e999"),
        "lr-string-nan": sub("learning_rate: 0.01", 'learning_rate: "nan"'),
        "lr-zero": sub("learning_rate: 0.01", "learning_rate: 0"),
        "lr-tiny": sub("learning_rate: 0.01", "learning_rate: 1e-320"),
        "size-neg": sub("size_gb: 0.01", "size_gb: -1"),
        "size-huge": sub("size_gb: 0.01", "size_gb: 1e300"),
        "params-zero": sub("parameters: 1.0e5", "parameters: 0"),
        "params-tiny": sub("parameters: 1.0e5", "parameters: 1e-300"),
        "gpu-count-0": sub("gpu_count: 8", "gpu_count: 0"),
        "gpu-count-huge": sub("gpu_count: 8", "gpu_count: 100000"),
        "budget-zero": sub("max_usd: 5000", "max_usd: 0"),
        "budget-neg-hours": sub("max_hours: 24", "max_hours: -1"),
        "budget-tiny-hours": sub("max_hours: 24", "max_hours: 1e-300"),
        "budget-tiny-usd": sub("max_usd: 5000", "max_usd: 1e-300"),
        "interval-0": sub("interval_steps: 5", "interval_steps: 0"),
        "interval-str": sub("interval_steps: 5", "interval_steps: often"),
        "interval-gt-steps": sub("interval_steps: 5", "interval_steps: 1000000000"),
        "keep-full-0": sub("keep_full: 2", "keep_full: 0"),
        "name-upper": sub("name: quickstart", "name: QuickStart"),
        "name-long": sub("name: quickstart", "name: " + "a" * 100),
        "name-unicode": sub("name: quickstart", "name: qüick"),
        "name-empty": sub("name: quickstart", 'name: ""'),
        "owner-rtl": sub("owner: alice", "owner: \u202ealice\u202c"),
        "owner-emoji": sub("owner: alice", "owner: 🙂"),
        "owner-control": sub("owner: alice", 'owner: "al\\x07ice\\x1b[31m"'),
        "owner-newline": sub("owner: alice", 'owner: "al\\nice"'),
        "owner-whitespace": sub("owner: alice", 'owner: "   "'),
        "team-5000": sub("team: ml-research", "team: " + "t" * 5000),
        "hq-lower": sub("headquarters: SG", "headquarters: sg"),
        "hq-unknown": sub("headquarters: SG", "headquarters: ZZ"),
        "origin-bad": sub("origin: SG", "origin: Singapore"),
        "class-bad": sub("classification: internal", "classification: secret"),
        "capacity-bad": sub("capacity: spot_with_fallback", "capacity: cheap"),
        "regions-empty": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]", "regions: []"
        ),
        "regions-dup": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]",
            "regions: [ap-southeast-1, ap-southeast-1]",
        ),
        "regions-int": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]", "regions: [1, 2]"
        ),
        "regions-string": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]", "regions: ap-southeast-1"
        ),
        "regions-unknown": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]", "regions: [mars-north-1]"
        ),
        "regions-path": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]", "regions: ['../../etc']"
        ),
        "regions-many": sub(
            "regions: [ap-southeast-1, ap-southeast-3, me-central-1]",
            "regions: [" + ",".join(f"r{i}" for i in range(100)) + "]",
        ),
        "providers-unknown": sub("providers: [aws]", "providers: [evilcloud]"),
        "gpu-unknown": sub("gpu_type: h100", "gpu_type: voodoo5"),
        "gpu-type-path": sub("gpu_type: h100", "gpu_type: ../../x"),
        "entrypoint-bad": sub("entrypoint: burst.train.example:build", "entrypoint: 'os:system'"),
        "entrypoint-syntax": sub(
            "entrypoint: burst.train.example:build", "entrypoint: 'not a module'"
        ),
        "image-tag": sub(
            "reference: oci-layout://examples/images/quickstart-oci@sha256:cecc7e52a847230838532d5bba9605ef9759cb030385fad3925ec84a3b388409",
            "reference: nginx:latest",
        ),
        "key-empty": sub("trusted_key: burst-dev", 'trusted_key: ""'),
        "key-traversal": sub("trusted_key: burst-dev", "trusted_key: ../../etc/passwd"),
        "uri-http": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: http://example.com/x"
        ),
        "uri-s3-nobucket": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3:///prefix"
        ),
        "uri-s3-upper": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3://BUCKET/x"
        ),
        "uri-s3-space": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 's3://bucket/a b'"
        ),
        "uri-s3-dotdot": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3://bucket/../../x"
        ),
        "uri-file-empty": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 'file://'"
        ),
        "uri-file-nul": sub(
            "checkpoint_uri: file://runs/checkpoints", 'checkpoint_uri: "file://a\\0b"'
        ),
        "uri-file-newline": sub(
            "checkpoint_uri: file://runs/checkpoints", 'checkpoint_uri: "file://a\\nb"'
        ),
        "uri-gs": sub("checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: gs://bucket/x"),
        "uri-javascript": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 'javascript:alert(1)'"
        ),
        "uri-s3-query": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 's3://bucket?x=1'"
        ),
        "uri-s3-fragment": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 's3://bucket/x#frag'"
        ),
        "uri-s3-creds": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 's3://AKIA:secret@bucket/x'"
        ),
        "uri-file-remote-host": sub(
            "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: 'file://otherhost/x'"
        ),
        "replica-same": sub(
            "checkpoint_uri: file://runs/checkpoints",
            "checkpoint_uri: file://runs/checkpoints\n  replica_uri: file://runs/checkpoints/",
        ),
        "replica-dotdot": sub(
            "checkpoint_uri: file://runs/checkpoints",
            "checkpoint_uri: file://runs/checkpoints\n  replica_uri: file://runs/x/../checkpoints",
        ),
        "data-uri-ftp": sub("uri: file://examples/data", "uri: ftp://example.com/data"),
        "data-uri-empty": sub("uri: file://examples/data", 'uri: ""'),
        "data-uri-s3-nobucket": sub("uri: file://examples/data", "uri: s3:///data"),
        "shards-mismatch": sub(
            "  region: ap-southeast-1", "  region: ap-southeast-1\n  shards: {ap-southeast-1: 5}"
        ),
        "shards-nan": sub(
            "  region: ap-southeast-1", "  region: ap-southeast-1\n  shards: {ap-southeast-1: .nan}"
        ),
        "shards-empty": sub("  region: ap-southeast-1", "  region: ap-southeast-1\n  shards: {}"),
        "unknown-field": QUICKSTART + "frobnicate: 1\n",
        "unknown-nested": sub("  max_hours: 24", "  max_hours: 24\n  max_gpus: 3"),
        "api-version": sub("apiVersion: burst/v1", "apiVersion: burst/v2"),
        "missing-storage": QUICKSTART.split("storage:")[0],
        "training-null": sub(
            "  entrypoint: burst.train.example:build",
            "  entrypoint: burst.train.example:build\n  checkpoint: null",
        ).replace(
            "  checkpoint:\n    interval_steps: 5\n    full_every: 2\n    keep_full: 2\n    keep_weights: 3\n",
            "",
        ),
        "processes-huge": sub("  seed: 1234", "  seed: 1234\n  processes_per_node: 100000"),
        "nodes-bool": sub("  seed: 1234", "  seed: 1234\n  nodes: true"),
        "training-ops-inf": sub("  weights: open", "  weights: open\n  training_ops: 1e400"),
        "mtbf-tiny": sub("  providers: [aws]", "  providers: [aws]\n  mtbf_hours: 1e-300"),
        "step-seconds-tiny": sub("  seed: 1234", "  seed: 1234\n  step_seconds: 1e-300"),
        "tokens-huge": sub(
            "  seed: 1234", "  seed: 1234\n  tokens_per_sample: 100000000\n  step_seconds: 86400"
        ),
    }
    specs["json-full"] = json.dumps(
        __import__("yaml").safe_load(QUICKSTART)
    )  # JSON is YAML: a valid spec
    out: list[Case] = []
    for name, text in specs.items():
        expect: tuple[int, ...] = (
            (0,)
            if name
            in (
                "json-full",
                "bom",
                "crlf",
                "yaml-directive",
                "steps-float-int",
                "merge-key",
                "steps-underscore",
            )
            else (2,)
        )
        out.append(
            Case(
                f"spec/{name}",
                ["validate", "--offline", "spec.yaml"],
                {"spec.yaml": text},
                expect=expect + ((2,) if expect == (0,) else ()),
                lines=50,
            )
        )
    return out


def file_kind_cases() -> list[Case]:
    """The spec argument as something that is not a regular file."""

    def fifo(d: Path) -> None:
        os.mkfifo(d / "spec.yaml")

    def loop(d: Path) -> None:
        os.symlink("spec.yaml", d / "spec.yaml")

    def dangling(d: Path) -> None:
        os.symlink("nowhere.yaml", d / "spec.yaml")

    def unreadable(d: Path) -> None:
        (d / "spec.yaml").write_text(QUICKSTART)
        (d / "spec.yaml").chmod(0)

    def dirspec(d: Path) -> None:
        (d / "spec.yaml").mkdir()

    def socket_file(d: Path) -> None:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(d / "spec.yaml"))

    def huge(d: Path) -> None:
        with open(d / "spec.yaml", "wb") as f:
            f.truncate(50 << 20)

    def growing(d: Path) -> None:
        (d / "spec.yaml").write_text("# ok\n")

    setups = {
        "fifo": fifo,
        "symlink-loop": loop,
        "dangling-symlink": dangling,
        "unreadable": unreadable,
        "directory": dirspec,
        "socket": socket_file,
        "sparse-50MB": huge,
        "comment-only": growing,
    }
    out = []
    for cmd in (["validate", "--offline"], ["plan"], ["preflight"], ["run"]):
        for name, fn in setups.items():
            if os.geteuid() == 0 and name == "unreadable":
                continue
            out.append(
                Case(f"file/{cmd[0]}/{name}", [*cmd, "spec.yaml"], setup=fn, timeout=30, lines=3)
            )
    out.append(Case("file/dev-zero", ["validate", "--offline", "/dev/zero"], timeout=30, lines=3))
    out.append(Case("file/dev-stdin", ["validate", "--offline", "/dev/stdin"], timeout=30, lines=3))
    out.append(
        Case("file/proc-self", ["validate", "--offline", "/proc/self/environ"], timeout=30, lines=3)
    )
    out.append(Case("file/missing", ["validate", "--offline", "nope.yaml"], lines=3))
    out.append(Case("file/empty-name", ["validate", "--offline", ""], lines=3))
    out.append(Case("file/dash", ["validate", "--offline", "-"], lines=3))
    out.append(Case("file/nul-in-name", ["plan", "a\udcffb.yaml"], lines=3))
    out.append(
        Case("file/very-long-name", ["validate", "--offline", "a" * 5000 + ".yaml"], lines=3)
    )
    return out


def option_cases() -> list[Case]:
    q = {"spec.yaml": QUICKSTART}
    c = [
        Case("opt/unknown-command", ["frobnicate"]),
        Case("opt/unknown-option", ["validate", "--nope", "spec.yaml"], q),
        Case("opt/plan-seed-huge", ["plan", "spec.yaml", "--seed", "9" * 40], q),
        Case("opt/plan-seed-neg", ["plan", "spec.yaml", "--seed", "-1"], q),
        Case("opt/plan-seed-text", ["plan", "spec.yaml", "--seed", "abc"], q),
        Case("opt/plan-replicas-0", ["plan", "spec.yaml", "--replicas", "0"], q),
        Case("opt/plan-objective", ["plan", "spec.yaml", "--objective", "vibes"], q),
        Case("opt/plan-shard-nan", ["plan", "spec.yaml", "--shard", "ap-southeast-1=nan"], q),
        Case("opt/plan-shard-inf", ["plan", "spec.yaml", "--shard", "ap-southeast-1=inf"], q),
        Case("opt/plan-shard-1e300", ["plan", "spec.yaml", "--shard", "ap-southeast-1=1e300"], q),
        Case("opt/plan-shard-noeq", ["plan", "spec.yaml", "--shard", "ap-southeast-1"], q),
        Case(
            "opt/plan-shard-unknown-region",
            ["plan", "spec.yaml", "--shard", "mars=5"],
            q,
            expect=(0, 2),
        ),
        Case(
            "opt/plan-sync-rounds-huge",
            [
                "plan",
                "spec.yaml",
                "--shard",
                "ap-southeast-1=0.005",
                "--shard",
                "me-central-1=0.005",
                "--sync-rounds",
                "9" * 30,
            ],
            q,
        ),
        Case("opt/plan-floor-neg", ["plan", "spec.yaml", "--floor-nodes", "-1"], q),
        Case("opt/plan-chart-dir", ["plan", "spec.yaml", "--chart", "/"], q),
        Case("opt/plan-chart-unwritable", ["plan", "spec.yaml", "--chart", "/proc/x.png"], q),
        Case("opt/plan-decision-missing", ["plan", "spec.yaml", "--decision", "nope.json"], q),
        Case("opt/plan-catalog-missing", ["plan", "spec.yaml", "--catalog", "nope.yaml"], q),
        Case("opt/plan-catalog-dir", ["plan", "spec.yaml", "--catalog", "."], q),
        Case("opt/preflight-today-bad", ["preflight", "spec.yaml", "--today", "2026-02-30"], q),
        Case(
            "opt/preflight-today-year0",
            ["preflight", "spec.yaml", "--today", "0001-01-01"],
            q,
            expect=(0, 2, 3),
        ),
        Case(
            "opt/preflight-today-9999",
            ["preflight", "spec.yaml", "--today", "9999-12-31"],
            q,
            expect=(0, 2, 3),
        ),
        Case("opt/preflight-age-0", ["preflight", "spec.yaml", "--max-fact-age-days", "0"], q),
        Case(
            "opt/preflight-age-huge", ["preflight", "spec.yaml", "--max-fact-age-days", "100000"], q
        ),
        Case("opt/preflight-policies-missing", ["preflight", "spec.yaml", "--policies", "nope"], q),
        Case(
            "opt/preflight-policies-empty",
            ["preflight", "spec.yaml", "--policies", "empty"],
            q,
            setup=lambda d: (d / "empty").mkdir(),
        ),
        Case(
            "opt/preflight-out-dir",
            ["preflight", "spec.yaml", "--out", "/proc/nope/x.json"],
            q,
            expect=(2,),
        ),
        Case("opt/simulate-nothing", ["simulate"]),
        Case("opt/simulate-mtbf-0", ["simulate", "--mtbf", "0"]),
        Case("opt/simulate-mtbf-neg", ["simulate", "--mtbf", "-5"]),
        Case("opt/simulate-mtbf-nan", ["simulate", "--mtbf", "nan"]),
        Case("opt/simulate-mtbf-inf", ["simulate", "--mtbf", "inf"], expect=(0, 2)),
        Case("opt/simulate-mtbf-1e300", ["simulate", "--mtbf", "1e300"], expect=(0, 2)),
        Case("opt/simulate-mtbf-tiny", ["simulate", "--mtbf", "1e-300"], expect=(0, 2)),
        Case("opt/simulate-step-tiny", ["simulate", "--mtbf", "3600", "--step-time", "1e-300"]),
        Case("opt/simulate-step-0", ["simulate", "--mtbf", "3600", "--step-time", "0"]),
        Case("opt/simulate-notice-neg", ["simulate", "--mtbf", "3600", "--notice", "-1"]),
        Case("opt/simulate-notice-nan", ["simulate", "--mtbf", "3600", "--notice", "nan"]),
        Case("opt/simulate-cost-inf", ["simulate", "--mtbf", "3600", "--checkpoint-cost", "inf"]),
        Case("opt/simulate-cost-neg", ["simulate", "--mtbf", "3600", "--checkpoint-cost", "-1"]),
        Case("opt/simulate-upload-nan", ["simulate", "--mtbf", "3600", "--upload-time", "nan"]),
        Case("opt/simulate-restart-inf", ["simulate", "--mtbf", "3600", "--restart", "inf"]),
        Case(
            "opt/simulate-work-1e300",
            ["simulate", "--mtbf", "3600", "--work", "1e300"],
            expect=(0, 2),
        ),
        Case("opt/simulate-work-0", ["simulate", "--mtbf", "3600", "--work", "0"]),
        Case(
            "opt/simulate-interval-tiny",
            ["simulate", "--mtbf", "3600", "--interval", "1e-300"],
            expect=(0, 2),
        ),
        Case("opt/simulate-interval-nan", ["simulate", "--mtbf", "3600", "--interval", "nan"]),
        Case(
            "opt/simulate-interval-inf",
            ["simulate", "--mtbf", "3600", "--interval", "inf"],
            expect=(0, 2),
        ),
        Case("opt/simulate-seed-huge", ["simulate", "--mtbf", "3600", "--seed", "9" * 50]),
        Case("opt/simulate-seed-neg", ["simulate", "--mtbf", "3600", "--seed", "-3"]),
        Case("opt/simulate-replicas-huge", ["simulate", "--mtbf", "3600", "--replicas", "10001"]),
        Case("opt/simulate-out-dir", ["simulate", "--mtbf", "3600", "--out", "."]),
        Case(
            "opt/simulate-out-unwritable", ["simulate", "--mtbf", "3600", "--out", "/proc/nope/x"]
        ),
        Case("opt/schema-doc-unknown", ["schema", "--document", "nope"]),
        Case("opt/schema-doc-empty", ["schema", "--document", ""]),
        Case("opt/policy-explain-unknown", ["policy", "explain", "NOPE-1"]),
        Case("opt/policy-explain-huge", ["policy", "explain", "x" * 100000]),
        Case("opt/policy-test-k-nomatch", ["policy", "test", "-k", "zzzz-no-such"], expect=(1, 2)),
        Case("opt/run-fail-at-bad", ["run", "spec.yaml", "--fail-at", "nowhere"], q),
        Case("opt/run-runid-bad", ["run", "spec.yaml", "--run-id", "../../etc"], q),
        Case("opt/run-runid-long", ["run", "spec.yaml", "--run-id", "a" * 300], q),
        Case("opt/run-runid-unicode", ["run", "spec.yaml", "--run-id", "rün"], q),
        Case("opt/run-preempt-late", ["run", "spec.yaml", "--preempt-at-step", "30"], q),
        Case("opt/run-preempt-0", ["run", "spec.yaml", "--preempt-at-step", "0"], q),
        Case("opt/run-kill-bad", ["run", "spec.yaml", "--kill-runner-at", "nowhere"], q),
        Case("opt/run-template-missing", ["run", "spec.yaml", "--template", "nope.yaml"], q),
        Case(
            "opt/run-template-garbage",
            ["run", "spec.yaml", "--template", "t.yaml"],
            {**q, "t.yaml": "a: [1, 2\n"},
        ),
        Case(
            "opt/run-template-notwf",
            ["run", "spec.yaml", "--template", "t.yaml"],
            {**q, "t.yaml": "kind: Pod\n"},
        ),
        Case("opt/run-runs-root-file", ["run", "spec.yaml", "--runs-root", "spec.yaml"], q),
        Case("opt/resume-missing", ["resume", "no-such-run"]),
        Case("opt/resume-traversal", ["resume", "../../etc"]),
        Case("opt/resume-empty", ["resume", ""]),
        Case("opt/report-missing", ["report", "no-such-run"]),
        Case("opt/report-traversal", ["report", "../../../etc"]),
        Case("opt/report-file", ["report", "spec.yaml"], q),
        Case(
            "opt/report-html-unwritable",
            ["report", "r1", "--html", "/proc/x/y.html", "--runs-root", "runs"],
            setup=lambda d: _fake_run(d, "r1"),
        ),
        Case("opt/runs-root-file", ["runs", "--runs-root", "spec.yaml"], q, expect=(0, 2)),
        Case("opt/runs-limit-0", ["runs", "--limit", "0"]),
        Case("opt/reap-now-bad", ["reap", "--now", "yesterday"]),
        Case("opt/reap-now-feb30", ["reap", "--now", "2026-02-30T00:00:00Z"]),
        Case("opt/reap-now-huge", ["reap", "--now", "9" * 5000]),
        Case("opt/reap-region-bad", ["reap", "--region", "../../etc"]),
        Case("opt/reap-region-empty", ["reap", "--region", ""]),
        Case(
            "opt/image-verify-tag",
            ["image", "verify", "nginx:latest", "--key", "burst-dev"],
            expect=(2, 3),
        ),
        Case(
            "opt/image-verify-key-traversal",
            ["image", "verify", "x@sha256:" + "0" * 64, "--key", "../../x"],
            expect=(2, 3, 4),
        ),
        Case(
            "opt/image-sign-key-missing",
            ["image", "sign", "x@sha256:" + "0" * 64, "--key", "nope.pem"],
        ),
        Case(
            "opt/image-sign-key-garbage",
            ["image", "sign", "x@sha256:" + "0" * 64, "--key", "k.pem"],
            {"k.pem": "garbage"},
        ),
        Case(
            "opt/image-sign-key-fifo",
            ["image", "sign", "x@sha256:" + "0" * 64, "--key", "k.pem"],
            setup=lambda d: os.mkfifo(d / "k.pem"),
            timeout=30,
        ),
        Case(
            "opt/image-verify-oci-missing",
            ["image", "verify", "oci-layout://nope@sha256:" + "0" * 64, "--key", "burst-dev"],
            expect=(2, 3),
        ),
        Case("opt/image-kyverno-keysdir-missing", ["image", "kyverno", "--keys-dir", "nope"]),
        Case(
            "opt/image-kyverno-out-unwritable", ["image", "kyverno", "--out", "/proc/nope/x.yaml"]
        ),
        Case(
            "opt/compile-out-file", ["compile", "--out", "spec.yaml", "--check"], q, expect=(1, 2)
        ),
        Case("opt/compile-out-unwritable", ["compile", "--out", "/proc/nope"]),
        Case("opt/status-no-server", ["status", "wf", "--no-follow"]),
        Case("opt/finish-spec-missing", ["finish", "wf", "--spec", "nope.yaml"], expect=(2, 4)),
        Case("opt/submit-no-server", ["submit", "spec.yaml"], q),
    ]
    return c


def _fake_run(d: Path, rid: str) -> None:
    (d / "runs" / rid / "docs").mkdir(parents=True)
    (d / "runs" / rid / "spec.yaml").write_text(QUICKSTART)


def document_cases() -> list[Case]:
    """Policy files, catalogs, decision records, traces, run directories."""
    q = {"spec.yaml": QUICKSTART}
    out: list[Case] = []

    def policies_copy(mutate: Callable[[Path], None]) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            shutil.copytree(REPO / "policies", d / "pol", symlinks=True)
            mutate(d / "pol")

        return setup

    muts: dict[str, Callable[[Path], None]] = {
        "settings-age-huge": lambda p: (p / "settings.yaml").write_text(
            "max_fact_age_days: 100000\n"
        ),
        "settings-age-str": lambda p: (p / "settings.yaml").write_text("max_fact_age_days: soon\n"),
        "settings-age-inf": lambda p: (p / "settings.yaml").write_text("max_fact_age_days: .inf\n"),
        "settings-list": lambda p: (p / "settings.yaml").write_text("- 1\n"),
        "settings-empty": lambda p: (p / "settings.yaml").write_text(""),
        "settings-fifo": lambda p: ((p / "settings.yaml").unlink(), os.mkfifo(p / "settings.yaml")),
        "settings-dir": lambda p: ((p / "settings.yaml").unlink(), (p / "settings.yaml").mkdir()),
        "settings-missing": lambda p: (p / "settings.yaml").unlink(),
        "jurisdictions-garbage": lambda p: (p / "jurisdictions.yaml").write_bytes(b"\x00\x01\x02"),
        "jurisdictions-dup": lambda p: (p / "jurisdictions.yaml").write_text(
            (p / "jurisdictions.yaml").read_text() + "\n" + (p / "jurisdictions.yaml").read_text()
        ),
        "jurisdictions-empty": lambda p: (p / "jurisdictions.yaml").write_text(""),
        "regions-bad-date": lambda p: (p / "regions.yaml").write_text(
            (p / "regions.yaml")
            .read_text()
            .replace("last_verified: 20", "last_verified: 2026-02-30 #", 1)
        ),
        "regions-future-date": lambda p: (p / "regions.yaml").write_text(
            __import__("re").sub(
                r"last_verified: \S+",
                "last_verified: 2999-01-01",
                (p / "regions.yaml").read_text(),
                count=1,
            )
        ),
        "providers-list": lambda p: (p / "providers.yaml").write_text("- aws\n"),
        "exception-garbage": lambda p: (p / "exceptions" / "x.yaml").write_text("{{{{"),
        "exception-empty": lambda p: (p / "exceptions" / "x.yaml").write_text(""),
        "exception-fifo": lambda p: os.mkfifo(p / "exceptions" / "x.yaml"),
        "exception-symlink-loop": lambda p: os.symlink("x.yaml", p / "exceptions" / "x.yaml"),
        "exception-dir": lambda p: (p / "exceptions" / "x.yaml").mkdir(),
        "exceptions-missing": lambda p: shutil.rmtree(p / "exceptions"),
        "rego-broken": lambda p: (p / "rules" / "zz.rego").write_text(
            "package burst.zz\nthis is not rego {\n"
        ),
        "rego-binary": lambda p: (p / "rules" / "zz.rego").write_bytes(b"\xff\xfe\x00"),
        "rego-fifo": lambda p: os.mkfifo(p / "rules" / "zz.rego"),
        "rego-huge": lambda p: (p / "rules" / "zz.rego").write_text(
            "package burst.zz\n" + "# x\n" * 2_000_000
        ),
        "rego-loop": lambda p: (p / "rules" / "zz.rego").write_text(
            "package burst.zz\nimport rego.v1\nf(x) := f(x)\ny := f(1)\n"
        ),
        "rules-missing": lambda p: shutil.rmtree(p / "rules"),
        "keys-missing": lambda p: shutil.rmtree(p / "keys"),
        "data-classes-alias-bomb": lambda p: (p / "data_classes.yaml").write_text(
            "a: &a [x,x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
        ),
        "export-python-tag": lambda p: (p / "export.yaml").write_text(
            "x: !!python/name:os.system\n"
        ),
        "gpu-req-garbage": lambda p: (p / "gpu-requirements.yaml").write_text("[1, 2\n"),
    }
    for name, fn in muts.items():
        out.append(
            Case(
                f"policy/check/{name}",
                ["policy", "check", "--policies", "pol"],
                setup=policies_copy(fn),
                timeout=60,
                lines=2,
            )
        )
        if name in (
            "settings-age-huge",
            "rego-broken",
            "regions-bad-date",
            "exception-garbage",
            "settings-fifo",
            "rego-loop",
            "keys-missing",
            "regions-future-date",
        ):
            out.append(
                Case(
                    f"policy/preflight/{name}",
                    ["preflight", "spec.yaml", "--policies", "pol"],
                    q,
                    setup=policies_copy(fn),
                    timeout=60,
                    lines=2,
                    expect=(2, 3),
                )
            )
    out.append(
        Case("policy/env-policies-missing", ["policy", "check"], env={"BURST_POLICIES": "nope"})
    )
    out.append(
        Case(
            "policy/env-policies-file", ["policy", "check"], q, env={"BURST_POLICIES": "spec.yaml"}
        )
    )
    out.append(
        Case(
            "policy/test-rego-broken",
            ["policy", "test", "--policies", "pol"],
            setup=policies_copy(muts["rego-broken"]),
            expect=(1, 2),
        )
    )
    out.append(
        Case(
            "policy/explain-rego-broken",
            ["policy", "explain", "--policies", "pol"],
            setup=policies_copy(muts["rego-broken"]),
        )
    )

    cats = {
        "garbage": "[[[",
        "list": "- 1\n",
        "empty": "",
        "price-neg": "offers:\n  aws:\n    ap-southeast-1:\n      h100:\n        spot: {value: -1, source: x, date: 2026-01-01}\n",
        "price-str": "offers:\n  aws:\n    ap-southeast-1:\n      h100:\n        spot: {value: cheap, source: x, date: 2026-01-01}\n",
        "price-inf": "offers:\n  aws:\n    ap-southeast-1:\n      h100:\n        spot: {value: .inf, source: x, date: 2026-01-01}\n",
        "date-bad": "assumptions:\n  mfu: {value: 0.4, source: x, date: 2026-02-30}\n",
        "date-str": "assumptions:\n  mfu: {value: 0.4, source: x, date: yesterday}\n",
        "mfu-zero": "assumptions:\n  mfu: {value: 0, source: x, date: 2026-01-01}\n",
        "mfu-huge": "assumptions:\n  mfu: {value: 1e300, source: x, date: 2026-01-01}\n",
        "upload-zero": "assumptions:\n  upload_gb_per_s: {value: 0, source: x, date: 2026-01-01}\n",
        "upload-tiny": "assumptions:\n  upload_gb_per_s: {value: 1e-300, source: x, date: 2026-01-01}\n",
        "host-copy-tiny": "assumptions:\n  host_copy_gb_per_s: {value: 1e-300, source: x, date: 2026-01-01}\n",
        "unknown-key": "frobnicate: 1\n",
        "version-bad": "catalog_version: 99\n",
        "dup": "catalog_version: 1\ncatalog_version: 1\n",
        "bare-value": "assumptions:\n  mfu: 0.4\n",
        "null-fact": "assumptions:\n  mfu: null\n",
    }
    for name, text in cats.items():
        out.append(
            Case(
                f"catalog/{name}",
                ["plan", "spec.yaml", "--catalog", "cat.yaml"],
                {**q, "cat.yaml": text},
                timeout=90,
                lines=2,
            )
        )
    out.append(
        Case("catalog/env-missing", ["plan", "spec.yaml"], q, env={"BURST_CATALOG": "nope.yaml"})
    )
    out.append(
        Case(
            "catalog/env-fifo",
            ["plan", "spec.yaml"],
            q,
            env={"BURST_CATALOG": "c.yaml"},
            setup=lambda d: os.mkfifo(d / "c.yaml"),
            timeout=30,
        )
    )

    decisions = {
        "garbage": "not json",
        "empty": "",
        "list": "[]",
        "nan": '{"a": NaN}',
        "dup": '{"a": 1, "a": 2}',
        "deep": "[" * 100000 + "]" * 100000,
        "huge-int": '{"a": ' + "9" * 5000 + "}",
        "yaml": "decisions: []\n",
        "empty-object": "{}",
        "wrong-types": '{"decisions": "all", "allowed": "yes", "spec_sha256": 5}',
        "decisions-garbage": '{"decisions": [1, 2, 3], "allowed": true, "spec_sha256": "x", "policy_sha256": "y", "counts": {}}',
        "bom": "\ufeff{}",
        "utf16": "{}".encode("utf-16"),
    }
    for name, text in decisions.items():
        out.append(
            Case(
                f"decision/{name}",
                ["plan", "spec.yaml", "--decision", "d.json"],
                {**q, "d.json": text},
                timeout=90,
                lines=2,
                expect=(2, 3),
            )
        )
    out.append(
        Case(
            "decision/fifo",
            ["plan", "spec.yaml", "--decision", "d.json"],
            q,
            setup=lambda d: os.mkfifo(d / "d.json"),
            timeout=30,
        )
    )

    traces = {
        "garbage": "abc\n",
        "neg": "-5\n",
        "nan": "nan\n",
        "inf": "inf\n",
        "json-nested": "[" * 100000 + "]" * 100000,
        "json-huge-int": "[" + "9" * 5000 + "]",
        "json-obj-list": '[{"a": 1}]',
        "json-bad": "[1, 2",
        "json-nan": "[NaN]",
        "json-bool": "[true]",
        "json-dup": '[{"a":1,"a":2}]',
        "binary": b"\xff\xfe\xfd",
        "many": "\n".join(str(i) for i in range(300000)),
        "unsorted": "100\n5\n50\n",
        "empty": "",
        "huge-line": "1" * 3_000_000,
    }
    for name, text in traces.items():
        out.append(
            Case(
                f"trace/{name}",
                ["simulate", "--trace", "t.txt"],
                {"t.txt": text},
                timeout=90,
                lines=2,
                expect=(0, 2) if name in ("unsorted", "empty", "many") else (2,),
            )
        )
    out.append(
        Case(
            "trace/fifo",
            ["simulate", "--trace", "t.txt"],
            setup=lambda d: os.mkfifo(d / "t.txt"),
            timeout=30,
        )
    )

    # run directories: report / runs / resume on garbage
    def run_with(files: dict[str, str | bytes]) -> Callable[[Path], None]:
        def setup(d: Path) -> None:
            _fake_run(d, "r1")
            for rel, content in files.items():
                p = d / "runs" / "r1" / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                if rel.endswith("!fifo"):
                    os.mkfifo(str(p).removesuffix("!fifo"))
                elif isinstance(content, bytes):
                    p.write_bytes(content)
                else:
                    p.write_text(content)

        return setup

    runfiles = {
        "report-garbage": {"report.json": "{{{"},
        "report-list": {"report.json": "[1]"},
        "report-nan": {"report.json": '{"status": NaN}'},
        "report-types": {
            "report.json": '{"status": 5, "steps": "x", "exit_code": "a", "checkpoints": -1}'
        },
        "report-binary": {"report.json": b"\xff\x00\xff"},
        "report-fifo": {"report.json!fifo": ""},
        "report-deep": {"report.json": "[" * 50000 + "]" * 50000},
        "docs-garbage": {"docs/plan.json": "garbage", "docs/preflight.json": "[[["},
        "docs-types": {
            "docs/plan.json": '{"candidates": 5}',
            "report.json": '{"status": "succeeded", "steps": [{"name": 1}]}',
        },
        "spec-garbage": {"spec.yaml": "[[["},
        "events-garbage": {"events.jsonl": "x\n{\n[1]\n"},
        "metrics-garbage": {"metrics.jsonl": "{}\nnot json\n"},
    }
    for name, files in runfiles.items():
        for cmd in (
            ["report", "r1", "--runs-root", "runs"],
            ["runs", "--runs-root", "runs"],
            ["report", "r1", "--runs-root", "runs", "--json"],
        ):
            out.append(
                Case(
                    f"rundir/{cmd[0]}{'-json' if '--json' in cmd else ''}/{name}",
                    cmd,
                    setup=run_with(files),
                    timeout=30,
                    lines=2,
                    expect=(0, 2),
                )
            )
    return out


def env_cases(silent: Silent, garbage: Garbage) -> list[Case]:
    q = {"spec.yaml": QUICKSTART}
    dead = closed_port()
    out = [
        Case(
            "env/argo-bad-url",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": "not a url"},
        ),
        Case(
            "env/argo-ftp",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": "ftp://x"},
        ),
        Case(
            "env/argo-port-bad",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": "https://127.0.0.1:99999"},
        ),
        Case(
            "env/argo-closed",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{dead}"},
            expect=(4,),
        ),
        Case(
            "env/argo-silent",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{silent.port}"},
            expect=(4,),
            timeout=120,
        ),
        Case(
            "env/argo-garbage",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{garbage.port}"},
            expect=(4,),
        ),
        Case(
            "env/argo-silent-follow",
            ["status", "wf", "--max-outage", "3", "--interval", "0.5"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{silent.port}"},
            expect=(4,),
            timeout=120,
        ),
        Case(
            "env/argo-https-silent",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"https://127.0.0.1:{silent.port}"},
            expect=(4,),
            timeout=120,
        ),
        Case(
            "env/argo-https-garbage",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"https://127.0.0.1:{garbage.port}"},
            expect=(4,),
        ),
        Case(
            "env/argo-unicode-host",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": "http://ünïcode.invalid"},
            expect=(2, 4),
        ),
        Case(
            "env/argo-nul",
            ["status", "wf", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": "http://a b"},
        ),
        Case(
            "env/argo-namespace-bad",
            ["status", "wf", "--no-follow", "--namespace", "../../x"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{dead}"},
            expect=(2, 4),
        ),
        Case(
            "env/argo-name-bad",
            ["status", "../../x?y", "--no-follow"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{dead}"},
            expect=(2, 4),
        ),
        Case(
            "env/submit-closed",
            ["submit", "spec.yaml"],
            q,
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{dead}"},
            expect=(2, 3, 4),
        ),
        Case(
            "env/submit-silent",
            ["submit", "spec.yaml"],
            q,
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{silent.port}"},
            expect=(2, 3, 4),
            timeout=120,
        ),
        Case(
            "env/submit-garbage",
            ["submit", "spec.yaml"],
            q,
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{garbage.port}"},
            expect=(2, 3, 4),
        ),
        Case(
            "env/finish-silent",
            ["finish", "wf", "--spec", "spec.yaml"],
            q,
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{silent.port}"},
            expect=(4,),
            timeout=120,
        ),
        Case(
            "env/token-command-fails",
            ["status", "wf", "--no-follow", "--token-command", "false"],
            env={"ARGO_TOKEN": "t", "ARGO_SERVER": f"http://127.0.0.1:{dead}"},
            expect=(4,),
        ),
        Case(
            "env/reap-endpoint-bad",
            ["reap", "--region", "us-east-1"],
            env={"AWS_ENDPOINT_URL": "not a url"},
        ),
        Case(
            "env/reap-endpoint-closed",
            ["reap", "--region", "us-east-1"],
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
            },
            expect=(4,),
            timeout=120,
        ),
        Case(
            "env/reap-endpoint-silent",
            ["reap", "--region", "us-east-1"],
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent.port}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
            },
            expect=(4,),
            timeout=150,
        ),
        Case(
            "env/reap-endpoint-garbage",
            ["reap", "--region", "us-east-1"],
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{garbage.port}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
            },
            expect=(4,),
            timeout=150,
        ),
        Case(
            "env/reap-no-creds",
            ["reap", "--region", "us-east-1"],
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}",
                "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
                "AWS_CONFIG_FILE": "/nonexistent",
            },
            expect=(4,),
            timeout=120,
        ),
        Case("env/reap-state-bucket-no-region", ["reap"], env={"BURST_TF_STATE_BUCKET": "b"}),
        Case(
            "env/reap-state-bucket-bad",
            ["reap"],
            env={
                "BURST_TF_STATE_BUCKET": "../x",
                "BURST_TF_STATE_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
            },
            expect=(2, 4),
            timeout=120,
        ),
        Case("env/reap-regions-bad", ["reap"], env={"BURST_REAP_REGIONS": "us-east-1,,../x"}),
        Case(
            "env/store-check-nan", ["validate", "spec.yaml"], q, env={"BURST_STORE_CHECK_S": "nan"}
        ),
        Case(
            "env/store-check-inf", ["validate", "spec.yaml"], q, env={"BURST_STORE_CHECK_S": "inf"}
        ),
        Case(
            "env/store-check-huge",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_STORE_CHECK_S": "1e300"},
        ),
        Case(
            "env/entry-check-inf",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_ENTRYPOINT_CHECK_S": "inf"},
        ),
        Case(
            "env/entry-check-huge",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_ENTRYPOINT_CHECK_S": "1e300"},
        ),
        Case(
            "env/entry-check-tiny",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_ENTRYPOINT_CHECK_S": "1e-300"},
            expect=(2, 4),
        ),
        Case(
            "env/entry-check-neg",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_ENTRYPOINT_CHECK_S": "-1"},
        ),
        Case(
            "env/entry-check-text",
            ["validate", "spec.yaml"],
            q,
            env={"BURST_ENTRYPOINT_CHECK_S": "soon"},
        ),
        Case("env/tf-stack-bad", ["run", "spec.yaml"], q, env={"BURST_TF_STACK": "moon"}),
        Case("env/target-bad", ["run", "spec.yaml"], q, env={"BURST_TARGET": "moon"}),
        Case("env/tf-timeout-inf", ["run", "spec.yaml"], q, env={"BURST_TF_TIMEOUT_S": "inf"}),
        Case("env/tf-timeout-nan", ["run", "spec.yaml"], q, env={"BURST_TF_TIMEOUT_S": "nan"}),
        Case("env/lease-ttl-inf", ["run", "spec.yaml"], q, env={"BURST_LEASE_TTL_S": "inf"}),
        Case("env/lease-ttl-nan", ["run", "spec.yaml"], q, env={"BURST_LEASE_TTL_S": "nan"}),
        Case("env/lease-ttl-tiny", ["run", "spec.yaml"], q, env={"BURST_LEASE_TTL_S": "1e-300"}),
        Case("env/sync-wait-inf", ["run", "spec.yaml"], q, env={"BURST_SYNC_WAIT_S": "inf"}),
        Case(
            "env/ckpt-retry-inf", ["run", "spec.yaml"], q, env={"BURST_CHECKPOINT_RETRY_S": "inf"}
        ),
        Case("env/dist-timeout-inf", ["run", "spec.yaml"], q, env={"BURST_DIST_TIMEOUT_S": "inf"}),
        Case(
            "env/sigterm-grace-inf", ["run", "spec.yaml"], q, env={"BURST_SIGTERM_GRACE_S": "inf"}
        ),
        Case("env/preempt-poll-inf", ["run", "spec.yaml"], q, env={"BURST_PREEMPT_POLL_S": "inf"}),
        Case(
            "env/budget-scale-inf", ["run", "spec.yaml"], q, env={"BURST_BUDGET_TIME_SCALE": "inf"}
        ),
        Case("env/step-pace-inf", ["run", "spec.yaml"], q, env={"BURST_STEP_PACE_S": "inf"}),
        Case(
            "env/candidate-huge", ["run", "spec.yaml"], q, env={"BURST_CANDIDATE_INDEX": "9" * 5000}
        ),
        Case(
            "env/preempt-rank-huge", ["run", "spec.yaml"], q, env={"BURST_PREEMPT_RANK": "9" * 5000}
        ),
        Case(
            "env/candidate-unicode-digit",
            ["run", "spec.yaml"],
            q,
            env={"BURST_CANDIDATE_INDEX": "\u0663"},
        ),
        Case("env/runs-root-file", ["run", "spec.yaml"], q, env={"BURST_RUNS_ROOT": "spec.yaml"}),
        Case(
            "env/runs-root-unwritable",
            ["run", "spec.yaml"],
            q,
            env={"BURST_RUNS_ROOT": "/proc/nope"},
        ),
        Case(
            "env/terraform-bin-missing",
            ["run", "spec.yaml"],
            q,
            env={"BURST_TERRAFORM_BIN": "/nonexistent/terraform"},
            expect=(2, 4),
            timeout=240,
        ),
        Case(
            "env/terraform-dir-missing",
            ["run", "spec.yaml"],
            q,
            env={"BURST_TERRAFORM_DIR": "/nonexistent"},
            expect=(2, 4),
            timeout=240,
        ),
        Case(
            "env/site-vars-missing",
            ["run", "spec.yaml"],
            q,
            env={"BURST_TF_SITE_VARS": "/nonexistent.tfvars"},
            expect=(2, 4),
            timeout=240,
        ),
        Case(
            "env/site-vars-garbage",
            ["run", "spec.yaml"],
            {**q, "s.tfvars": "{{{{ not hcl"},
            env={"BURST_TF_SITE_VARS": "s.tfvars"},
            expect=(2, 4),
            timeout=240,
        ),
        Case(
            "env/site-vars-fifo",
            ["run", "spec.yaml"],
            q,
            env={"BURST_TF_SITE_VARS": "s.tfvars"},
            setup=lambda d: os.mkfifo(d / "s.tfvars"),
            expect=(2, 4),
            timeout=240,
        ),
        Case(
            "env/fail-at-unknown",
            ["run", "spec.yaml"],
            q,
            env={"BURST_FAIL_AT": "nowhere"},
            expect=(2,),
            timeout=240,
        ),
        Case(
            "env/preempt-steps-garbage",
            ["run", "spec.yaml"],
            q,
            env={"BURST_PREEMPT_AT_STEPS": "x,y"},
            expect=(2,),
            timeout=240,
        ),
        Case(
            "env/log-json-garbage",
            ["validate", "--offline", "spec.yaml"],
            q,
            env={"BURST_LOG_JSON": "maybe"},
            expect=(0,),
        ),
        Case(
            "env/submitted-at-garbage",
            ["validate", "--offline", "spec.yaml"],
            q,
            env={"BURST_SUBMITTED_AT": "never"},
            expect=(0,),
        ),
        Case(
            "env/checkpoint-uri-silent-s3",
            ["validate", "spec.yaml"],
            {
                "spec.yaml": spec_with(
                    "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3://bucket/x"
                )
            },
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{silent.port}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
                "BURST_STORE_CHECK_S": "5",
                "BURST_ENTRYPOINT_CHECK_S": "120",
            },
            expect=(4,),
            timeout=200,
        ),
        Case(
            "env/checkpoint-uri-garbage-s3",
            ["validate", "spec.yaml"],
            {
                "spec.yaml": spec_with(
                    "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3://bucket/x"
                )
            },
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{garbage.port}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
                "BURST_STORE_CHECK_S": "5",
            },
            expect=(4,),
            timeout=200,
        ),
        Case(
            "env/checkpoint-uri-closed-s3",
            ["validate", "spec.yaml"],
            {
                "spec.yaml": spec_with(
                    "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: s3://bucket/x"
                )
            },
            env={
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{dead}",
                "AWS_ACCESS_KEY_ID": "x",
                "AWS_SECRET_ACCESS_KEY": "y",
                "BURST_STORE_CHECK_S": "5",
            },
            expect=(4,),
            timeout=200,
        ),
        Case(
            "env/checkpoint-file-unwritable",
            ["validate", "spec.yaml"],
            {
                "spec.yaml": spec_with(
                    "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: file:///proc/nope"
                )
            },
            expect=(2, 4),
            timeout=200,
        ),
        Case(
            "env/checkpoint-file-is-file",
            ["validate", "spec.yaml"],
            {
                "spec.yaml": spec_with(
                    "checkpoint_uri: file://runs/checkpoints", "checkpoint_uri: file://spec.yaml"
                )
            },
            expect=(2, 4),
            timeout=200,
        ),
    ]
    return out


# --------------------------------------------------------------------------- running


def run_case(case: Case, python: str, env_base: dict[str, str]) -> Result:
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        d = Path(tmp)
        os.symlink(REPO / "examples", d / "examples")
        for rel, content in case.files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                p.write_bytes(content)
            else:
                p.write_text(content, encoding="utf-8", newline="")
        if case.setup:
            case.setup(d)
        env = {**env_base, **case.env}
        args = [a.encode("utf-8", "surrogateescape") if "\udcff" in a else a for a in case.args]
        start = time.monotonic()
        proc = subprocess.Popen(
            [python, "-m", "burst.cli.main", *args],  # type: ignore[list-item]
            cwd=d,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=case.timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = None
        secs = time.monotonic() - start
        text = err.decode("utf-8", "replace")
        lines = [ln for ln in text.splitlines() if ln.strip()]
        problems = []
        if code is None:
            problems.append("hang")
        elif code not in case.expect:
            problems.append(f"exit {code} (want {'/'.join(map(str, case.expect))})")
        if "Traceback" in text:
            problems.append("traceback")
        if "unexpected error" in text:
            problems.append("unexpected error")
        if code not in (0, None) and len(lines) > case.lines:
            problems.append(f"{len(lines)} stderr lines")
        if code not in (0, None) and not lines:
            problems.append("silent failure")
        if any(len(ln) > 2000 for ln in lines):
            problems.append("line longer than 2000 characters")
        if code != 0 and (d / "runs").is_dir():
            states = [p for p in (d / "runs").rglob("terraform.tfstate") if p.stat().st_size > 200]
            if states and case.name.startswith(("env/", "opt/run", "file/run")):
                problems.append(f"terraform state left: {states[0].relative_to(d)}")
        first = lines[0] if lines else (out.decode("utf-8", "replace").splitlines() or [""])[0]
        return Result(case.name, code, len(lines), problems, first[:300], round(secs, 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", dest="match", default="")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--all", action="store_true", help="Print passing cases too.")
    opts = ap.parse_args()
    silent, garbage = Silent(), Garbage()
    cases = (
        spec_cases()
        + file_kind_cases()
        + option_cases()
        + document_cases()
        + env_cases(silent, garbage)
    )
    cases = [c for c in cases if opts.match in c.name]
    env_base = {
        k: v for k, v in os.environ.items() if not k.startswith(("BURST_", "ARGO_", "AWS_"))
    }
    env_base["PYTHONPATH"] = str(REPO)
    env_base["AWS_EC2_METADATA_DISABLED"] = "true"
    with ThreadPoolExecutor(opts.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, sys.executable, env_base), cases))
    failed = [r for r in results if r.problems]
    for r in results:
        if r.problems or opts.all:
            mark = "FAIL" if r.problems else "ok  "
            print(
                f"{mark} {r.case}: exit {r.code}, {r.err_lines} line(s), {r.seconds}s"
                f"{' [' + '; '.join(r.problems) + ']' if r.problems else ''}\n     {r.first}"
            )
    print(f"{len(results)} cases, {len(failed)} failing")
    if opts.json_out:
        Path(opts.json_out).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
