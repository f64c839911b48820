"""Static checks of burst's Terraform (HCL), for modules whose provider cannot be downloaded.

    python -m devtools.hclcheck [PATH ...]        (default: terraform/)

Each directory of ``.tf`` files is one module; python-hcl2 parses it and these rules run:

``tags``        every taggable AWS resource sets ``tags`` from the run's tags (``var.tags``,
                or a local derived from it, or a local carrying ``burst:run-id`` and
                ``burst:expires-at``); launch templates also tag instances and volumes;
                module calls to ``aws-*`` modules pass ``tags``.
``imdsv2``      launch templates and instances require IMDSv2 (``http_tokens = "required"``).
``encryption``  EBS volumes encrypted, KMS keys rotated, every bucket has a KMS
                server-side-encryption configuration, node groups use a launch template.
``ingress``     no security group ingress from 0.0.0.0/0 or ::/0.
``region``      no hard-coded region (nor availability zone) outside descriptions.
``account``     no hard-coded 12-digit account id outside descriptions.
``credentials`` no static credentials (provider access_key/secret_key, AKIA... key ids).
                A root module's AWS provider sets default_tags with all the run tags.

Exit 0 when clean, 1 with one line per finding (``file:line: resource: [rule] message``),
2 when a file does not parse.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst import checkout
from burst.spec import RUN_TAG_KEYS, TAG_EXPIRES_AT, TAG_RUN_ID

REGION_RE = re.compile(
    r"\b(?:us|eu|ap|sa|ca|me|af|il|mx|cn)-(?:gov-|iso-|isob-)?"
    r"(?:north|south|east|west|central|northeast|northwest|southeast|southwest)-\d[a-z]?\b"
)
ACCOUNT_RE = re.compile(r"(?<![\d.])\d{12}(?![\d.])")
OPEN_CIDRS = ("0.0.0.0/0", "::/0")
FREE_TEXT_KEYS = frozenset({"description", "error_message"})

# AWS resource types that take no ``tags`` argument. Anything else is taggable (fail closed).
NOT_TAGGABLE = frozenset(
    {
        "aws_autoscaling_attachment",
        "aws_ec2_transit_gateway_route",
        "aws_eks_access_policy_association",
        "aws_iam_policy_attachment",
        "aws_iam_role_policies_exclusive",
        "aws_iam_role_policy",
        "aws_iam_role_policy_attachment",
        "aws_iam_user_policy",
        "aws_iam_user_policy_attachment",
        "aws_kms_alias",
        "aws_kms_grant",
        "aws_lb_target_group_attachment",
        "aws_main_route_table_association",
        "aws_network_interface_attachment",
        "aws_route",
        "aws_route_table_association",
        "aws_s3_bucket_acl",
        "aws_s3_bucket_cors_configuration",
        "aws_s3_bucket_lifecycle_configuration",
        "aws_s3_bucket_logging",
        "aws_s3_bucket_notification",
        "aws_s3_bucket_ownership_controls",
        "aws_s3_bucket_policy",
        "aws_s3_bucket_public_access_block",
        "aws_s3_bucket_replication_configuration",
        "aws_s3_bucket_server_side_encryption_configuration",
        "aws_s3_bucket_versioning",
        "aws_security_group_rule",
        "aws_volume_attachment",
        "aws_vpn_connection_route",
        "aws_vpn_gateway_attachment",
        "aws_vpn_gateway_route_propagation",
    }
)
LAUNCH_TAGGED = ("instance", "volume")


@dataclass(frozen=True)
class Finding:
    file: Path
    line: int
    resource: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.resource}: [{self.rule}] {self.message}"


class HclParseError(Exception):
    def __init__(self, file: Path, detail: str) -> None:
        super().__init__(f"{file}: cannot parse HCL: {detail}")
        self.file = file


# --------------------------------------------------------------------------- parsing


def _unq(value: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals: strip them."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _text(value: Any) -> str:
    """An attribute as text (expressions keep their ``${...}`` form)."""
    if isinstance(value, (dict, list)):
        return repr(value)
    return str(_unq(value))


def _blocks(body: dict[str, Any], name: str) -> list[dict[str, Any]]:
    value = body.get(name)
    if isinstance(value, list):
        return [b for b in value if isinstance(b, dict)]
    if isinstance(value, dict):
        return [value]
    return []


@dataclass
class Resource:
    kind: str
    name: str
    body: dict[str, Any]
    file: Path
    line: int

    @property
    def address(self) -> str:
        return f"{self.kind}.{self.name}"


@dataclass
class Module:
    dir: Path
    resources: list[Resource]
    module_calls: list[Resource]
    locals: dict[str, str]
    variables: set[str]
    docs: list[tuple[Path, dict[str, Any], str]]


def _line_of(text: str, pattern: str) -> int:
    m = re.search(pattern, text)
    return text.count("\n", 0, m.start()) + 1 if m else 1


def parse_module(directory: Path, files: list[Path]) -> Module:
    import hcl2

    mod = Module(directory, [], [], {}, set(), [])
    for f in sorted(files):
        text = f.read_text(encoding="utf-8")
        try:
            doc = hcl2.loads(text)
        except Exception as exc:  # python-hcl2 raises lark errors of many kinds
            raise HclParseError(f, " ".join(str(exc).split())[:200]) from None
        mod.docs.append((f, doc, text))
        for block in doc.get("resource", []):
            for kind, named in block.items():
                for name, body in named.items():
                    k, n = _unq(kind), _unq(name)
                    line = _line_of(text, rf'resource\s+"{re.escape(k)}"\s+"{re.escape(n)}"')
                    mod.resources.append(Resource(k, n, body, f, line))
        for block in doc.get("module", []):
            for name, body in block.items():
                n = _unq(name)
                line = _line_of(text, rf'module\s+"{re.escape(n)}"')
                mod.module_calls.append(Resource("module", n, body, f, line))
        for block in doc.get("locals", []):
            for key, value in block.items():
                if key != "__is_block__":
                    mod.locals[key] = _text(value)
        for block in doc.get("variable", []):
            mod.variables.update(_unq(k) for k in block)
    return mod


def modules_under(paths: Iterable[Path]) -> Iterator[tuple[Path, list[Path]]]:
    """Each directory holding ``.tf`` files, with its files (``.terraform`` skipped)."""
    by_dir: dict[Path, list[Path]] = {}
    for p in paths:
        files = [p] if p.is_file() else sorted(p.rglob("*.tf"))
        for f in files:
            if ".terraform" in f.parts:
                continue
            by_dir.setdefault(f.parent, []).append(f)
    yield from sorted(by_dir.items())


# --------------------------------------------------------------------------- rules


def _tag_sources(mod: Module) -> set[str]:
    """Expressions that carry the run's tags: var.tags and locals derived from it."""
    sources = {"var.tags"} if "tags" in mod.variables else set()
    for name, expr in mod.locals.items():
        if TAG_RUN_ID in expr and TAG_EXPIRES_AT in expr:
            sources.add(f"local.{name}")
    changed = True
    while changed:
        changed = False
        for name, expr in mod.locals.items():
            ref = f"local.{name}"
            if ref not in sources and any(re.search(rf"\b{re.escape(s)}\b", expr) for s in sources):
                sources.add(ref)
                changed = True
    return sources


