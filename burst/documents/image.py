"""The verified image: the digest verify-image proved, the signature that proved it, and the
image's compatibility with the job's GPU (``burst.supplychain``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from burst.documents.base import Detail, Document, StepDocument


class ImageStore(Document):
    kind: str
    location: str


class SignatureProof(Document):
    source: str
    manifest: str
    key: str
    key_fingerprint: str
    trust_rule: str
    pattern: str
    trust_policy: str


class Compatibility(Detail):
    """``burst.supplychain.compat.check_compat``: per-component checks against the GPU's
    requirements; ``ok`` false refuses the image."""

    ok: bool
    gpu_type: str | None = None
    provisional: bool | None = None


class VerifiedImage(StepDocument):
    """The verify-image step's document."""

    reference: str
    pinned: str
    repository: str
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    verified: Literal[True]
    store: ImageStore
    signature: SignatureProof
    labels: dict[str, str] = Field(default_factory=dict)
    compatibility: Compatibility
