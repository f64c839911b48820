"""When a checkpoint a program saved is complete: one rule per format, each read from the
framework's own source (the versions pinned in pyproject.toml).

An *entry* is one top-level file or directory of the checkpoint directory. Its rule:

* **marker** (any format, the generic rule): ``<entry>.burst-commit`` exists next to it and
  holds the step (``burst.checkpoint.commit(path, step)`` writes it atomically; in a shell,
  ``echo $STEP > ckpt.burst-commit`` after the save). The marker wins over the rules below.
* **dcp** (torch.distributed.checkpoint, a directory holding ``*.distcp`` files): complete once
  ``.metadata`` exists. torch/distributed/checkpoint/filesystem.py,
  ``_FileSystemWriter.finish``: the coordinator pickles the metadata into ``.metadata.tmp``
  and renames it to ``.metadata`` after every rank's ``write_data`` has finished; the rename is
  the last thing a save does.
* **hf** (Hugging Face Trainer, a ``checkpoint-N`` directory): complete once
  ``trainer_state.json`` parses. transformers/trainer.py, ``Trainer._save_checkpoint``: model,
  then optimizer, scheduler, scaler and RNG states, then ``self.state.save_to_json(...
  TRAINER_STATE_NAME)`` last (``TrainerState.save_to_json`` writes it with a plain ``open``,
  not atomically: hence "parses", not "exists"); its ``global_step`` is the step.
* **torch-zip** (``torch.save`` files, Lightning's ``.ckpt``: ``.ckpt .pt .pth .bin .tar``):
  complete once the file is a whole zip archive. torch.save writes the zip format
  (caffe2/serialize/inline_container.cc, ``PyTorchStreamWriter::writeEndOfFile``: the central
  directory and the end-of-central-directory record are written last). Lightning's
  lightning_fabric/utilities/cloud_io.py ``_atomic_save`` serialises into a BytesIO and writes
  it with one ``f.write`` to the local path, in place: no rename, so a half-written ``.ckpt``
  lies at the final name until the write ends; its zip end record comes with the last bytes.

The step of a checkpoint is the framework's own, read from what it saved: the marker's,
``trainer_state.json``'s ``global_step``, the ``global_step`` (or ``step``, ``iteration``,
``epoch``) of a ``torch.save`` dict such as Lightning's (its pickle is read without running
any of it: every class it names is a stand-in), else the number in the entry's name
(``checkpoint-40``, ``step=40``, ``ckpt-000040.pt``). A complete entry with no step anywhere
is not a checkpoint of its own (burst never makes one up): it is one of the program's
*outputs*, committed with the last checkpoint when the program ends (``trainer.save_model()``'s
files, ``training_args.bin``), as is every file no rule knows.

The directory is walked (``candidates``): a subdirectory that is no checkpoint itself is
looked into, so ``$BURST_CHECKPOINT_DIR/run1/checkpoint-40`` and Lightning's
``lightning_logs/version_0/checkpoints/*.ckpt`` are entries too (named by their path under
the directory).

Beyond the format, an entry counts only when its files have not changed between two scans and
did not change while they were read (``burst.program.snapshot``): a checkpoint still being
written, truncated, rewritten or deleted is never committed.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.checkpoint.marker import MARKER_SUFFIX

DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
HF_DIR_RE = re.compile(r"^checkpoint-(\d+)$")
ZIP_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".tar")
#: names that are never a checkpoint of their own (temporary files of a save in progress)
TEMP_RE = re.compile(r"(\.tmp|\.temp|\.partial|\.part|~)$|^\.|^tmp", re.IGNORECASE)
#: Lightning's "last" checkpoints: ModelCheckpoint._find_last_checkpoints takes a ``.ckpt``
#: whose stem matches ``^last(-(\d+))?`` (re.match: any stem that starts with "last")
LAST_RE = re.compile(r"^last.*\.ckpt$")
#: the keys of a torch.save dict that hold its step, in order of preference
STEP_KEYS = ("global_step", "step", "iteration", "iter", "epoch")
#: a pickle larger than this is not read for its step (a state dict's skeleton is far smaller)
MAX_PICKLE = 64 * 1024 * 1024
#: how deep the walk looks into subdirectories of the checkpoint directory
MAX_DEPTH = 8
_STEP_RE = re.compile(r"step[=_-]?(\d+)", re.IGNORECASE)
_LAST_INT_RE = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class Verdict:
    """What a rule says of an entry: its format, whether it is complete, its step (None:
    no step in it or its name), and why not when it is not."""

    format: str
    complete: bool
    step: int | None = None
    why: str = ""


def step_from_name(name: str) -> int | None:
    """``checkpoint-40``, ``epoch=1-step=40.ckpt``, ``step_40``, ``ckpt40.pt`` -> 40."""
    m = _STEP_RE.search(name) or _LAST_INT_RE.search(Path(name).stem or name)
    return int(m.group(1)) if m else None


def is_last_alias(name: str) -> bool:
    """A name Lightning's ``ckpt_path="last"`` opens (``last.ckpt``, ``last-v1.ckpt``)."""
    return bool(LAST_RE.match(name))


def read_marker(path: Path) -> int | None:
    """The step a marker holds; None when it is not (yet) a whole number."""
    try:
        text = path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if isinstance(doc, dict):
        doc = doc.get("step")
    if isinstance(doc, int) and not isinstance(doc, bool) and doc >= 0:
        return doc
    return None


def is_checkpoint_dir(entry: Path) -> bool:
    """A directory that is one checkpoint (judged as a whole), not one to look into."""
    if entry.with_name(entry.name + MARKER_SUFFIX).exists():
        return True
    if HF_DIR_RE.match(entry.name) or (entry / HF_STATE).exists():
        return True
    try:
        return any(
            p.suffix == ".distcp" or p.name.startswith(DCP_METADATA) for p in entry.iterdir()
        )
    except OSError:
        return False


