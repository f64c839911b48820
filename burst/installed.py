"""What a spec's training needs installed, checked before renting.

``training.engine`` and the mode decide which packages the train step imports:

* burst's loop (``training.entrypoint``): torch always; DeepSpeed for ``engine: deepspeed``
  (the ``[train]`` extra); torch's ``fully_shard`` (torch 2.6 or later) for ``engine: fsdp2``;
* your own program (``training.command``): a Python script that imports a framework adapter
  (``burst.adapters.hf``, ``burst.adapters.lightning``, ``burst.adapters.dcp_storage``) needs
  that framework (transformers, lightning: the ``[frameworks]`` extra; torch for DCP), in the
  interpreter that runs the script.

Each is found with ``importlib.util.find_spec`` and the installed distributions' metadata:
nothing is imported (torch's start-up alone is seconds). A missing package is one
``BadInputError`` line (exit 2) naming the field, the package, the Python that lacks it and
what to install: the extra as this installation of burst declares it (its Requires-Dist), so
the hint stays true to pyproject.toml.

Where: the environment checked is the one the train step runs in. ``burst validate`` checks
this one (it also builds the entrypoint here); the pipeline's preflight step checks its own
only when the train step runs in the same environment (``burst run``, each step a process of
this machine's Python). In a container run or on a cluster the preflight step runs in the
steps image (no torch, by design) and train in the trainer image: there verify-image refuses,
before anything is rented, a trainer image whose labels do not declare torch and DeepSpeed
(``burst.supplychain.compat``), and a program's own framework is the image builder's to
install (docs/your-training.md).
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import logging
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from burst.errors import BadInputError
from burst.spec import BurstJob

log = logging.getLogger(__name__)

DISTRIBUTION = "burst-train"
#: the extras pyproject.toml declares, for a checkout run without installing burst
FALLBACK_EXTRAS = {"deepspeed": "train", "transformers": "frameworks", "lightning": "frameworks"}
TORCH_HINT = (
    "install torch first (e.g. pip install torch; a CUDA or CPU build of your choice, "
    "README 'Install'), then burst"
)
#: the torch release from which ``torch.distributed.fsdp.fully_shard`` is public (FSDP2)
FSDP2_TORCH = (2, 6)
#: a framework adapter -> the (module, distribution) it imports
ADAPTERS: dict[str, tuple[tuple[str, str], ...]] = {
    "burst.adapters.hf": (("transformers", "transformers"),),
    "burst.adapters.lightning": (("lightning", "lightning"),),
    "burst.adapters.dcp_storage": (("torch", "torch"),),
}


@dataclass(frozen=True)
class Need:
    """One package the train step imports: its module, its distribution, why it is needed
    (the spec field) and, when it is missing, where from (the Python that lacks it)."""

    module: str
    distribution: str
    field: str
    why: str

    def hint(self) -> str:
        if self.distribution == "torch":
            return TORCH_HINT
        extra = extra_for(self.distribution)
        if extra is None:
            return f"pip install {self.distribution}"
        return f"pip install '{DISTRIBUTION}[{extra}]'"

    def problem(self, python: str) -> BadInputError:
        return BadInputError(
            f"{self.field}: {self.why} needs the Python package {self.distribution}, which is "
            f"not installed for {python}: {self.hint()}"
        )


def extra_for(distribution: str) -> str | None:
    """The extra of burst that installs ``distribution`` (its Requires-Dist markers)."""
    try:
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return FALLBACK_EXTRAS.get(distribution)
    pattern = re.compile(r"""^\s*([A-Za-z0-9_.\-]+).*extra\s*==\s*["']([^"']+)["']""")
    found: list[str] = []
    for req in requires:
        m = pattern.match(req)
        if m and _canonical(m.group(1)) == _canonical(distribution):
            found.append(m.group(2))
    # the narrowest extra that has it (train before test, frameworks before test)
    for extra in found:
        if extra != "test":
            return extra
    return found[0] if found else FALLBACK_EXTRAS.get(distribution)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def needs(job: BurstJob) -> list[Need]:
    """The packages the train step imports for this spec (burst's loop; for a program, see
    ``program_needs``)."""
    t = job.training
    if t.own_program:
        return []
    out = [Need("torch", "torch", "training.entrypoint", "burst's training loop")]
    if t.engine == "deepspeed":
        out.append(Need("deepspeed", "deepspeed", "training.engine", "engine deepspeed"))
    return out


def program_needs(job: BurstJob) -> tuple[str, list[Need]] | None:
    """(interpreter, needs) of a ``training.command`` Python script, from the adapters its
    top-level imports name; None when the command is no Python script burst can read."""
    from burst.program.check import python_target
    from burst.program.process import interpreted

    command = job.training.command
    if not command:
        return None
    target = python_target(interpreted(list(command)), job.training.launcher)
    if target is None:
        return None
    interpreter, kind, path = target
    if kind != "script" or not Path(path).is_file():
        return None  # a module (-m) is not read: finding it would import its package
    try:
        tree = ast.parse(Path(path).read_bytes(), path)
    except (SyntaxError, ValueError, OSError):
        return None  # the dry import of burst.program.check reports it
    out: list[Need] = []
    for name in _imports(tree):
        for module, dist in ADAPTERS.get(name, ()):
            if all(n.module != module for n in out):
                out.append(Need(module, dist, "training.command", f"{path} (imports {name})"))
    return interpreter, out


def _imports(tree: ast.Module) -> list[str]:
    """The modules a script imports at top level (``from burst.adapters import hf`` names
    ``burst.adapters.hf``)."""
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def missing(job: BurstJob) -> list[BadInputError]:
    """One error per package the spec's train step needs and this environment (or the
    program's interpreter) lacks, first the one everything else needs."""
    problems = [n.problem(sys.executable) for n in needs(job) if not _found(n.module)]
    if not problems and job.training.engine == "fsdp2":
        version = _version("torch")
        if version is not None and version < FSDP2_TORCH:
            problems.append(
                BadInputError(
                    "training.engine: engine fsdp2 needs torch "
                    f"{'.'.join(map(str, FSDP2_TORCH))} or later (fully_shard); "
                    f"{sys.executable} has torch {'.'.join(map(str, version))}"
                )
            )
    program = program_needs(job)
    if program is not None:
        interpreter, wanted = program
        absent = _absent_in(interpreter, [n.module for n in wanted])
        problems += [n.problem(interpreter) for n in wanted if n.module in absent]
    return problems


