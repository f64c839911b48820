"""The contract every pipeline step follows (``python -m burst.steps.<name>``).

    python -m burst.steps.<name> --spec FILE --run-id ID [--input NAME=VALUE ...] --out FILE

* ``--spec``: the job spec (YAML). In Argo it arrives as a raw input artifact.
* ``--input NAME=VALUE``: a document from an earlier step, VALUE being inline JSON (an Argo
  output parameter) or the path of a JSON file (the local runner).
* ``--out``: where the step writes its one JSON document (Argo reads it with
  ``valueFrom.path``). A copy goes to ``runs/<run-id>/docs/<step>.json``.
* Documents are typed (``burst.documents``): each input is parsed with its model
  (``INPUTS``) before the step runs, and the step returns its model (``STEP_DOCUMENTS``),
  serialised here. An input of the wrong shape is one line naming the document, the input
  and the field (exit 2).
* Exit codes: 0 done, 2 bad input, 3 refused by policy, 4 infrastructure, 75 preempted,
  1 anything else. A ``BurstError`` becomes one line on stderr, never a traceback.
* A step that fails may still leave its document: raise a ``BurstError`` with a ``doc``
  attribute (its model, or a dict) and it is written before the step exits with the error's code.
* Fault injection (for the harness): ``BURST_FAIL_AT`` holds a comma-separated list of step
  names (``provision``, ``train``, ...); the named steps fail on purpose with exit 1. Steps
  may define finer points (``provision:midway``, ``teardown:1``) and check them with
  ``ctx.fail_point(...)``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from burst import faults
from burst.documents import INPUTS, STEP_DOCUMENTS, StepDocument, parse_document
from burst.errors import EXIT_BAD_INPUT, EXIT_FAILURE, BadInputError, BurstError
from burst.obs.logs import setup_logging
from burst.runs import RunPaths, load_doc, run_paths, write_json_atomic
from burst.settings import Settings, current, use
from burst.spec import BurstJob, load_spec

log = logging.getLogger(__name__)

D = TypeVar("D", bound=StepDocument)


@dataclass
class StepContext:
    step: str
    run_id: str
    spec_path: Path
    paths: RunPaths
    inputs: dict[str, StepDocument] = field(default_factory=dict)
    out: Path | None = None
    _spec: BurstJob | None = None

    @property
    def spec(self) -> BurstJob:
        if self._spec is None:
            self._spec = load_spec(self.spec_path)
        return self._spec

    def input(self, name: str, model: type[D]) -> D:
        doc = self.optional_input(name, model)
        if doc is None:
            raise BadInputError(f"step {self.step} needs --input {name}=...")
        return doc

    def optional_input(self, name: str, model: type[D]) -> D | None:
        return parse_document(model, self.inputs[name]) if name in self.inputs else None

    def fail_point(self, point: str | None = None) -> None:
        """The named fault point ``step`` (or ``step:point``): see ``burst.faults.fail_at``."""
        faults.fail_at(self.step, point)


StepFn = Callable[[StepContext], StepDocument]


def read_input(name: str, value: str) -> StepDocument:
    """One ``--input NAME=VALUE``: inline JSON or a file, parsed with the input's model."""
    model = INPUTS.get(name)
    if model is None:
        raise BadInputError(f"unknown input {name!r}; inputs: {', '.join(INPUTS)}")
    source = f"--input {name}"
    text = value.strip()
    if not text.startswith(("{", "[")):
        source += f" {text}"
    return parse_document(model, load_doc(value, f"input {name}"), source)


def _serialise(doc: Any) -> dict[str, Any]:
    if isinstance(doc, StepDocument):
        return doc.to_json()
    return dict(doc)