def candidates(directory: Path, depth: int = MAX_DEPTH, *, markers: bool = False) -> Iterator[Path]:
    """Every entry under ``directory``, by name: a checkpoint directory (as a whole), a
    file, a symbolic link; plain subdirectories are looked into. The temporary names of a save
    in progress are left out, and markers unless ``markers``."""
    try:
        children = sorted(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return
    for child in children:
        name = child.name
        if name.endswith(MARKER_SUFFIX):
            if markers:
                yield child
            continue
        if TEMP_RE.search(name):
            continue
        if child.is_symlink():
            yield child
        elif child.is_dir():
            if is_checkpoint_dir(child):
                yield child
            elif depth > 0:
                yield from candidates(child, depth - 1, markers=markers)
        elif child.is_file():
            yield child


def judge(entry: Path) -> Verdict | None:
    """The rule for one entry of the checkpoint directory; None when it is not a checkpoint
    (a marker, a temporary file) or no rule knows it (one of the program's outputs)."""
    name = entry.name
    if name.endswith(MARKER_SUFFIX) or TEMP_RE.search(name):
        return None
    marker = entry.with_name(name + MARKER_SUFFIX)
    if marker.exists():
        step = read_marker(marker)
        if step is None:
            return Verdict("marker", False, None, f"{marker.name} holds no step yet")
        return Verdict("marker", entry.exists(), step, "" if entry.exists() else "deleted")
    if entry.is_dir():
        return _judge_dir(entry)
    if entry.is_file() and entry.suffix.lower() in ZIP_SUFFIXES:
        return judge_zip_file(entry)
    return None


def _judge_dir(entry: Path) -> Verdict | None:
    name = entry.name
    hf = HF_DIR_RE.match(name)
    if hf or (entry / HF_STATE).exists():
        state = entry / HF_STATE
        try:
            doc = json.loads(state.read_text())
        except FileNotFoundError:
            return Verdict("hf", False, None, f"no {HF_STATE} yet")
        except (OSError, ValueError, UnicodeDecodeError):
            return Verdict("hf", False, None, f"{HF_STATE} is not whole JSON yet")
        step = doc.get("global_step") if isinstance(doc, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            step = int(hf.group(1)) if hf else step_from_name(name)
        return Verdict("hf", True, step)
    if (entry / DCP_METADATA).exists():
        return Verdict("dcp", True, step_from_name(name))
    if any(p.suffix == ".distcp" or p.name.startswith(DCP_METADATA) for p in entry.iterdir()):
        return Verdict("dcp", False, None, f"no {DCP_METADATA} yet")
    return None


def judge_zip_file(path: Path) -> Verdict:
    """A torch.save / Lightning file on disk: whole once its zip end record is there (read
    again on the very bytes taken, ``judge_zip_bytes``); its step from its own contents."""
    try:
        with zipfile.ZipFile(path) as zf:
            return Verdict("torch-zip", True, _zip_step(zf, path.name))
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError) as exc:
        return Verdict("torch-zip", False, None, f"not a whole zip archive yet ({exc})")


def judge_zip_bytes(data: bytes, name: str) -> Verdict:
    """A torch.save / Lightning file is complete when its bytes are one whole zip archive:
    the end record is there and every member's CRC matches."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            bad = zf.testzip()
            step = _zip_step(zf, name) if bad is None else None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, KeyError) as exc:
        return Verdict("torch-zip", False, None, f"not a whole zip archive yet ({exc})")
    if bad is not None:
        return Verdict("torch-zip", False, None, f"member {bad} fails its CRC")
    return Verdict("torch-zip", True, step)


def _zip_step(zf: zipfile.ZipFile, name: str) -> int | None:
    """The step a torch.save archive holds (its ``data.pkl``), else the one in its name."""
    pkl = next(
        (i for i in zf.infolist() if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")),
        None,
    )
    if pkl is not None and pkl.file_size <= MAX_PICKLE:
        step = pickle_step(zf.read(pkl))
        if step is not None:
            return step
    return step_from_name(name)


class _StandIn:
    """What every class a checkpoint's pickle names becomes: nothing of it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass


class _Dict(dict[Any, Any]):
    """An ``OrderedDict`` (a state dict keeps attributes such as ``_metadata``: dropped)."""

    def __setstate__(self, state: Any) -> None:
        pass


class _Skeleton(pickle.Unpickler):
    """Reads a torch.save pickle's plain structure (dicts, lists, numbers, strings): each
    class is a stand-in and each tensor's storage None, so no code of the file runs."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return _Dict
        return _StandIn

    def persistent_load(self, pid: Any) -> None:
        return None


def pickle_step(data: bytes) -> int | None:
    """The step of a torch.save'd dict (``global_step``, ``step``, ``iteration``, ``iter``,
    ``epoch``: the first that is a whole number), None when it holds none."""
    try:
        doc = _Skeleton(io.BytesIO(data), encoding="utf-8").load()
    except Exception:  # any pickle at all: a bad one simply has no step
        return None
    if not isinstance(doc, dict):
        return None
    for key in STEP_KEYS:
        value = doc.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def link_target(link: Path, directory: Path) -> str | None:
    """The path under ``directory`` a symbolic link in it points at (Lightning's
    ``save_last="link"``), relative to the link; None when it leads outside."""
    try:
        target = os.readlink(link)
    except OSError:
        return None
    resolved = (link.parent / target).resolve()
    try:
        resolved.relative_to(directory.resolve())
    except ValueError:
        return None
    return None if os.path.isabs(target) else target
