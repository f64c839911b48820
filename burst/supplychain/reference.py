"""Image references: parse, normalise, and insist on a digest.

Two forms are understood:

* a registry reference, ``[registry[:port]/]repository[:tag]@sha256:<64 hex>`` (Docker's
  grammar: the first path component is a registry when it holds a ``.`` or a ``:`` or is
  ``localhost``; otherwise the image lives on Docker Hub);
* an OCI image layout directory, ``oci-layout://PATH@sha256:<64 hex>``, read from disk by the
  same verification code (the local demo uses one committed in the repository).

A reference without a digest is refused: a tag can be moved after it was checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from burst.errors import PolicyRefusal

LAYOUT_SCHEME = "oci-layout://"
DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPO_PATH_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}


@dataclass(frozen=True)
class ImageRef:
    """A digest-pinned image: where it is stored and what it is."""

    original: str
    digest: str
    repository: str  # registry/path (normalised), or the layout's path for oci-layout
    registry: str | None = None  # host[:port]; None for an OCI layout
    path: str | None = None  # repository path inside the registry
    tag: str | None = None  # informative only: the digest decides
    layout_dir: str | None = None  # set for oci-layout:// references

    @property
    def is_layout(self) -> bool:
        return self.layout_dir is not None

    @property
    def digest_hex(self) -> str:
        return self.digest.split(":", 1)[1]

    @property
    def signature_tag(self) -> str:
        """cosign's tag for the signatures of this digest: ``sha256-<hex>.sig``."""
        return f"sha256-{self.digest_hex}.sig"

    def pinned(self) -> str:
        if self.is_layout:
            return f"{LAYOUT_SCHEME}{self.layout_dir}@{self.digest}"
        return f"{self.repository}@{self.digest}"


def normalise_repository(repository: str) -> str:
    """Docker Hub spellings (index.docker.io/..., a bare name) become ``docker.io/...``."""
    registry, _, path = repository.partition("/")
    if not path:
        return f"{DOCKER_HUB}/library/{registry}"
    if registry in _HUB_ALIASES:
        if "/" not in path:
            path = f"library/{path}"
        return f"{DOCKER_HUB}/{path}"
    if not _is_registry(registry):
        return f"{DOCKER_HUB}/{repository}"
    return repository


def _is_registry(component: str) -> bool:
    return "." in component or ":" in component or component == "localhost"


def parse_reference(text: str) -> ImageRef:
    """Parse ``text``; raise PolicyRefusal when it is not pinned by digest or malformed."""
    ref = text.strip()
    if not ref:
        raise PolicyRefusal("image reference is empty; pin it by digest: name@sha256:<64 hex>")
    if ref.startswith(LAYOUT_SCHEME):
        return _parse_layout(ref)
    name, at, digest = ref.partition("@")
    if not at:
        raise PolicyRefusal(
            f"image reference {ref!r} is not pinned by digest (a tag can be moved after it "
            "was checked); use name@sha256:<64 hex>"
        )
    if not DIGEST_RE.match(digest):
        raise PolicyRefusal(
            f"image reference {ref!r}: digest {digest!r} is not sha256:<64 lowercase hex>"
        )
    tag: str | None = None
    last_slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > last_slash:
        name, tag = name[:colon], name[colon + 1 :]
        if not TAG_RE.match(tag):
            raise PolicyRefusal(f"image reference {ref!r}: tag {tag!r} is malformed")
    first, sep, rest = name.partition("/")
    if sep and _is_registry(first):
        registry, path = first, rest
    else:
        registry, path = DOCKER_HUB, name
    if registry in _HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    if not REPO_PATH_RE.match(path):
        raise PolicyRefusal(f"image reference {ref!r}: repository path {path!r} is malformed")
    return ImageRef(
        original=ref,
        digest=digest,
        repository=f"{registry}/{path}",
        registry=registry,
        path=path,
        tag=tag,
    )


def _parse_layout(ref: str) -> ImageRef:
    body = ref[len(LAYOUT_SCHEME) :]
    directory, at, digest = body.rpartition("@")
    if not at:
        raise PolicyRefusal(
            f"image reference {ref!r} is not pinned by digest; use "
            f"{LAYOUT_SCHEME}PATH@sha256:<64 hex>"
        )
    if not DIGEST_RE.match(digest):
        raise PolicyRefusal(
            f"image reference {ref!r}: digest {digest!r} is not sha256:<64 lowercase hex>"
        )
    if not directory:
        raise PolicyRefusal(f"image reference {ref!r} names no layout directory")
    return ImageRef(original=ref, digest=digest, repository="", layout_dir=directory)