def parse_args(step: str, argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m burst.steps.{step.replace('-', '_')}")
    p.add_argument("--spec", required=True, help="job spec (YAML)")
    p.add_argument("--run-id", required=True)
    p.add_argument("--input", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--out", help="where to write this step's JSON document")
    p.add_argument(
        "--runs-root",
        help="run directories, and the root of a relative file:// store "
        "(default $BURST_RUNS_ROOT or ./runs)",
    )
    return p.parse_args(argv)


#: Set by burst.train.launch for the ranks it starts: where each records its exit code (and
#: rank 0 its document, which the launcher writes as the step's)
RANK_EXIT_DIR_ENV = "BURST_RANK_EXIT_DIR"
RANK_DOC = "doc.json"


def _rank_exit_dir() -> Path | None:
    where = current().rank_exit_dir
    return Path(where) if where and "LOCAL_RANK" in os.environ else None


def _write_doc(paths: RunPaths, step: str, out: Path | None, doc: dict[str, Any]) -> None:
    ranks = _rank_exit_dir()
    if ranks is not None:  # one rank of several: the launcher writes the step's document
        if os.environ.get("RANK", "0") == "0":
            write_json_atomic(ranks / RANK_DOC, doc)
        return
    write_json_atomic(paths.doc(step), doc)
    if out is not None:
        write_json_atomic(out, doc)


def main(
    step: str, fn: StepFn, argv: list[str] | None = None, *, step_fail_point: bool = True
) -> int:
    """Run one step: parse arguments, call ``fn``, write its document, map errors to codes.

    ``step_fail_point=False`` lets a step place its own fault points (teardown does: an
    injected failure there fails destroy attempts, which it must survive)."""
    errors: list[str] = []
    code = _main(step, fn, argv, step_fail_point, errors)
    ranks = _rank_exit_dir()
    if ranks is not None:
        rank = os.environ.get("RANK", "0")
        record = {"rank": int(rank), "exit_code": code, "error": errors[0] if errors else None}
        write_json_atomic(ranks / f"rank-{rank}.json", record)
    return code


def _main(
    step: str, fn: StepFn, argv: list[str] | None, step_fail_point: bool, errors: list[str]
) -> int:
    args = parse_args(step, argv)
    os.environ["BURST_STEP"] = step  # for this step's children (torchrun ranks, workers)
    os.environ["BURST_RUN_ID"] = args.run_id
    if args.runs_root:  # one runs root for the step and its children: a relative file://
        # store is under it too (it followed $BURST_RUNS_ROOT alone, and a step run by hand
        # with --runs-root wrote its checkpoints under ./runs)
        os.environ["BURST_RUNS_ROOT"] = str(Path(args.runs_root).resolve())
    with use(Settings.from_env()):  # the environment, read once for the whole step
        return _run_step(step, fn, args, step_fail_point, errors)


def _run_step(
    step: str, fn: StepFn, args: argparse.Namespace, step_fail_point: bool, errors: list[str]
) -> int:
    rank = os.environ.get("RANK") if _rank_exit_dir() is not None else None
    setup_logging(logging.INFO, run_id=args.run_id, step=step if rank is None else f"{step}.{rank}")
    started = time.monotonic()
    try:
        root = Path(args.runs_root).resolve() if args.runs_root else None
        paths = run_paths(args.run_id, root).create()
        inputs: dict[str, StepDocument] = {}
        for item in args.input:
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise BadInputError(f"--input {item!r} must be NAME=VALUE")
            inputs[name] = read_input(name, value)
        ctx = StepContext(
            step, args.run_id, Path(args.spec), paths, inputs, Path(args.out) if args.out else None
        )
        if step_fail_point:
            ctx.fail_point()
        produced = fn(ctx)
        expected = STEP_DOCUMENTS.get(step)
        if expected is not None and not isinstance(produced, expected):
            raise TypeError(f"step {step} returned {type(produced).__name__}, not {expected}")
        doc = _serialise(produced)
        doc.setdefault("step", step)
        doc.setdefault("run_id", args.run_id)
        doc.setdefault("seconds", round(time.monotonic() - started, 3))
        _write_doc(paths, step, ctx.out, doc)
        return 0
    except BurstError as exc:
        doc_on_error = getattr(exc, "doc", None)
        if isinstance(doc_on_error, StepDocument | dict) and "paths" in locals():
            doc_on_error = _serialise(doc_on_error)
            doc_on_error.update(
                step=step, run_id=args.run_id, error=exc.one_line(), exit_code=exc.exit_code
            )
            _write_doc(paths, step, Path(args.out) if args.out else None, doc_on_error)
        errors.append(exc.one_line())
        print(f"burst {step}: error: {exc.one_line()}", file=sys.stderr)
        log.debug("step failed", exc_info=True)
        return exc.exit_code
    except SystemExit as exc:  # argparse
        return int(exc.code) if isinstance(exc.code, int) else EXIT_BAD_INPUT
    except Exception as exc:
        log.exception("step %s crashed", step)
        errors.append(f"unexpected error: {exc.__class__.__name__}: {exc}")
        print(f"burst {step}: unexpected error: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
