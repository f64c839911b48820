"""Bounded loading of every input file burst reads (specs, policy files, catalogs, records).

One mechanism, so a hostile or broken file meets the same bounds wherever it enters:

* the file type is checked before any blocking read: a FIFO, a device, a socket or a
  directory is refused (opened with ``O_NONBLOCK`` and checked with ``fstat``, so even a FIFO
  swapped in at the last moment cannot block us);
* at most ``max_bytes`` are read (default 4 MiB; a spec is a few KB);
* text must be UTF-8;
* YAML is parsed by ``BoundedLoader``: an alias expansion bound (a "billion laughs" document
  is refused before anything walks it), duplicated mapping keys refused on the second key's
  line, impossible dates (``2026-02-30``), non-finite numbers (``.inf``, ``.nan``, ``1e999``)
  and integers beyond 64 bits refused, each with its line;
* ``short()`` quotes at most a short prefix of a value in an error message.

Every problem is a ``BadInputError`` (exit 2) whose text is ``FILE:LINE: problem``.

A document a user hands burst (a file, or an object in a store they write: a run's
``tiers/index.json``) is parsed and validated against its model by one helper,
``parse_model`` / ``load_model``: not JSON (or YAML), the wrong shape, a wrong or missing
field are each one line naming the document, where it came from and the field, never a
pydantic dump or a ``JSONDecodeError``.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import yaml

if TYPE_CHECKING:
    from pydantic import BaseModel

from burst.errors import BadInputError

M = TypeVar("M", bound="BaseModel")

MAX_BYTES = 4 << 20  # 4 MiB
MAX_NODES = 100_000  # YAML nodes after alias expansion
MAX_INT = 2**63 - 1
QUOTE_CHARS = 60


def short(value: Any, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)``, cut to ``limit`` characters (a 20 MB value is not echoed back)."""
    size = _size(value)
    if isinstance(value, str | bytes) and len(value) > limit * 4:
        value = value[: limit * 4]  # repr of a huge string is not even built
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({size})"


