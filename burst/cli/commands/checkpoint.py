"""burst checkpoint pull RUN [STEP] DIR: a committed checkpoint of a training.command run,
written back as the program's own files."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("checkpoint")
def command() -> None:
    """The committed checkpoints of a run."""


@command.command("pull")
@click.argument("args", nargs=-1, required=True, metavar="RUN [STEP] DIR")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories are (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option(
    "--store",
    metavar="URL",
    help="The run's checkpoint store (storage.checkpoint_uri/RUN) when the run's directory "
    "is not on this machine.",
)
@click.option(
    "--force", is_flag=True, help="Write into a DIR that is not empty (same names replaced)."
)
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def pull(
    args: tuple[str, ...], runs_root: Path | None, store: str | None, force: bool, as_json: bool
) -> None:
    """Write the checkpoint of STEP (default: the newest that verifies, as a resume takes) of
    run RUN into DIR as the files the program saved: a Hugging Face checkpoint-N folder, the
    Lightning .ckpt files with their last.ckpt, a DCP folder, torch.save files, and, from a
    run that ended, the outputs it wrote at the end (trainer.save_model()). Every chunk is
    verified first, as on a resume. Exit 2 when RUN, STEP or DIR is wrong (one line), 4 when
    the store cannot be read."""
    from burst.checkpoint.catalog import list_checkpoints
    from burst.checkpoint.restore import restore_checkpoint
    from burst.errors import BadInputError
    from burst.program.snapshot import is_program_state, parts_of, write_entry
    from burst.runs import check_run_id, run_paths
    from burst.runs import runs_root as default_root
    from burst.spec import load_spec
    from burst.storage import open_store
    from burst.storage.location import run_url

    if len(args) not in (2, 3):
        raise BadInputError(
            f"burst checkpoint pull takes RUN [STEP] DIR, not {len(args)} argument(s)"
        )
    run, dest = args[0], Path(args[-1])
    step: int | None = None
    if len(args) == 3:
        if not args[1].isdigit():
            raise BadInputError(f"STEP must be a whole number, not {args[1]!r}")
        step = int(args[1])
    rid = check_run_id(run)
    url = store
    if url is None:
        paths = run_paths(rid, runs_root.resolve() if runs_root else default_root())
        if not paths.spec.is_file():
            raise BadInputError(
                f"run {rid}: no spec at {paths.spec} (not a run of this runs root: see "
                "--runs-root, or name its store with --store)"
            )
        url = run_url(load_spec(paths.spec).storage.checkpoint_uri, rid)
    if dest.exists() and not dest.is_dir():
        raise BadInputError(f"{dest} is not a directory")
    if dest.is_dir() and any(dest.iterdir()) and not force:
        raise BadInputError(f"{dest} is not empty (--force writes into it)")
    objects = open_store(url)
    refs = list_checkpoints(objects, "full")
    if not refs:
        raise BadInputError(f"run {rid} has no committed checkpoint in {url}")
    if step is not None and step not in {r.step for r in refs}:
        have = ", ".join(str(r.step) for r in refs[-10:])
        raise BadInputError(f"run {rid} has no committed checkpoint of step {step} (it has {have})")
    restored = restore_checkpoint(objects, step, tier="full", fallback=step is None)
    if not is_program_state(restored.state):
        raise BadInputError(
            f"the checkpoint of step {restored.step} of run {rid} holds burst's own training "
            "state (training.entrypoint), not a program's files"
        )
    resume = write_entry(restored.state, dest)
    names = [str(d["name"]) for d in parts_of(restored.state)]
    if as_json:
        doc = {"run": rid, "step": restored.step, "dir": str(dest), "entries": names}
        click.echo(json.dumps({**doc, "resume_from": str(resume)}))
        return
    click.echo(f"run {rid}, step {restored.step}: wrote {', '.join(names)} into {dest}")
    if step is None and restored.step != refs[-1].step:
        click.echo(f"(the newest, step {refs[-1].step}, did not verify)")