def _carries(expr: Any, sources: set[str]) -> bool:
    text = _text(expr)
    return any(re.search(rf"\b{re.escape(s)}\b", text) for s in sources)


def check_tags(mod: Module) -> Iterator[Finding]:
    sources = _tag_sources(mod)
    for r in mod.resources:
        if not r.kind.startswith("aws_") or r.kind in NOT_TAGGABLE:
            continue
        if "tags" not in r.body:
            yield Finding(
                r.file,
                r.line,
                r.address,
                "tags",
                "taggable resource has no tags: set tags = the run's tags "
                "(burst:run-id, burst:expires-at, owner, team, cost centre)",
            )
        elif not _carries(r.body["tags"], sources):
            yield Finding(
                r.file,
                r.line,
                r.address,
                "tags",
                f"tags {_text(r.body['tags'])} do not derive from the run's tags "
                "(var.tags or a local built from it)",
            )
        if r.kind == "aws_launch_template":
            tagged = {
                _unq(b.get("resource_type"))
                for b in _blocks(r.body, "tag_specifications")
                if _carries(b.get("tags", ""), sources)
            }
            for rtype in LAUNCH_TAGGED:
                if rtype not in tagged:
                    yield Finding(
                        r.file,
                        r.line,
                        r.address,
                        "tags",
                        f"no tag_specifications for {rtype} with the run's tags",
                    )
    for call in mod.module_calls:
        source = _text(call.body.get("source", ""))
        if "aws-" in source and not _carries(call.body.get("tags", ""), sources):
            yield Finding(
                call.file,
                call.line,
                call.address,
                "tags",
                f"module {source} is not passed the run's tags",
            )


