"""burst image: sign and verify container images (cosign-compatible), render admission policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.group("image")
def command() -> None:
    """Sign and verify images: digest-pinned, cosign-compatible, checked against the trust policy.

    References are NAME@sha256:<64 hex> (a registry) or oci-layout://DIR@sha256:<64 hex>.
    """


@command.command("sign")
@click.argument("reference")
@click.option(
    "--key",
    "key",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="PEM ECDSA P-256 private key (password in BURST_SIGNING_KEY_PASSWORD if encrypted).",
)
def sign(reference: str, key: Path) -> None:
    """Sign REFERENCE with KEY and store the signature beside it (tag sha256-<hex>.sig).

    The signature is cosign's: `cosign verify --key KEY.pub --insecure-ignore-tlog REFERENCE`
    accepts it. No transparency-log entry is made.
    """
    from burst.supplychain.sign import sign_image

    signed = sign_image(reference, key, search=(Path.cwd(),))
    click.echo(
        f"signed {signed.repository}@{signed.digest} with key {signed.key_fingerprint[:19]}... "
        f"-> {signed.tag} ({signed.layers} signature(s), "
        f"manifest {signed.signature_manifest[:19]}...)"
    )


@command.command("verify")
@click.argument("reference")
@click.option("--key", "key_name", required=True, help="Name of a trusted key (policies/keys/).")
@click.option("--gpu-type", help="Also check the image's labels against this GPU type.")
@click.option(
    "--keys-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Trusted keys directory (default: keys/ of the policy directory: $BURST_POLICIES, "
    "else the checkout's policies/).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def verify(
    reference: str, key_name: str, gpu_type: str | None, keys_dir: Path | None, as_json: bool
) -> None:
    """Verify REFERENCE: pinned, signed by KEY, KEY trusted for its repository (exit 3 if not)."""
    from burst.supplychain.compat import REQUIREMENTS_FILE, check_compat, load_requirements
    from burst.supplychain.trust import load_trust, policies_dir
    from burst.supplychain.verify import verify_image

    trust = load_trust(keys_dir)
    verified = verify_image(reference, key_name, trust, search=(Path.cwd(),))
    result: dict[str, Any] = {
        "pinned": verified.ref.pinned(),
        "repository": verified.ref.repository,
        "digest": verified.ref.digest,
        "key": verified.key.name,
        "key_fingerprint": verified.key.fingerprint,
        "trust_rule": verified.rule.name,
        "signature_source": verified.signature_source,
    }
    if gpu_type:
        req = load_requirements(policies_dir() / REQUIREMENTS_FILE)
        result["compatibility"] = check_compat(verified.labels, gpu_type, req)
    if as_json:
        click.echo(json.dumps(result, indent=2, sort_keys=True))
        return
    click.echo(
        f"verified {result['pinned']}: signed by {key_name} "
        f"(rule {result['trust_rule']}, via {result['signature_source']})"
    )
    if gpu_type:
        compat = result["compatibility"]
        click.echo(f"compatible with {gpu_type}: driver >= {compat['required_driver']} needed")


@command.command("kyverno")
@click.option(
    "--keys-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Trusted keys directory (default: keys/ of the policy directory: $BURST_POLICIES, "
    "else the checkout's policies/).",
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write here.")
def kyverno(keys_dir: Path | None, out: Path | None) -> None:
    """Render the trust policy as a Kyverno ClusterPolicy (verifyImages)."""
    from burst.supplychain.kyverno import render_yaml
    from burst.supplychain.trust import load_trust

    text = render_yaml(load_trust(keys_dir))
    if out is None:
        click.echo(text, nl=False)
    else:
        from burst.outputs import write_output

        write_output(out, text, option="--out FILE")
        click.echo(f"wrote {out}")
