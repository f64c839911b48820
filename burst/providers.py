"""Which cloud providers burst can provision: one Terraform stack per provider.

A leaf module (no imports) shared by the planner, which never emits a candidate of a
provider without a stack as runnable, and by provisioning, which applies each candidate
with its provider's stack (``burst/infra/workspace.py``).
"""

from __future__ import annotations

# provider (as the catalog and the spec name it) -> stack kind (BURST_TF_STACK value)
PROVIDER_STACKS: dict[str, str] = {
    "aws": "aws",
    "gcp": "gcp",
    "azure": "azure",
    "nebius": "nebius",
}
# stack kind -> directory under terraform/stacks
STACK_DIRS: dict[str, str] = {
    "aws": "burst-run",
    "gcp": "gcp-run",
    "azure": "azure-run",
    "nebius": "nebius-run",
}


# stack kind -> the scheme of the checkpoint_uri its stack outputs (terraform/stacks/*/outputs.tf)
STACK_STORE_SCHEMES: dict[str, str] = {
    "aws": "s3",
    "gcp": "gs",
    "azure": "az",
    "nebius": "s3",
}
# what burst.storage.open_store opens
STORE_SCHEMES = ("file", "s3")


def store_refusal(kind: str) -> str | None:
    """Why a run applied with stack ``kind`` cannot run (its stack hands train a checkpoint
    URI burst storage cannot open, so train would fail in its pod on the rented GPUs after
    provision), or None."""
    scheme = STACK_STORE_SCHEMES.get(kind)
    if scheme is None or scheme in STORE_SCHEMES:
        return None
    return (
        f"the {kind} stack's checkpoint store is {scheme}://, which burst storage cannot open "
        f"(it opens {' and '.join(s + '://' for s in STORE_SCHEMES)}): not runnable"
    )


def stack_for(provider: str) -> str | None:
    """The stack kind that provisions ``provider``, or None when burst has none."""
    return PROVIDER_STACKS.get(provider)


def no_stack_reason(provider: str) -> str:
    return (
        f"no Terraform stack provisions provider {provider} "
        f"(stacks exist for {', '.join(sorted(PROVIDER_STACKS))}): not runnable"
    )