def check(job: BurstJob) -> None:
    """``missing``'s first problem raised (exit 2), the others logged."""
    problems = missing(job)
    for p in problems[1:]:
        log.error("%s", p.one_line())
    if problems:
        raise problems[0]


def trains_here() -> bool:
    """Whether the train step runs in this Python environment: a step of ``burst run`` run as
    a process here (the local runner marks each with ``BURST_POD_DIR`` and starts it with
    its own interpreter; a container or a cluster pod is not marked)."""
    from burst.settings import current

    return current().pod_dir is not None


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(distribution: str) -> tuple[int, ...] | None:
    try:
        text = importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    m = re.match(r"^(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


FIND = (
    "import importlib.util, sys\n"
    "for m in sys.argv[1:]:\n"
    "    try:\n"
    "        ok = importlib.util.find_spec(m) is not None\n"
    "    except (ImportError, ValueError):\n"
    "        ok = False\n"
    "    if not ok:\n"
    "        print(m)\n"
)


def _absent_in(interpreter: str, modules: list[str]) -> set[str]:
    """The top-level modules ``interpreter`` cannot find (this process's own: find_spec)."""
    if not modules:
        return set()
    if os.path.realpath(interpreter) == os.path.realpath(sys.executable):
        return {m for m in modules if not _found(m)}
    try:
        proc = subprocess.run(
            [interpreter, "-c", FIND, *modules],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return set()  # the command check reports an interpreter that does not start
    if proc.returncode != 0:
        return set()
    return {ln.strip() for ln in proc.stdout.splitlines() if ln.strip()}
