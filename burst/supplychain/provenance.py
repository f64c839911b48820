"""Provenance: the digest verify-image accepts is the digest the spec's image runs as.

verify-image verifies the spec's ``image.reference`` and writes, in its document,
``run_image``: ``repository@digest``, the reference every later step of the spec's image runs
(train, a regional worker and aggregator). The compiled templates pass it from verify-image's
output to those steps' ``image`` field (never a workflow parameter someone could set apart),
so on a cluster the kubelet is given exactly the verified digest.

``burst run --containers`` runs images of this machine's engine store instead of pulling: the
trainer image given there must be the one verify-image accepts (its manifest digest is the
spec's), else the run is refused before anything is created or rented, in one line naming
both digests (:func:`choose_trainer`). A local development image whose digest is not the
spec's runs only with the explicit opt-in (``--unverified-local-image``), and every report
then labels it :data:`UNVERIFIED_LOCAL`. The engine is always given a digest
(``name@sha256:...``), never a tag.

Each step of a report names the image it ran in and one of these labels:

* :data:`VERIFIED`: the digest verify-image accepted;
* :data:`UNVERIFIED_LOCAL`: a local development image run by the opt-in;
* :data:`STEPS_IMAGE`: burst's own steps image (preflight, plan, verify-image, provision,
  teardown), pinned by digest when the run starts; verify-image checks the spec's image,
  not this one (on a cluster: ``BURST_STEPS_IMAGE``, pinned, and the admission policy);
* :data:`IN_PROCESS`: no image at all: ``burst run`` without ``--containers`` runs every step
  as a process of this machine, with its Python and files; the verified image is not run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from burst.errors import PolicyRefusal
from burst.supplychain.reference import DIGEST_RE, ImageRef, parse_reference

VERIFIED: Final = "verified"
UNVERIFIED_LOCAL: Final = "unverified local image"
STEPS_IMAGE: Final = "steps image"
IN_PROCESS: Final = "in-process"
PROVENANCES: Final = (VERIFIED, UNVERIFIED_LOCAL, STEPS_IMAGE, IN_PROCESS)

#: The opt-in of ``burst run --containers`` for a local development trainer image.
OPT_IN: Final = "--unverified-local-image"


def run_reference(ref: ImageRef) -> str:
    """What the later steps run for a verified ``ref``: ``repository@digest`` (for an OCI
    layout, the repository it declares and was signed as)."""
    return f"{ref.repository}@{ref.digest}"


def digest_of(image: str) -> str | None:
    """The ``sha256:...`` an image reference is pinned to, or None (a tag, or a bare name)."""
    _, at, digest = image.rpartition("@")
    return digest if at and DIGEST_RE.match(digest) else None


def repository_of(image: str) -> str:
    """``image`` without its digest and its tag (``localhost/burst/trainer:cpu`` ->
    ``localhost/burst/trainer``)."""
    name = image.partition("@")[0]
    slash, colon = name.rfind("/"), name.rfind(":")
    return name[:colon] if colon > slash else name


@dataclass(frozen=True)
class LocalImage:
    """An image of the container engine's store, as its ``image inspect`` describes it."""

    name: str  # as given (a tag, or name@digest)
    digest: str  # its manifest digest; "" where the engine records none (docker, unpushed)
    digests: tuple[str, ...]  # every manifest digest it is known by (RepoDigests)
    id: str

    @classmethod
    def from_inspect(cls, name: str, info: dict[str, Any]) -> LocalImage:
        digest = str(info.get("digest") or "")
        known = [str(d) for d in info.get("digests") or [] if d]
        return cls(name, digest, tuple(dict.fromkeys([*([digest] if digest else []), *known])),
                   str(info.get("id") or ""))  # fmt: skip

    def pinned(self, digest: str | None = None) -> str:
        """A reference the engine resolves to this image only: ``repository@digest``; the
        image id where the engine records no digest (docker resolves ``sha256:<id>``)."""
        chosen = digest or self.digest
        if chosen:
            return f"{repository_of(self.name)}@{chosen}"
        return self.id if self.id.startswith("sha256:") else f"sha256:{self.id}"

    @property
    def shown(self) -> str:
        return self.digest or f"image id {self.id[:19]}"


