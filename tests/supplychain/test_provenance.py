"""Which image a container run's train runs for the spec's image (issue 46, provenance): the
one of the digest verify-image accepts, or refused before anything is rented in one line
naming both digests, or (the explicit opt-in) a local image labelled unverified. Pure
functions over what the engine's store says of its images (``image inspect``)."""

from __future__ import annotations

import pytest

from burst.errors import EXIT_REFUSED, PolicyRefusal
from burst.supplychain.provenance import (
    OPT_IN,
    UNVERIFIED_LOCAL,
    VERIFIED,
    LocalImage,
    choose_trainer,
    describe,
)

SIGNED = "sha256:" + "5e" * 32  # the spec's digest: what verify-image accepts
LOCAL = "sha256:" + "1c" * 32  # what `make images` built here
SPEC = f"registry.example.com/ml/trainer@{SIGNED}"
BUILT = LocalImage(
    "localhost/burst/trainer:cpu", LOCAL, (LOCAL,), "9d" * 32
)  # podman: Digest, RepoDigests, Id


def refused(reference: str, *candidates: LocalImage) -> str:
    with pytest.raises(PolicyRefusal) as info:
        choose_trainer(reference, list(candidates))
    assert info.value.exit_code == EXIT_REFUSED
    line = info.value.one_line()
    assert "\n" not in line
    return line


def test_a_local_image_that_is_not_the_signed_one_is_refused_naming_both_digests() -> None:
    line = refused(SPEC, BUILT)
    assert SIGNED in line and LOCAL in line and "localhost/burst/trainer:cpu" in line
    assert "before anything is rented" in line
    assert "sign" in line and OPT_IN in line  # what to do: sign and pin it, or opt in


def test_a_spec_pinning_a_tag_only_is_refused_naming_what_would_run() -> None:
    line = refused("registry.example.com/ml/trainer:v1", BUILT)
    assert "not pinned by digest" in line and LOCAL in line
    # the opt-in does not run it either: verify-image would refuse the spec anyway
    with pytest.raises(PolicyRefusal):
        choose_trainer("registry.example.com/ml/trainer:v1", [BUILT], unverified_local=True)


def test_the_opt_in_runs_the_local_image_by_digest_labelled_unverified() -> None:
    got = choose_trainer(SPEC, [BUILT], unverified_local=True)
    assert got.provenance == UNVERIFIED_LOCAL
    assert got.ref == f"localhost/burst/trainer@{LOCAL}"  # its digest, never the tag
    assert got.accepted == SIGNED and got.digest == LOCAL


def test_the_image_known_by_the_signed_digest_runs_verified() -> None:
    # pushed, signed and pulled back by digest: the store knows it by the signed digest too
    pulled = LocalImage("localhost/burst/trainer:cpu", LOCAL, (LOCAL, SIGNED), "9d" * 32)
    got = choose_trainer(SPEC, [pulled])
    assert (got.provenance, got.ref, got.digest) == (
        VERIFIED,
        f"localhost/burst/trainer@{SIGNED}",
        SIGNED,
    )
    # the spec's own image in the store comes first, whatever else was built
    own = LocalImage(SPEC, SIGNED, (SIGNED,), "77" * 32)
    assert choose_trainer(SPEC, [own, BUILT]).ref == f"registry.example.com/ml/trainer@{SIGNED}"


def test_an_engine_that_records_no_digest_runs_the_image_id() -> None:
    # docker, an image never pushed: no RepoDigests; its id is immutable, its tag is not
    unpushed = LocalImage("burst/trainer:dev", "", (), "sha256:" + "ab" * 32)
    assert "image id sha256:abab" in refused(SPEC, unpushed)
    got = choose_trainer(SPEC, [unpushed], unverified_local=True)
    assert got.ref == "sha256:" + "ab" * 32


def test_how_a_report_shows_a_steps_image() -> None:
    assert describe(None, None, "in-process") == "in-process: no image"
    ran = f"localhost/burst/trainer@{LOCAL}"
    assert describe(ran, LOCAL, UNVERIFIED_LOCAL) == f"{ran} (unverified local image)"
    assert describe(None, None, None) == ""
