"""burst reap: destroy expired runs that nothing is driving any more (dry run by default)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import click


def _argo_live() -> tuple[set[str], dict[str, object]]:
    """Workflows still running, when an Argo server is configured (ARGO_SERVER). A run's
    expiry comes after its workflow's own deadline, so an unreachable server (say, the cluster
    is down) does not stop the reaper: it is recorded and expired runs are still reaped."""
    from burst.errors import BurstError
    from burst.runner.argo import settings_from_env, unfinished_workflows
    from burst.settings import current

    if not current().argo_server:
        return set(), {"checked": False, "reason": "ARGO_SERVER is not set"}
    try:
        names = unfinished_workflows(settings_from_env())
    except BurstError as exc:
        return set(), {"checked": False, "error": exc.one_line()}
    return names, {"checked": True, "unfinished": sorted(names)}


class _Checked:
    """An inventory whose listing failures are one line naming the endpoint (exit 4)."""

    def __init__(self, inner: Any, source: str) -> None:
        self.inner = inner
        self.region = inner.region
        self.source = source

    def tagged(self, run_id: str | None = None) -> list[Any]:
        from burst.infra.remote_errors import aws_errors

        with aws_errors("scanning tagged resources", self.region, self.source):
            return list(self.inner.tagged(run_id))

    def delete(self, res: Any) -> None:
        self.inner.delete(res)


def _cloud_inventory(spec: str) -> Any:
    """``PROVIDER=SITE_FILE`` -> the site's leak scan as an inventory; bad input is exit 2."""
    from burst.errors import BadInputError
    from burst.infra.cloudscan import SCANNED_PROVIDERS, CloudInventory
    from burst.inputs import read_text, short

    provider, sep, path_text = spec.partition("=")
    provider = provider.strip().lower()
    if not sep or not path_text or provider not in SCANNED_PROVIDERS:
        raise BadInputError(
            f"--cloud {short(spec)}: expected PROVIDER=SITE_FILE with PROVIDER one of "
            + ", ".join(SCANNED_PROVIDERS)
        )
    path = Path(path_text)
    text = read_text(path, what="site file")  # missing/unreadable/oversized: exit 2
    try:
        import io

        import hcl2

        site = hcl2.load(io.StringIO(text))
    except Exception as exc:
        raise BadInputError(f"--cloud {provider}={path}: not a tfvars file ({exc})") from None
    site = {
        k: v[1:-1] if isinstance(v, str) and len(v) >= 2 and v[0] == v[-1] == '"' else v
        for k, v in site.items()
    }
    region = path.name.split(".", 1)[0]
    return CloudInventory(provider, region, site, source=f"--cloud {provider}={path}")


REAPED_FILE = "reaped.json"  # burst.obs.run_view reads it: `burst runs` shows "reaped"


def _settle_reaped(root: Path, doc: dict[str, Any]) -> None:
    """Each run reaped with nothing left (from its state, or every tagged resource deleted)
    has its reservation in its team's ledger settled (ending reaped): ``doc["settled"]``."""
    from burst.admission.steps import run_ledger, settle_reaped

    done: dict[str, bool] = {}
    for act in doc["actions"]:
        rid = str(act["run_id"])
        if act["action"] == "destroy-from-state":
            ok = not act.get("resources_remaining")
        elif act["action"] == "delete-by-tags":
            ok = all(r.get("result") == "deleted" for r in act.get("resources", []))
        else:
            ok = False
        done[rid] = done.get(rid, True) and ok
    doc["settled"] = []
    if not any(done.values()):
        return
    ledger = run_ledger(root)
    for rid, ok in sorted(done.items()):
        entry = settle_reaped(rid, root, ledger) if ok else None
        if entry is not None:
            doc["settled"].append(
                {"run_id": rid, "team": entry.team, "reserved_usd": entry.reserved_usd,
                 "actual_usd": entry.actual_usd, "actual_gpu_hours": entry.actual_gpu_hours}
            )  # fmt: skip


def _mark_reaped(root: Path, doc: dict[str, Any]) -> None:
    """Each local run destroyed from its state gets ``reaped.json`` in its run directory (when
    and what was left), so `burst runs` and `burst status` show it as reaped."""
    from burst.runs import write_json_atomic

    for act in doc["actions"]:
        run_dir = root / str(act["run_id"])
        if act["action"] != "destroy-from-state" or not run_dir.is_dir():
            continue
        write_json_atomic(
            run_dir / REAPED_FILE,
            {
                "reaped_at": doc["now"],
                "action": act["action"],
                "resources_remaining": act.get("resources_remaining"),
            },
        )


