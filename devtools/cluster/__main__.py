"""``python -m devtools.cluster [--root DIR] [--no-kueue]``: start the engines tier and keep
it up until Ctrl-C; prints the admin kubeconfig to use with kubectl or argo."""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import tempfile
import threading
from pathlib import Path

from devtools.cluster.controlplane import TierError
from devtools.cluster.tier import REPO, Tier
from devtools.engines import BuildFailed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m devtools.cluster", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--root", type=Path, help="the tier's directory (default: a new temporary one)")
    ap.add_argument("--no-kueue", action="store_true", help="start without Kueue")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    root = args.root or Path(tempfile.mkdtemp(prefix="burst-tier-"))
    try:
        tier = Tier(root, with_kueue=not args.no_kueue)
        with tier:
            tier.install_kyverno_crds()
            tier.cp.kubectl("apply", "-k", str(REPO / "deploy"))
            if not args.no_kueue:
                tier.cp.kubectl("apply", "-k", str(REPO / "deploy" / "kueue"))
            print(f"engines tier up: export KUBECONFIG={tier.cp.admin}", flush=True)
            done = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: done.set())
            with contextlib.suppress(KeyboardInterrupt):
                done.wait()
    except BuildFailed as exc:
        print(f"engines tier: build failed: {exc}", file=sys.stderr)
        return 3
    except TierError as exc:
        print(f"engines tier: {exc}", file=sys.stderr)
        return 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