def clip(text: str, limit: int = 160) -> str:
    """``text`` on one line, cut to ``limit`` characters (for messages quoting other tools)."""
    flat = (
        " ".join(str(text).split())
        if len(text) < limit * 8
        else " ".join(text[: limit * 8].split())
    )
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _size(value: Any) -> str:
    try:
        return f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
    except TypeError:  # pragma: no cover
        return type(value).__name__


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def read_bytes(path: str | Path, *, what: str = "file", max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; BadInputError otherwise."""
    p = str(path)
    try:
        kind = _kind(os.stat(p).st_mode)
    except FileNotFoundError:
        raise BadInputError(
            f"no such {what} file" if what != "file" else "no such file", where=p
        ) from None
    except OSError as exc:
        raise BadInputError(f"cannot read the {what} ({_reason(exc)})", where=p) from None
    if kind is not None:
        raise BadInputError(f"the {what} is {kind}, not a regular file", where=p)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadInputError(f"cannot read the {what} ({_reason(exc)})", where=p) from None
    try:
        st = os.fstat(fd)
        kind = _kind(st.st_mode)
        if kind is not None:  # swapped after the stat above
            raise BadInputError(f"the {what} is {kind}, not a regular file", where=p)
        if st.st_size > max_bytes:
            raise BadInputError(
                f"the {what} is {st.st_size} bytes, more than the {max_bytes}-byte limit", where=p
            )
        chunks: list[bytes] = []
        total = 0
        while total <= max_bytes:
            block = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not block:
                break
            chunks.append(block)
            total += len(block)
        if total > max_bytes:  # grew while we read it
            raise BadInputError(f"the {what} is more than the {max_bytes}-byte limit", where=p)
        return b"".join(chunks)
    except OSError as exc:
        raise BadInputError(f"cannot read the {what} ({_reason(exc)})", where=p) from None
    finally:
        os.close(fd)


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
    return f"{name}: {exc.strerror}" if exc.strerror else name


def read_text(path: str | Path, *, what: str = "file", max_bytes: int = MAX_BYTES) -> str:
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8-sig")  # a leading byte-order mark is not part of the text
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise BadInputError(f"the {what} is not UTF-8 text", where=f"{path}:{line}") from None


# --------------------------------------------------------------------------- YAML


class InputYAMLError(yaml.YAMLError):
    """A bound or rule of ``BoundedLoader`` broken at a line (1-based)."""

    def __init__(self, line: int | None, problem: str, *, locate: bool = True) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem
        self.locate = locate  # worth finding the field at that line (not for an alias bomb)


def _line(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


class _BoundedConstructor(yaml.constructor.SafeConstructor):
    """The refusals of the module docstring, made as the document is constructed (shared by
    the pure-Python loader and the one on libyaml's parser)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # the node's own keys (a key overriding one merged in by ``<<`` is allowed)
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if (
                    not isinstance(key_node, yaml.ScalarNode)
                    or key_node.tag == "tag:yaml.org,2002:merge"
                ):
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue
                if first is not None:
                    raise InputYAMLError(
                        _line(key_node),
                        f"duplicated key {short(key)} (first on line {first}; "
                        "the second would silently win)",
                    )
                seen[key] = _line(key_node)
        return super().construct_mapping(node, deep=deep)  # type: ignore[arg-type]

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except (ValueError, OverflowError):
            raise InputYAMLError(
                _line(node), f"{short(node.value)} is not a valid date or time"
            ) from None

    def construct_yaml_float(self, node: yaml.ScalarNode) -> float:
        _refuse_ambiguous_number(node)
        value = float(super().construct_yaml_float(node))
        if not math.isfinite(value):
            raise InputYAMLError(
                _line(node), f"{short(node.value)} is not a finite number (inf and nan refused)"
            )
        return value

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        text = str(node.value)
        if len(text) > 40:
            raise InputYAMLError(_line(node), f"{short(text)}: integer too large")
        _refuse_ambiguous_number(node)
        value = int(super().construct_yaml_int(node))
        if abs(value) > MAX_INT:
            raise InputYAMLError(_line(node), f"{short(text)}: integer beyond 64 bits")
        return value


class BoundedLoader(_BoundedConstructor, yaml.SafeLoader):
    """yaml.SafeLoader with the bounds and refusals described in the module docstring."""

    def compose_document(self) -> yaml.Node | None:
        node: yaml.Node | None = super().compose_document()
        _check_expansion(node, MAX_NODES)
        return node


_CParser: Any = getattr(yaml.cyaml, "CParser", None) if yaml.__with_libyaml__ else None


ShippedLoader: type[Any]  # the loader for burst's own files
if _CParser is not None:

    class _ShippedLoader(_CParser, _BoundedConstructor, yaml.resolver.Resolver):
        """``BoundedLoader``'s rules on libyaml's parser (about 10x faster: the policies were
        0.2 CPU-s of every preflight in pure Python), for burst's own shipped files only: its
        composer recurses in C, and a hostile file nested deep enough could overflow the
        stack, so a file a user gives always goes through ``BoundedLoader``."""

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _BoundedConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

        def get_single_node(self) -> yaml.Node | None:
            node: yaml.Node | None = _CParser.get_single_node(self)
            _check_expansion(node, MAX_NODES)
            return node

    ShippedLoader = _ShippedLoader
else:  # pragma: no cover - PyYAML without libyaml
    ShippedLoader = BoundedLoader


_SEXAGESIMAL = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
_OLD_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")


def _refuse_ambiguous_number(node: yaml.ScalarNode) -> None:
    """Refuse the YAML 1.1 number forms that YAML 1.2 (and most readers) take otherwise.

    ``1:30`` is the base-60 number 90 to YAML 1.1 (PyYAML) and the text "1:30" to YAML 1.2;
    ``010`` is octal 8 to YAML 1.1 and decimal 10 to YAML 1.2 (an account id or a mode with a
    leading zero silently changes). Neither is guessed: the value must be quoted or rewritten.
    """
    text = str(node.value)
    if node.style:  # quoted (plain is None here, "" from libyaml): never made a number
        return
    if _SEXAGESIMAL.match(text):
        raise InputYAMLError(
            _line(node),
            f"{short(text)} is a base-60 number to YAML 1.1 and text to YAML 1.2: "
            "quote it if it is text or a time, or write the plain number",
        )
    if _OLD_OCTAL.match(text):
        raise InputYAMLError(
            _line(node),
            f"{short(text)} has a leading zero: YAML 1.1 reads it as octal, YAML 1.2 as "
            "decimal; quote it if it is text (an id), or write it without the zero",
        )


# YAML 1.2 floats with an exponent and no sign or dot (``1e16``, ``1.0e5``): YAML 1.1 reads
# them as strings, which then slip through as text; here they are numbers (and checked).
# (one loader, not two, where PyYAML has no libyaml: its resolvers are added once)
_LOADERS: tuple[type[Any], ...] = tuple(dict.fromkeys((BoundedLoader, ShippedLoader)))
for _loader in _LOADERS:
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    for _tag, _construct in (
        ("timestamp", _BoundedConstructor.construct_yaml_timestamp),
        ("float", _BoundedConstructor.construct_yaml_float),
        ("int", _BoundedConstructor.construct_yaml_int),
    ):
        _loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _construct)


def _check_expansion(root: yaml.Node | None, limit: int) -> None:
    """Refuse a node graph that expands (aliases followed) to more than ``limit`` nodes."""
    if root is None:
        return
    memo: dict[int, int] = {}
    # iterative post-order: aliases share nodes, so memoised counts keep this linear
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        ident = id(node)
        if done:
            on_path.discard(ident)
            kids = _children(node)
            total = 1 + sum(memo[id(k)] for k in kids)
            memo[ident] = total
            if total > limit:
                raise InputYAMLError(
                    _line(node),
                    f"the document expands to more than {limit} YAML nodes "
                    "(counting what anchors and aliases repeat)",
                    locate=False,
                )
            continue
        if ident in memo:
            continue
        if ident in on_path:  # a recursive alias
            raise InputYAMLError(_line(node), "a recursive YAML alias", locate=False)
        on_path.add(ident)
        stack.append((node, True))
        for kid in _children(node):
            if id(kid) not in memo:
                stack.append((kid, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def yaml_problem(exc: yaml.YAMLError) -> tuple[str, str]:
    """``(":LINE" or "", problem)`` for any YAML error (syntax or a bound)."""
    if isinstance(exc, InputYAMLError):
        return (f":{exc.line}" if exc.line else ""), exc.problem
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or (str(exc).splitlines() or ["parse error"])[0]
    return line, short(problem, 200).strip("'\"") if len(problem) > 200 else problem


def field_at(text: str, line: int) -> str | None:
    """The dotted path of the deepest field on ``line`` of a YAML text (for messages)."""
    from burst.yamllines import line_index

    paths = [p for p, n in line_index(text).items() if n == line and p]
    if not paths:
        return None
    return ".".join(str(x) for x in max(paths, key=len))


def parse_yaml(text: str, source: str, *, what: str = "file", shipped: bool = False) -> Any:
    """Parse YAML text with ``BoundedLoader`` (``shipped``: a file of burst's own, with
    ``ShippedLoader``); BadInputError ``source:LINE: ...`` on failure."""
    if len(text) > MAX_BYTES:
        raise BadInputError(f"the {what} is more than the {MAX_BYTES}-byte limit", where=source)
    try:
        return yaml.load(text, Loader=ShippedLoader if shipped else BoundedLoader)
    except yaml.YAMLError as exc:
        line, problem = yaml_problem(exc)
        prefix = "not valid YAML: "
        if isinstance(exc, InputYAMLError):
            prefix = ""
            if exc.locate and exc.line:
                field = field_at(text, exc.line)
                prefix = f"{field}: " if field else ""
        raise BadInputError(f"{prefix}{problem}", where=f"{source}{line}") from None
    except RecursionError:
        raise BadInputError("YAML nested too deep", where=source) from None


def load_yaml_file(
    path: str | Path, *, what: str = "file", max_bytes: int = MAX_BYTES, shipped: bool = False
) -> Any:
    text = read_text(path, what=what, max_bytes=max_bytes)
    return parse_yaml(text, str(path), what=what, shipped=shipped)


# --------------------------------------------------------------------------- JSON


def parse_json(text: str, source: str, *, what: str = "document") -> Any:
    """Strict JSON: no NaN/Infinity, no duplicated keys, integers within 64 bits;
    BadInputError ``source:LINE: ...`` naming ``what``."""
    import json

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a finite number")

    def integer(digits: str) -> int:
        value = int(digits) if len(digits) <= 40 else MAX_INT + 1
        if abs(value) > MAX_INT:
            raise ValueError(f"{clip(digits, 30)}: integer beyond 64 bits")
        return value

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise ValueError(f"duplicated key {short(key)}")
            out[key] = value
        return out

    try:
        return json.loads(text, parse_constant=constant, parse_int=integer, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        raise BadInputError(
            f"the {what} is not valid JSON: {exc.msg}", where=f"{source}:{exc.lineno}"
        ) from None
    except ValueError as exc:
        raise BadInputError(f"the {what}: {clip(str(exc))}", where=source) from None
    except RecursionError:
        raise BadInputError(f"the {what} is nested too deep", where=source) from None


# --------------------------------------------------------------------------- documents


def parse_model(
    model: type[M],
    text: str | bytes,
    source: str,
    *,
    what: str,
    fmt: Literal["json", "yaml"] = "json",
) -> M:
    """``text`` (from ``source``) parsed as strict JSON or bounded YAML and validated as
    ``model``. Every problem is one ``BadInputError`` line naming ``what``, ``source`` and the
    first field that is wrong (with a count of the others): the document a user gave burst,
    never a pydantic dump or a parser's traceback."""
    from pydantic import ValidationError

    from burst.field_problems import describe

    if isinstance(text, bytes):
        raw = text
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise BadInputError(f"the {what} is not UTF-8 text", where=f"{source}:{line}") from None
    data = (
        parse_json(text, source, what=what)
        if fmt == "json"
        else parse_yaml(text, source, what=what)
    )
    kind = "JSON object" if fmt == "json" else "YAML mapping"
    if not isinstance(data, dict):
        raise BadInputError(
            f"the {what} must be a {kind} of fields (got {_json_kind(data)})", where=source
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = [describe(err) for err in exc.errors()]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise BadInputError(f"the {what}: {clip(problems[0], 300)}{more}", where=source) from None
    except RecursionError:
        raise BadInputError(f"the {what} is nested too deep", where=source) from None


def load_model(
    model: type[M],
    path: str | Path,
    *,
    what: str,
    fmt: Literal["json", "yaml"] = "json",
    max_bytes: int = MAX_BYTES,
) -> M:
    """``parse_model`` of a file, read with the bounds of ``read_text``."""
    return parse_model(
        model, read_text(path, what=what, max_bytes=max_bytes), str(path), what=what, fmt=fmt
    )


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