def check_imdsv2(mod: Module) -> Iterator[Finding]:
    for r in mod.resources:
        if r.kind not in ("aws_launch_template", "aws_instance"):
            continue
        opts = _blocks(r.body, "metadata_options")
        tokens = _unq(opts[0].get("http_tokens")) if opts else None
        if tokens != "required":
            yield Finding(
                r.file,
                r.line,
                r.address,
                "imdsv2",
                f"IMDSv1 allowed (http_tokens = {tokens!r}): set metadata_options "
                '{ http_tokens = "required" }',
            )


def _is_true(value: Any) -> bool:
    return _unq(value) in (True, "true")


def check_encryption(mod: Module) -> Iterator[Finding]:
    sse_targets = set()
    for r in mod.resources:
        if r.kind == "aws_s3_bucket_server_side_encryption_configuration":
            algos = [
                _unq(d.get("sse_algorithm"))
                for rule in _blocks(r.body, "rule")
                for d in _blocks(rule, "apply_server_side_encryption_by_default")
            ]
            if algos and all(a in ("aws:kms", "aws:kms:dsse") for a in algos):
                sse_targets.add(_text(r.body.get("bucket", "")))
    for r in mod.resources:
        if r.kind == "aws_launch_template":
            for bdm in _blocks(r.body, "block_device_mappings"):
                for ebs in _blocks(bdm, "ebs"):
                    if not _is_true(ebs.get("encrypted")):
                        yield Finding(
                            r.file,
                            r.line,
                            r.address,
                            "encryption",
                            "EBS volume of block_device_mappings is not encrypted",
                        )
        elif r.kind == "aws_instance":
            for dev in _blocks(r.body, "root_block_device") + _blocks(r.body, "ebs_block_device"):
                if not _is_true(dev.get("encrypted")):
                    yield Finding(
                        r.file, r.line, r.address, "encryption", "instance volume is not encrypted"
                    )
        elif r.kind == "aws_ebs_volume" and not _is_true(r.body.get("encrypted")):
            yield Finding(r.file, r.line, r.address, "encryption", "EBS volume is not encrypted")
        elif r.kind == "aws_kms_key" and not _is_true(r.body.get("enable_key_rotation")):
            yield Finding(
                r.file,
                r.line,
                r.address,
                "encryption",
                "KMS key rotation is off (enable_key_rotation = true)",
            )
        elif r.kind == "aws_s3_bucket":
            ref = re.compile(rf"\baws_s3_bucket\.{re.escape(r.name)}\b")
            if not any(ref.search(t) for t in sse_targets):
                yield Finding(
                    r.file,
                    r.line,
                    r.address,
                    "encryption",
                    "bucket has no aws_s3_bucket_server_side_encryption_configuration with aws:kms",
                )
        elif r.kind == "aws_eks_node_group" and not _blocks(r.body, "launch_template"):
            yield Finding(
                r.file,
                r.line,
                r.address,
                "encryption",
                "node group without a launch template: its volumes' encryption "
                "and IMDSv2 are not controlled",
            )


