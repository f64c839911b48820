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

Beyond the format, an entry counts only when its files have not changed between two scans and
did not change while they were read (``burst.program.snapshot``): a checkpoint still being
written, truncated, rewritten or deleted is never committed.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

MARKER_SUFFIX = ".burst-commit"
DCP_METADATA = ".metadata"
HF_STATE = "trainer_state.json"
HF_DIR_RE = re.compile(r"^checkpoint-(\d+)$")
ZIP_SUFFIXES = (".ckpt", ".pt", ".pth", ".bin", ".tar")
#: names that are never a checkpoint of their own (temporary files of a save in progress)
TEMP_RE = re.compile(r"(\.tmp|\.temp|\.partial|\.part|~)$|^\.|^tmp", re.IGNORECASE)
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


def judge(entry: Path) -> Verdict | None:
    """The rule for one entry of the checkpoint directory; None when it is not a checkpoint
    (a marker, a temporary file) or no rule knows it."""
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
        # complete or not is decided on the very bytes read (``judge_zip_bytes``)
        return Verdict("torch-zip", True, step_from_name(name), "bytes to check")
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
        if not isinstance(step, int):
            step = int(hf.group(1)) if hf else step_from_name(name)
        return Verdict("hf", True, step)
    if (entry / DCP_METADATA).exists():
        return Verdict("dcp", True, step_from_name(name))
    if any(p.suffix == ".distcp" or p.name.startswith(DCP_METADATA) for p in entry.iterdir()):
        return Verdict("dcp", False, None, f"no {DCP_METADATA} yet")
    return None


def judge_zip_bytes(data: bytes, name: str) -> Verdict:
    """A torch.save / Lightning file is complete when its bytes are one whole zip archive:
    the end record is there and every member's CRC matches."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return Verdict("torch-zip", False, None, f"not a whole zip archive yet ({exc})")
    if bad is not None:
        return Verdict("torch-zip", False, None, f"member {bad} fails its CRC")
    return Verdict("torch-zip", True, step_from_name(name))
