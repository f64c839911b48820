"""Where the policy directory is: ONE resolution order for every part of burst (the legal
preflight, the provision gate, image verification, `burst policy`, `burst image`).

1. an explicit directory: a command's ``--policies DIR`` (or ``--keys-dir DIR`` for the
   trusted keys alone), or a function argument;
2. ``$BURST_POLICIES``;
3. the checkout's ``policies/`` (next to the ``burst`` package: the repository, or
   ``/opt/burst`` in the steps image, which also sets ``BURST_POLICIES``).

The trusted image-signing keys are ``<policy dir>/keys``. The old names
``BURST_POLICIES_DIR`` and ``BURST_KEYS_DIR`` are no longer read (a warning says so).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

ENV = "BURST_POLICIES"
RETIRED = ("BURST_POLICIES_DIR", "BURST_KEYS_DIR")
KEYS = "keys"


def checkout_policy_dir() -> Path:
    """The ``policies/`` directory of the checkout this ``burst`` package lives in."""
    from burst import checkout

    return checkout.POLICIES


def policy_dir(explicit: str | Path | None = None) -> Path:
    """The policy directory: ``explicit``, else ``$BURST_POLICIES``, else the checkout's."""
    from burst.settings import current

    env = current()
    for old in RETIRED:
        if env.raw(old):
            log.warning("%s is no longer read: set %s (the policy directory) instead", old, ENV)
    if explicit is not None and str(explicit):
        return Path(explicit)
    return env.policies or checkout_policy_dir()


def keys_dir(explicit: str | Path | None = None) -> Path:
    """The trusted-keys directory: ``explicit``, else ``<policy_dir()>/keys``."""
    if explicit is not None and str(explicit):
        return Path(explicit)
    return policy_dir() / KEYS
