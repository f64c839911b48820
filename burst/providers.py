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


def stack_for(provider: str) -> str | None:
    """The stack kind that provisions ``provider``, or None when burst has none."""
    return PROVIDER_STACKS.get(provider)


def no_stack_reason(provider: str) -> str:
    return (
        f"no Terraform stack provisions provider {provider} "
        f"(stacks exist for {', '.join(sorted(PROVIDER_STACKS))}): not runnable"
    )
