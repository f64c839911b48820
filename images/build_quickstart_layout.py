"""Build the quickstart's signed demo image as an OCI layout, and the dev key that signs it.

    .venv/bin/python images/build_quickstart_layout.py [--keep-key PATH]

1. builds a tiny, reproducible image (one text file; the dev.burst.* labels of the trainer in
   images/lock.json) into examples/images/quickstart-oci/ (an OCI image layout), declaring the
   repository it is signed as: burst.local/burst/quickstart-trainer;
2. generates a fresh ECDSA P-256 key, writes its PUBLIC half to policies/keys/burst-dev.pub;
3. signs the image with it, cosign-style (tag sha256-<hex>.sig inside the layout);
4. forgets the private key (unless --keep-key PATH, outside the repository, is given).

The image digest depends only on the inputs, so the reference in examples/quickstart.yaml stays
valid across rebuilds; the key and the signature change each time (commit both together).
Run by `make` targets or by hand; it prints the reference to put in a spec.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from burst.supplychain.compat import LABELS  # noqa: E402
from burst.supplychain.layout import LayoutStore  # noqa: E402
from burst.supplychain.sign import sign_image  # noqa: E402
from burst.supplychain.signature import generate_key, private_pem, public_pem  # noqa: E402
from devtools.tinyimage import push_tiny_image  # noqa: E402

LAYOUT = Path("examples/images/quickstart-oci")
REPOSITORY = "burst.local/burst/quickstart-trainer"
KEY_NAME = "burst-dev"
README = b"""burst quickstart demo image.

A tiny image that stands in for the trainer image in the local quickstart: its labels are the
trainer's (images/lock.json), so verify-image checks its signature and its compatibility with
the spec's GPU type exactly as it does for a real trainer image. Nothing runs from it.
"""


def build(
    layout_dir: Path = ROOT / LAYOUT,
    public_key: Path = ROOT / "policies" / "keys" / f"{KEY_NAME}.pub",
    keep_key: Path | None = None,
) -> str:
    """Build, key and sign; return the image digest."""
    lock = json.loads((ROOT / "images" / "lock.json").read_text(encoding="utf-8"))["trainer"]
    labels = {
        LABELS["cuda"]: lock["cuda"],
        LABELS["driver"]: lock["driver_min"],
        LABELS["torch"]: lock["torch"],
        LABELS["nccl"]: lock["nccl"],
        LABELS["deepspeed"]: lock["deepspeed"],
        "org.opencontainers.image.title": "burst-quickstart-demo",
        "org.opencontainers.image.description": "stand-in for the trainer image (labels only)",
    }
    if layout_dir.exists():
        shutil.rmtree(layout_dir)
    store = LayoutStore(layout_dir, create=True)
    store.set_repository(REPOSITORY)
    digest = push_tiny_image(store, {"etc/burst/README": README}, labels, tag="quickstart")

    key = generate_key()
    public_key.write_bytes(public_pem(key.public_key()))
    with tempfile.TemporaryDirectory() as tmp:
        key_path = Path(tmp) / f"{KEY_NAME}.key"
        key_path.write_bytes(private_pem(key))
        key_path.chmod(0o600)
        sign_image(f"oci-layout://{layout_dir}@{digest}", key_path)
        if keep_key is not None:
            if ROOT in keep_key.resolve().parents:
                raise SystemExit("--keep-key must be outside the repository")
            keep_key.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(key_path, keep_key)
            keep_key.chmod(0o600)
    return digest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--keep-key", type=Path, help="keep the private key here (outside the repo)")
    args = p.parse_args()
    digest = build(keep_key=args.keep_key)
    print(f"oci-layout://{LAYOUT.as_posix()}@{digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
