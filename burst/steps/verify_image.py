"""verify-image: refuse any image not pinned by digest and signed by a trusted key.

Reads the spec's ``image.reference``, ``image.trusted_key`` and ``compute.gpu_type``, the
trust policy (``policies/keys/trust.yaml``) and ``policies/gpu-requirements.yaml``. Writes the
verified digest, the signature that proved it, the compatibility record, and ``run_image``
(``repository@digest``: what the workflow gives train's image field, so the digest verified
here is the digest train runs; the model ``burst.documents.VerifiedImage``; ``burst schema
--document verified-image``). Any doubt exits 3 before anything is rented.
"""

from __future__ import annotations

import sys
from pathlib import Path

from burst import checkout
from burst.documents import VerifiedImage, produce
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> VerifiedImage:
    from burst.supplychain.compat import REQUIREMENTS_FILE, check_compat, load_requirements
    from burst.supplychain.provenance import run_reference
    from burst.supplychain.trust import load_trust, policies_dir
    from burst.supplychain.verify import verify_image

    job = ctx.spec
    trust = load_trust()
    requirements = load_requirements(policies_dir() / REQUIREMENTS_FILE)
    # a relative oci-layout:// path: the working directory (the base of every relative path in
    # a spec), then this checkout's (the demo image ships there); never the directory of this
    # step's copy of the spec (a pod's inputs)
    search = (Path.cwd(), checkout.ROOT)
    verified = verify_image(job.image.reference, job.image.trusted_key, trust, search=search)
    compatibility = check_compat(verified.labels, job.compute.gpu_type, requirements)
    doc = {
        "reference": job.image.reference,
        "pinned": verified.ref.pinned(),
        "repository": verified.ref.repository,
        "digest": verified.ref.digest,
        # what train runs: the workflow hands this to its image field (provenance.py)
        "run_image": run_reference(verified.ref),
        "verified": True,
        "store": {"kind": verified.store_kind, "location": verified.location},
        "signature": {
            "source": verified.signature_source,
            "manifest": verified.signature_manifest,
            "key": verified.key.name,
            "key_fingerprint": verified.key.fingerprint,
            "trust_rule": verified.rule.name,
            "pattern": verified.pattern,
            "trust_policy": str(trust.source),
        },
        "labels": {k: v for k, v in sorted(verified.labels.items()) if k.startswith("dev.burst.")},
        "compatibility": compatibility,
    }
    return produce(VerifiedImage, doc)


if __name__ == "__main__":
    sys.exit(main("verify-image", run))