def check_ingress(mod: Module) -> Iterator[Finding]:
    def opens(value: Any) -> bool:
        return any(c in _text(value) for c in OPEN_CIDRS)

    for r in mod.resources:
        bad = False
        if r.kind == "aws_security_group":
            bad = any(
                opens(b.get("cidr_blocks", "")) or opens(b.get("ipv6_cidr_blocks", ""))
                for b in _blocks(r.body, "ingress")
            )
        elif r.kind == "aws_security_group_rule" and _unq(r.body.get("type")) == "ingress":
            bad = opens(r.body.get("cidr_blocks", "")) or opens(r.body.get("ipv6_cidr_blocks", ""))
        elif r.kind == "aws_vpc_security_group_ingress_rule":
            bad = opens(r.body.get("cidr_ipv4", "")) or opens(r.body.get("cidr_ipv6", ""))
        if bad:
            yield Finding(
                r.file,
                r.line,
                r.address,
                "ingress",
                "ingress open to the internet (0.0.0.0/0 or ::/0)",
            )


def _walk_values(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in FREE_TEXT_KEYS or k == "__is_block__":
                continue
            yield from _walk_values(v, f"{path}.{_unq(k)}" if path else str(_unq(k)))
    elif isinstance(node, list):
        for v in node:
            yield from _walk_values(v, path)
    elif isinstance(node, str):
        yield path, node
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        yield path, str(node)


def check_literals(mod: Module) -> Iterator[Finding]:
    """No hard-coded region or account id in any value (descriptions excepted)."""
    for f, doc, text in mod.docs:
        for path, value in _walk_values(doc):
            parts = path.split(".")
            where = ".".join(parts[1:3] if parts[0] == "resource" else parts[:3])
            for rule, rx, what in (
                ("region", REGION_RE, "region"),
                ("account", ACCOUNT_RE, "account id"),
            ):
                m = rx.search(value)
                if m:
                    line = _line_of(text, re.escape(m.group(0)))
                    yield Finding(
                        f,
                        line,
                        where,
                        rule,
                        f"hard-coded {what} {m.group(0)!r}: take it from a variable",
                    )


STATIC_KEY_RE = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
CREDENTIAL_ARGS = ("access_key", "secret_key", "token", "shared_credentials_files")


def check_providers(mod: Module) -> Iterator[Finding]:
    """A root module's AWS provider: default_tags with every run tag, no static credentials."""
    for f, doc, text in mod.docs:
        for block in doc.get("provider", []):
            for name, body in block.items():
                if _unq(name) != "aws":
                    continue
                line = _line_of(text, r'provider\s+"aws"')
                for arg in CREDENTIAL_ARGS:
                    if arg in body:
                        yield Finding(
                            f,
                            line,
                            "provider.aws",
                            "credentials",
                            f"static credentials ({arg}) in the provider: use the "
                            "environment's role (OIDC, IRSA, instance profile)",
                        )
                default = _blocks(body, "default_tags")
                expr = _text(default[0].get("tags", "")) if default else ""
                expanded = expr + "".join(v for k, v in mod.locals.items() if f"local.{k}" in expr)
                missing = [k for k in RUN_TAG_KEYS if k not in expanded]
                if missing:
                    yield Finding(
                        f,
                        line,
                        "provider.aws",
                        "tags",
                        "default_tags lack the run tags " + ", ".join(missing),
                    )
        for path, value in _walk_values(doc):
            m = STATIC_KEY_RE.search(value)
            if m:
                yield Finding(
                    f,
                    _line_of(text, m.group(0)),
                    path,
                    "credentials",
                    "an AWS access key id is written in the configuration",
                )


RULES = (check_tags, check_imdsv2, check_encryption, check_ingress, check_literals, check_providers)


def check_paths(paths: Iterable[Path]) -> list[Finding]:
    findings: list[Finding] = []
    for directory, files in modules_under(paths):
        mod = parse_module(directory, files)
        for rule in RULES:
            findings.extend(rule(mod))
    return findings


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] or [checkout.TERRAFORM]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.stderr.write(f"hclcheck: no such path: {', '.join(missing)}\n")
        return 2
    try:
        findings = check_paths(paths)
    except HclParseError as exc:
        sys.stderr.write(f"hclcheck: {exc}\n")
        return 2
    for f in findings:
        sys.stderr.write(f"{f}\n")
    n = sum(1 for _ in modules_under(paths))
    sys.stderr.write(f"hclcheck: {len(findings)} finding(s) in {n} module(s)\n")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