@click.command("reap")
@click.option("--yes", is_flag=True, help="Act: destroy and delete. Without it, only report.")
@click.option("--json", "as_json", is_flag=True, help="Print what was found and done as JSON.")
@click.option(
    "--region",
    "regions",
    multiple=True,
    metavar="REGION",
    help="AWS region to scan for tagged resources (repeatable; default "
    "$BURST_REAP_REGIONS, comma-separated). Without any, only the state store.",
)
@click.option(
    "--cloud",
    "clouds",
    multiple=True,
    metavar="PROVIDER=SITE_FILE",
    help="Also scan a gcp, azure or nebius site for labelled leftovers of any run, scoped by "
    "that site's tfvars file (project_id, subscription_id); the region is the file's name, "
    "e.g. gcp=sites/asia-southeast1.tfvars (repeatable). A scan that cannot be made is exit 4.",
)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Local state store: run directories (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option(
    "--now",
    "now_text",
    metavar="TIME",
    help="Judge expiry as of this UTC time (ISO 8601): to preview a later reap, or, with "
    "--yes, to act as if it were that time (runs not yet expired by the clock are destroyed).",
)
def command(
    yes: bool,
    as_json: bool,
    regions: tuple[str, ...],
    clouds: tuple[str, ...],
    runs_root: Path | None,
    now_text: str | None,
) -> None:
    """Find runs past their burst:expires-at with no live runner, and destroy them.

    The state store is ./runs (local runs) and, when BURST_TF_STATE_BUCKET is set, the S3
    backend of aws runs. A run with Terraform state is destroyed from its state; resources
    whose state is lost are
    found by their burst:run-id tag and deleted in dependency order (node group, VPN
    connection, gateways, then the rest). Resources of live or unexpired runs, and untagged
    ones, are never touched. With --cloud, GCP (Cloud Asset), Azure (Resource Graph) and Nebius
    sites are scanned by the burst-run-id label / burst:run-id tag too: what is found is
    reported with its verdict, never deleted by label (destroy it from the run's state or by
    hand). A run reaped with nothing left has its team-ledger reservation settled (`burst
    budget`). Exit 4 when something could not be removed or a scan could not be made.
    """
    from burst.errors import EXIT_INFRA, BadInputError
    from burst.infra.leakscan import AwsInventory
    from burst.infra.reaper import parse_time, reap
    from burst.infra.remote_errors import aws_errors, check_aws_endpoint, check_region
    from burst.inputs import short
    from burst.runs import runs_root as default_root

    now = dt.datetime.now(dt.UTC)
    if now_text:
        parsed = parse_time(now_text)
        if parsed is None:
            raise BadInputError(f"--now {short(now_text)}: not an ISO 8601 time")
        now = parsed
    from burst.settings import current

    env = current()
    names = list(regions) or list(env.reap_regions)
    source = "--region" if regions else "BURST_REAP_REGIONS"
    check_aws_endpoint()
    names = [check_region(r.strip(), source) for r in names]
    inventories: list[Any] = [_Checked(AwsInventory(r.strip()), source) for r in names]
    inventories += [_cloud_inventory(spec) for spec in clouds]
    s3_states = []
    from burst.settings import per_stack

    bucket = per_stack(env.tf_state_bucket, "aws")  # one value, or aws=... of a per-stack map
    if bucket:  # the S3 state store of aws runs
        from burst.infra.reaper import runs_in_s3_state_store

        region = per_stack(env.tf_state_region, "aws") or (names[0] if names else None)
        if not region:
            raise BadInputError("BURST_TF_STATE_BUCKET is set: set BURST_TF_STATE_REGION too")
        if env.tf_state_region:
            check_region(region, "BURST_TF_STATE_REGION")
        with aws_errors(
            f"reading the Terraform state bucket {bucket!r} (BURST_TF_STATE_BUCKET)",
            region,
            "BURST_TF_STATE_REGION" if env.tf_state_region else source,
        ):
            s3_states = runs_in_s3_state_store(bucket, region)
    live, argo = _argo_live()
    doc = reap(
        now,
        (runs_root or default_root()).resolve(),
        list(inventories),
        act=yes,
        s3_states=s3_states,
        # None: Argo was not asked, so no workflow-driven run is judged by lapsed heartbeats
        live_workflows=live if argo.get("checked") else None,
    )
    doc["argo"] = argo
    _mark_reaped((runs_root or default_root()).resolve(), doc)
    _settle_reaped((runs_root or default_root()).resolve(), doc)
    if as_json:
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        mode = "acting" if yes else "dry run (use --yes to act)"
        click.echo(f"burst reap at {doc['now']}: {mode}")
        if not doc["runs"]:
            click.echo("  nothing found")
        for run in doc["runs"]:
            what = (
                f"{run['resources']} resource(s) in state"
                if run["source"] == "state"
                else f"{len(run['resources'])} tagged resource(s) in {run['region']}"
            )
            click.echo(f"  {run['run_id']}: {what}, expires {run['expires_at']}: {run['verdict']}")
        for act in doc["actions"]:
            click.echo(f"  -> {act['run_id']}: {act['action']}")
        for st in doc["settled"]:
            click.echo(
                f"  -> {st['run_id']}: team {st['team']}'s reservation of "
                f"${st['reserved_usd']:,.2f} settled at ${float(st['actual_usd'] or 0):,.2f}"
            )
    for line in doc.get("scan_errors", []):
        click.echo(f"burst: error: {line}", err=True)
    if doc["errors"]:
        raise SystemExit(EXIT_INFRA)
