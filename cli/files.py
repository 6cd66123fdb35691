"""Reading the files the commands are given, and saying where a document is wrong.

Every command reads its files through `read`: a recipe, a script, a state or capabilities.
A UTF-8 byte order mark at the start is dropped, as RFC 8259 section 8.1 allows (Windows
tools write one); a UTF-16 file is refused with a message that says so.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, NoReturn

import msgspec
import typer

from sfc.builder import decode_error
from sfc.simulation import json_key_path

UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SEGMENT = re.compile(r"\.(?P<field>[^.\[]+)|\[(?P<index>[0-9]+)\]|\[\.\.\.\]")
_ANY_KEY = "[...]"
"""What msgspec writes for a key of an object whose keys are data (e.g. the action names)."""


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"sfc: {message}", err=True)
    raise typer.Exit(code)


def read(path: Path | str, what: str) -> bytes:
    """The bytes of a file, without a UTF-8 byte order mark; exit 2 when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        fail(f"cannot read the {what} {path}: {e.strerror or e}", 2)
    if data.startswith(_UTF16_BOMS):
        fail(f"cannot read the {what} {path}: it is UTF-16 (byte order mark); save it as UTF-8", 2)
    return data.removeprefix(UTF8_BOM)


def decode_failure(
    data: bytes, decoder: msgspec.json.Decoder[Any], error: msgspec.DecodeError, what: str
) -> tuple[str, str]:
    """The JSON path and a readable message of a document `decoder` refused with `error`.

    msgspec names the key of an object whose keys are data as `[...]`; the path given here
    names it (`$.actions.tighten.attempt`), found by decoding the entries one at a time.
    """
    path, message = decode_error(error, what=what)
    if _ANY_KEY not in path or not isinstance(error, msgspec.ValidationError):
        return path, message
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return path, message
    return _named(doc, decoder, path), message


Segment = str | int | None
"""A step of a msgspec path: a field, an index, or None for `[...]`."""


def _segments(path: str) -> list[Segment] | None:
    """`$.a[2][...].b` as ["a", 2, None, "b"]; None for a path this cannot read."""
    out: list[Segment] = []
    at = 1
    for m in _SEGMENT.finditer(path, 1):
        if m.start() != at:
            return None
        at = m.end()
        if m["field"] is not None:
            out.append(m["field"])
        elif m["index"] is not None:
            out.append(int(m["index"]))
        else:
            out.append(None)
    return out if path.startswith("$") and at == len(path) else None


def _at(doc: Any, segments: list[Segment]) -> Any:
    """The value the segments lead to, or None when it is not there."""
    node = doc
    for seg in segments:
        if isinstance(seg, str) and isinstance(node, dict):
            node = node.get(seg)
        elif isinstance(seg, int) and isinstance(node, list) and seg < len(node):
            node = node[seg]
        else:
            return None
    return node


def _format(segments: list[Segment]) -> str:
    path = "$"
    for seg in segments:
        if seg is None:
            path += _ANY_KEY
        elif isinstance(seg, int):
            path += f"[{seg}]"
        else:
            path = json_key_path(path, seg)
    return path


def _named(doc: Any, decoder: msgspec.json.Decoder[Any], path: str) -> str:
    """`path` with each `[...]` replaced by the key of the entry the decoder refuses."""
    segments = _segments(path)
    if segments is None:
        return path
    while None in segments:
        i = segments.index(None)
        entries = _at(doc, segments[:i])
        if not isinstance(entries, dict):
            break
        for key, value in entries.items():
            trial = copy.deepcopy(doc)
            only = _at(trial, segments[:i])
            only.clear()
            only[key] = value
            try:
                decoder.decode(msgspec.json.encode(trial))
            except msgspec.ValidationError:
                segments[i] = key
                doc = trial
                break
        else:
            break
    return _format(segments)
