"""The manifest: the one object whose existence makes a checkpoint exist.

Store layout (under the store's prefix)::

    chunks/<blake3 hex>                 content-addressed chunk bytes
    manifests/<step:012d>.<tier>.json   the commit of one checkpoint
    pending/<token>.json                chunks a save in flight will reference (for GC)
    latest.json                         {"step", "tier", "manifest"}: moved after a commit

A manifest holds the JSON skeleton of the state, where each array sits in the buffer, the
chunks (offset, size, blake3) and a blake3 checksum of its own canonical body.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import blake3

from burst.checkpoint.layout import ArrayEntry, ChunkSpan
from burst.errors import CheckpointError

FORMAT = "burst-checkpoint/1"
TIERS = ("weights", "full")
MANIFEST_RE = re.compile(r"^manifests/(\d{12})\.(weights|full)\.json$")
CHUNK_PREFIX = "chunks/"
PENDING_PREFIX = "pending/"
LATEST_KEY = "latest.json"
#: the body's list of each chunk's xxh3-128 (hex), in the order of "chunks"
CHECKS_KEY = "chunk_xxh3"


def chunk_key(digest: str) -> str:
    return f"{CHUNK_PREFIX}{digest}"


def manifest_key(step: int, tier: str) -> str:
    return f"manifests/{step:012d}.{tier}.json"


def check_tier(tier: str) -> str:
    if tier not in TIERS:
        raise CheckpointError(f"tier must be one of {', '.join(TIERS)}, not {tier!r}")
    return tier


@dataclass(frozen=True, order=True)
class CheckpointRef:
    """A committed checkpoint: its step, tier and manifest key."""

    step: int
    tier: str
    key: str


def parse_manifest_key(key: str) -> CheckpointRef | None:
    m = MANIFEST_RE.match(key)
    return CheckpointRef(int(m.group(1)), m.group(2), key) if m else None


@dataclass
class ChunkRef:
    offset: int
    size: int
    digest: str  # blake3 hex of the chunk bytes; also its key
    #: xxh3-128 hex of the same bytes (the writer computes it anyway, to find changed chunks):
    #: what a restore checks, ten times cheaper than blake3; None in manifests written
    #: before it was recorded (the restore checks the blake3 then)
    check: str | None = None

    @property
    def span(self) -> ChunkSpan:
        return ChunkSpan(self.offset, self.size)


@dataclass
class Manifest:
    step: int
    tier: str
    created_at: str
    chunk_size: int
    total_bytes: int
    arrays: list[ArrayEntry]
    chunks: list[ChunkRef]
    tree: Any
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return manifest_key(self.step, self.tier)

    @property
    def ref(self) -> CheckpointRef:
        return CheckpointRef(self.step, self.tier, self.key)

    def body(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "step": self.step,
            "tier": self.tier,
            "created_at": self.created_at,
            "chunk_size": self.chunk_size,
            "total_bytes": self.total_bytes,
            "arrays": [a.to_json() for a in self.arrays],
            "chunks": [[c.offset, c.size, c.digest] for c in self.chunks],
            "tree": self.tree,
            "stats": self.stats,
            # beside "chunks", not in it: a reader that predates it ignores an unknown key
            **(
                {CHECKS_KEY: [c.check for c in self.chunks]}
                if self.chunks and all(c.check for c in self.chunks)
                else {}
            ),
        }

    def to_bytes(self) -> bytes:
        body = self.body()
        canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
        doc = {"manifest": body, "blake3": blake3.blake3(canon.encode()).hexdigest()}
        return json.dumps(doc, separators=(",", ":")).encode()

    @staticmethod
    def from_bytes(data: bytes, where: str) -> Manifest:
        try:
            doc = json.loads(data)
            body = doc["manifest"]
            canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
            if blake3.blake3(canon.encode()).hexdigest() != doc["blake3"]:
                raise CheckpointError("manifest checksum mismatch (corrupt manifest)", where=where)
            if body["format"] != FORMAT:
                raise CheckpointError(f"unknown manifest format {body['format']!r}", where=where)
            return Manifest(
                step=int(body["step"]),
                tier=check_tier(body["tier"]),
                created_at=str(body["created_at"]),
                chunk_size=int(body["chunk_size"]),
                total_bytes=int(body["total_bytes"]),
                arrays=[ArrayEntry.from_json(a) for a in body["arrays"]],
                chunks=_chunks(body),
                tree=body["tree"],
                stats=dict(body.get("stats") or {}),
            )
        except CheckpointError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"manifest is not valid: {exc}", where=where) from exc


def _chunks(body: dict[str, Any]) -> list[ChunkRef]:
    chunks = [ChunkRef(int(o), int(s), str(d)) for o, s, d in body["chunks"]]
    checks = body.get(CHECKS_KEY)
    if isinstance(checks, list) and len(checks) == len(chunks):
        for c, x in zip(chunks, checks, strict=True):
            c.check = str(x) if x else None
    return chunks
