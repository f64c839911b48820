"""The verified image: the digest verify-image proved, the signature that proved it, and the
image's compatibility with the job's GPU (``burst.supplychain``). Written only when the image
is verified (otherwise the step exits 3 and writes nothing)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from burst.documents.base import Document, StepDocument

SHA256 = r"^sha256:[0-9a-f]{64}$"


class ImageStore(Document):
    kind: Literal["registry", "oci-layout"]
    location: str


class SignatureProof(Document):
    source: Literal["tag", "referrers"] = Field(
        description="Where the signature was found: the sha256-<hex>.sig tag or the OCI 1.1 "
        "referrers API."
    )
    manifest: str = Field(pattern=SHA256, description="Digest of the signature manifest.")
    key: str = Field(description="Trusted key name (policies/keys/trust.yaml).")
    key_fingerprint: str = Field(
        pattern=SHA256, description="sha256 of the key's DER SubjectPublicKeyInfo."
    )
    trust_rule: str
    pattern: str = Field(description="The repository pattern of the rule that matched.")
    trust_policy: str = Field(description="Path of the trust policy used.")


class CompatCheck(Document):
    name: Literal["cuda", "driver.min", "torch", "nccl", "deepspeed"]
    image: str
    minimum: str
    ok: bool


class Compatibility(Document):
    """``burst.supplychain.compat.check_compat`` for the job's GPU type."""

    gpu_type: str
    arch: str | None = None
    ok: Literal[True]
    provisional: bool = Field(
        description="true when the GPU type's requirements are assumed, not published."
    )
    checks: list[CompatCheck]
    required_driver: str = Field(
        description="Minimum NVIDIA driver the rented node must run: max(GPU type minimum, "
        "image's)."
    )
    requirements: str = Field(description="Path of gpu-requirements.yaml used.")


class VerifiedImage(StepDocument):
    """The verify-image step's document."""

    reference: str = Field(description="image.reference as written in the spec.")
    pinned: str = Field(
        pattern=r"@sha256:[0-9a-f]{64}$", description="The normalised reference, pinned."
    )
    repository: str = Field(
        min_length=1,
        description="Repository the signature names (registry/path, or the layout's declared "
        "repository).",
    )
    digest: str = Field(pattern=SHA256)
    run_image: str = Field(
        pattern=r"^[^@\s]+@sha256:[0-9a-f]{64}$",
        description="What every later step of this image runs: repository@digest, the "
        "digest verified here. The workflow passes it to train's (and the regional worker's "
        "and aggregator's) image field; `burst run --containers` runs it by this digest "
        "(burst.supplychain.provenance).",
    )
    verified: Literal[True]
    store: ImageStore
    signature: SignatureProof
    labels: dict[str, str] = Field(description="The image's dev.burst.* labels.")
    compatibility: Compatibility