@dataclass(frozen=True)
class RunImage:
    """What a container run runs for the spec's image."""

    accepted: str  # the digest verify-image accepts: the spec's
    ref: str  # what the engine is given (pinned)
    digest: str  # what runs
    provenance: str  # VERIFIED or UNVERIFIED_LOCAL
    source: str  # the image of the store it is (as it was named)


def spec_digest(reference: str, running: str) -> str:
    """The digest the spec pins (what verify-image will accept); PolicyRefusal naming what
    would run instead when it pins a tag only (verify-image refuses it, and nothing can say
    which image train would run)."""
    try:
        return parse_reference(reference).digest
    except PolicyRefusal as exc:
        raise PolicyRefusal(
            f"--containers: image.reference {reference!r} is not pinned by digest "
            f"({exc.one_line()}), so there is no verified digest to run; train would run "
            f"{running} instead: pin image.reference as name@sha256:<64 hex> of a signed image "
            "(docs/images.md)"
        ) from None


def choose_trainer(
    reference: str, candidates: list[LocalImage], *, unverified_local: bool = False
) -> RunImage:
    """The image train runs in a container run of a spec whose ``image.reference`` is
    ``reference``: the first of ``candidates`` (images of the engine's store: the spec's own
    image where the store has it, then the trainer image given or built) known by the spec's
    digest; else, with the opt-in, the last candidate (the local development image) labelled
    unverified; else PolicyRefusal in one line naming both digests and what to do."""
    local = candidates[-1] if candidates else None
    running = f"{local.name} ({local.shown})" if local else "no image"
    accepted = spec_digest(reference, running)
    for image in candidates:
        if accepted in image.digests:
            return RunImage(accepted, image.pinned(accepted), accepted, VERIFIED, image.name)
    if local is None:
        raise PolicyRefusal(
            f"--containers: the engine's store has no image {accepted} (image.reference "
            f"{reference}): pull it by digest, or pass --trainer-image"
        )
    if unverified_local:
        return RunImage(
            accepted, local.pinned(), local.digest or local.id, UNVERIFIED_LOCAL, local.name
        )
    raise PolicyRefusal(
        f"--containers: train would run {local.name} ({local.shown}), not the image "
        f"verify-image accepts ({accepted}, image.reference {reference}); refused before "
        "anything is rented: push and sign that image and pin image.reference to its "
        f"name@digest (docs/images.md), or pass {OPT_IN} to run it as an unverified local "
        "image (reports label it so)"
    )


def step_images(report: Any) -> tuple[dict[str, str], str | None]:
    """What a run report (``burst.documents.report.RunReport``, or None) says each step ran
    in: ``{step: "name@sha256:... (provenance)"}`` for the steps run in an image, and one
    note when every step that ran, ran in process (no image at all)."""
    steps = list(getattr(report, "steps", None) or [])
    ran = [s for s in steps if s.image or s.image_provenance]
    if ran and all(s.image_provenance == IN_PROCESS for s in ran):
        return {}, (
            "image: none: every step ran in process on this machine (burst run without "
            "--containers); the verified image was not run"
        )
    shown = {s.name: describe(s.image, s.image_digest, s.image_provenance) for s in ran}
    return {k: v for k, v in shown.items() if v}, None


def train_ran(report: Any) -> str:
    """What train ran in, to follow a report's image line ("; train ran ..."), or "" when the
    report does not say (a regional run, a run from before issue 46)."""
    train = next((s for s in getattr(report, "steps", None) or [] if s.name == "train"), None)
    if train is None or not train.image_provenance:
        return ""
    if train.image_provenance == IN_PROCESS:
        return "; train ran in process here: no image"
    if train.image_provenance == VERIFIED:
        return f"; train ran it ({train.image})"
    return f"; train ran {describe(train.image, train.image_digest, train.image_provenance)}"


def describe(image: str | None, digest: str | None, provenance: str | None) -> str:
    """A step's image, as a report shows it (empty when nothing is recorded)."""
    if provenance == IN_PROCESS:
        return "in-process: no image"
    if not image:
        return ""
    pinned = digest_of(image)
    shown = image if pinned or not digest else f"{image} ({digest})"
    return f"{shown} ({provenance})" if provenance else shown
