"""Static rules for burst's Dockerfiles (checked by the tests; runnable on any Dockerfile).

DF001 every base image pinned by digest (``FROM name@sha256:<64 hex>``; ``scratch`` and earlier
      build stages excepted)
DF002 no ``latest`` tag anywhere
DF003 the final user is set and is not root
DF004 no ``ADD`` from a URL (download in a RUN with a checksum, or COPY)
DF005 no secrets in ENV or ARG (names like PASSWORD, TOKEN, SECRET, ...; AWS access key ids)
DF006 no package-manager caches: ``apt-get install`` removes /var/lib/apt/lists in the same RUN;
      ``pip install`` runs with --no-cache-dir (or PIP_NO_CACHE_DIR=1 is set)
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

DIGEST_PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")
SECRET_NAME = re.compile(
    r"(PASSW(OR)?D|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)", re.I
)
AWS_KEY_ID = re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b")
URL = re.compile(r"^(https?|ftp|git)://|^git@", re.I)
ROOT_USERS = {"root", "0", "0:0", "root:root"}


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule} {self.message}"


def parse(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined; comments and blank lines dropped."""
    out: list[Instruction] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        joined = " ".join(part.strip() for part in buf)
        buf = []
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
    return out


def _env_names(args: str) -> list[tuple[str, str]]:
    """NAME=value pairs of an ENV or ARG (also the legacy ``ENV NAME value`` form)."""
    try:
        words = shlex.split(args)
    except ValueError:
        words = args.split()
    if words and "=" not in words[0]:
        return [(words[0], " ".join(words[1:]))]
    pairs = []
    for w in words:
        name, _, value = w.partition("=")
        pairs.append((name, value))
    return pairs


def check(text: str) -> list[Violation]:
    found: list[Violation] = []
    stages: set[str] = set()
    user: Instruction | None = None
    pip_no_cache = False
    for ins in parse(text):
        if ins.keyword == "FROM":
            words = [w for w in ins.args.split() if not w.startswith("--")]
            image = words[0] if words else ""
            local = image.lower() == "scratch" or image.lower() in stages
            if not local and not DIGEST_PINNED.search(image):
                found.append(
                    Violation("DF001", ins.line, f"base image {image} is not pinned by digest")
                )
            if len(words) >= 3 and words[1].upper() == "AS":
                stages.add(words[2].lower())
            user = None  # a new stage starts as root again
        if re.search(r":latest\b", ins.args):
            found.append(Violation("DF002", ins.line, "uses the 'latest' tag"))
        if ins.keyword == "USER":
            user = ins
        if ins.keyword == "ADD":
            for w in ins.args.split():
                if URL.search(w):
                    found.append(Violation("DF004", ins.line, f"ADD from a URL ({w})"))
        if ins.keyword in ("ENV", "ARG"):
            for name, value in _env_names(ins.args):
                if SECRET_NAME.search(name):
                    found.append(
                        Violation("DF005", ins.line, f"{ins.keyword} {name} looks like a secret")
                    )
                if AWS_KEY_ID.search(value):
                    found.append(
                        Violation("DF005", ins.line, f"{ins.keyword} {name} holds an AWS key id")
                    )
                if name == "PIP_NO_CACHE_DIR" and value.strip("'\"") in ("1", "true", "on", "yes"):
                    pip_no_cache = True
        if ins.keyword == "RUN":
            if (
                re.search(r"\bapt(-get)? +install\b", ins.args)
                and "/var/lib/apt/lists" not in ins.args
            ):
                found.append(
                    Violation(
                        "DF006", ins.line, "apt-get install without rm -rf /var/lib/apt/lists"
                    )
                )
            if (
                re.search(r"\bpip3? +install\b", ins.args)
                and "--no-cache-dir" not in ins.args
                and not pip_no_cache
            ):
                found.append(Violation("DF006", ins.line, "pip install without --no-cache-dir"))
    if user is None:
        found.append(Violation("DF003", 0, "no USER in the final stage: the image runs as root"))
    elif user.args.split()[0].lower() in ROOT_USERS or user.args.split(":")[0] in ("root", "0"):
        found.append(Violation("DF003", user.line, f"final USER {user.args} is root"))
    return found


def check_file(path: Path) -> list[Violation]:
    return check(path.read_text(encoding="utf-8"))


def base_images(text: str) -> list[str]:
    return [
        ins.args.split()[0]
        for ins in parse(text)
        if ins.keyword == "FROM" and ins.args and not ins.args.startswith("--")
    ]
