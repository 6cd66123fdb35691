"""What every command shares: reading its files, loading them, and writing to a terminal.

Every command reads its files through `read`: a recipe, a script, a state or capabilities
(docs/cli.md, "Files"). `-` reads standard input, once per command. At most the kind's
limit plus one byte is read, so a huge file (or `/dev/zero`) is refused at once. A UTF-8
byte order mark at the start is dropped, as RFC 8259 section 8.1 allows (Windows tools
write one); a UTF-16 file is refused with a message that says so.

The loaders turn the bytes into what the core takes (`load_graph`, `load_state`,
`load_capabilities`, `load_script`). Each refusal is a message on stderr and an exit code;
what a command prints on stdout is only its result.
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

import msgspec
import typer
from rich.console import Console

from cli.published import schema_errors
from generated.capabilities_v1_1 import Capabilities
from generated.simulation_script_v1_0 import SimulationScript
from generated.state_v1_5 import SfcState
from host.jobs import RECIPE_LIMIT
from sfc import codec
from sfc.builder import (
    RECIPE_V1_2_0,
    BuildError,
    BuildResult,
    build,
    decode_error,
)
from sfc.evolution import STATE_FORMAT, misfit
from sfc.graph import Graph
from sfc.interpreter import interpreter_for, known_dataschemas
from sfc.migrate import READERS, MigrationError, migrate, state_format
from sfc.simulation import ScriptError, json_key_path
from sfc.simulation import load_script as parse_script

UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_SEGMENT = re.compile(r"\.(?P<field>[^.\[]+)|\[(?P<index>[0-9]+)\]|\[\.\.\.\]")
_ANY_KEY = "[...]"
"""What msgspec writes for a key of an object whose keys are data (e.g. the action names)."""

STDIN: Final = "-"
"""The file argument that reads standard input."""
MIB: Final = 1024 * 1024
LIMITS: Final[dict[str, int]] = {
    "recipe": RECIPE_LIMIT,
    "state": 16 * MIB,
    "script": 16 * MIB,
    "capabilities": 1 * MIB,
}
"""The most bytes read of each kind of file; a larger one is refused unread. A recipe's is
the host's (4 MiB, below the core's 16 MiB): a recipe that validates and dry-runs is one the
host stores, not one `sfc job submit` refuses for its size."""
_WHY: Final = {"recipe": " (the host stores none larger)"}
TOO_DEEP: Final = "the document is nested too deeply"


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"sfc: {message}", err=True)
    raise typer.Exit(code)


def _limit_text(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit:,} bytes"


class Unreadable(Exception):
    """A file that cannot be read; the message says why, naming the file."""


def read_bytes(path: Path | str, what: str) -> bytes:
    """The bytes of a file (`-`: standard input), without a UTF-8 byte order mark.

    Raises Unreadable when the file cannot be read, is larger than the limit of its kind,
    or is UTF-16. A command lets at most one argument be `-` (`one_stdin`).
    """
    limit = LIMITS[what]
    name = str(path)
    try:
        if name == STDIN:
            data = sys.stdin.buffer.read(limit + 1)
            name = "(standard input)"
        else:
            with Path(path).open("rb") as f:
                data = f.read(limit + 1)
    except OSError as e:
        raise Unreadable(f"cannot read the {what} {path}: {e.strerror or e}") from None
    if len(data) > limit:
        raise Unreadable(
            f"cannot read the {what} {name}: it is larger than {_limit_text(limit)}, "
            f"the limit for a {what}{_WHY.get(what, '')}"
        )
    if data.startswith(_UTF16_BOMS):
        raise Unreadable(
            f"cannot read the {what} {name}: it is UTF-16 (byte order mark); save it as UTF-8"
        )
    return data.removeprefix(UTF8_BOM)


def one_stdin(*paths: Path | str | None) -> None:
    """Exit 2 when more than one file argument is `-`: standard input can be read once."""
    if sum(1 for p in paths if p is not None and str(p) == STDIN) > 1:
        fail("only one file argument can be - (standard input can be read once)", 2)


def read(path: Path | str, what: str) -> bytes:
    """`read_bytes`, or exit 2 with its message."""
    try:
        return read_bytes(path, what)
    except Unreadable as e:
        fail(str(e), 2)


def terminal() -> bool:
    return sys.stdout.isatty()


def visible(text: str) -> str:
    """`text` with every character that does not print as itself (control and format
    characters: an escape sequence, a carriage return, a right-to-left override) written as
    its escape, the line breaks kept. What equipment or a person wrote (an error, a comment)
    then cannot recolour, overwrite or reorder an operator's terminal."""
    if text.isprintable() or all(c.isprintable() or c == "\n" for c in text):
        return text
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in text)


def console() -> Console:
    return Console(highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- where it is wrong


def syntax_error(data: bytes) -> str | None:
    """Why the bytes are not one JSON document (empty, malformed, too deep), or None."""
    if not data.strip():
        return "the file is empty"
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        return decode_error(e)[1]
    except RecursionError:
        return TOO_DEEP
    return None


def decode_failure(
    data: bytes, decoder: msgspec.json.Decoder[Any], error: msgspec.DecodeError, what: str
) -> tuple[str, str]:
    """The JSON path and a readable message of a document `decoder` refused with `error`.

    A document that is no JSON at all (empty, cut short) says so at `$`, though the decoder
    may have stopped earlier at an unknown field. msgspec names the key of an object whose
    keys are data as `[...]`; the path given here names it (`$.actions.tighten.attempt`),
    found by decoding the entries one at a time.
    """
    syntax = syntax_error(data)
    if syntax is not None:
        return "$", syntax
    path, message = decode_error(error, what=what)
    if _ANY_KEY not in path or not isinstance(error, msgspec.ValidationError):
        return path, message
    return _named(msgspec.json.decode(data), decoder, path), message


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


# --------------------------------------------------------------------------- the loaders


def format_error(error: BuildError) -> str:
    """The text form of a build error: `CODE path: message`."""
    return f"{error.code} {error.path}: {error.message}"


def json_path(path: str) -> str:
    """A build error's path as the JSON output has it: without the leading `$.`."""
    return path.removeprefix("$").removeprefix(".")


def check_dataschema(dataschema: str) -> None:
    if interpreter_for(dataschema) is None:
        fail(f"unknown dataschema {dataschema}; known: {', '.join(known_dataschemas())}", 2)


def build_recipe(
    data: bytes, capabilities: Capabilities | None, dataschema: str = RECIPE_V1_2_0
) -> BuildResult:
    """`build`, with every shape error when the decoder stopped at the first (SFC000).

    msgspec reports one error; after it refused the document (never before, so a valid
    recipe is not slowed down), the published schema reports them all, each with its path.
    """
    result = build(data, capabilities, dataschema=dataschema)
    errors = every_shape_error(data, result.errors, dataschema)
    return result if errors is result.errors else BuildResult(None, tuple(errors))


def every_shape_error(
    data: bytes, errors: Sequence[BuildError], dataschema: str = RECIPE_V1_2_0
) -> Sequence[BuildError]:
    """`errors` of a build, with every shape error when the decoder stopped at the first
    (SFC000): the same object when there is nothing to add."""
    if len(errors) != 1 or errors[0].code not in ("SFC000", "SFC010"):
        return errors
    found = schema_errors(data, dataschema)
    if len(found) <= 1:
        return errors
    first = errors[0]
    rest = [
        # A qualifier outside the eleven is SFC010 however it is found (docs/errors.md).
        BuildError("SFC010" if path.endswith(".Qualifier") else "SFC000", path, message)
        for path, message in found
        if path != first.path
    ]
    return [first, *rest]


def load_capabilities(path: Path | None) -> Capabilities | None:
    """The station's capabilities, or exit 2 naming the file and the path of the problem."""
    if path is None:
        return None
    data = read(path, "capabilities")
    try:
        return codec.capabilities_decoder.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, codec.capabilities_decoder, e, "capabilities")
        fail(f"the capabilities {path} are not valid: {where}: {message}", 2)
    except RecursionError:
        fail(f"the capabilities {path} are not valid: $: {TOO_DEEP}", 2)


def load_graph(
    path: Path,
    invalid_exit: int,
    capabilities: Capabilities | None = None,
    dataschema: str = RECIPE_V1_2_0,
) -> Graph:
    """Build the recipe; on build errors print them to stderr, as `sfc validate` words them,
    and exit with `invalid_exit`. Standard output stays the command's own."""
    check_dataschema(dataschema)
    result = build_recipe(read(path, "recipe"), capabilities, dataschema)
    if result.graph is None:
        for error in result.errors:
            typer.echo(format_error(error), err=True)
        fail(f"{path} is not a valid recipe", invalid_exit)
    return result.graph


def load_state(path: Path, graph: Graph) -> SfcState:
    """A job's state, refused (exit 1) when it is not one or does not fit the recipe.

    A state of an older format is migrated to the current one, and stderr says so. A state
    whose steps, actions or divergences the recipe lacks is refused with the reason
    `evolve` would reject it for.
    """
    data = read(path, "state")
    syntax = syntax_error(data)
    if syntax is not None:
        fail(f"state {path}: not a job state: $: {syntax}", 1)
    fmt = state_format(data)
    reader = READERS.get(fmt) if fmt is not None else None
    if reader is None:
        said = "no format" if fmt is None else f"format {fmt!r}"
        fail(
            f"state {path}: not a job state: it has {said}; "
            f"this engine reads state formats {', '.join(READERS)}",
            1,
        )
    try:
        reader.decode(data)
    except msgspec.DecodeError as e:
        where, message = decode_failure(data, reader, e, "job state")
        fail(f"state {path}: not a job state (format {fmt}): {where}: {message}", 1)
    except RecursionError:
        fail(f"state {path}: not a job state (format {fmt}): $: {TOO_DEEP}", 1)
    try:
        state = migrate(data, graph)
    except MigrationError as e:
        fail(f"state {path}: {e}", 1)
    if fmt != STATE_FORMAT:
        typer.echo(f"sfc: state {path}: format {fmt} migrated to {STATE_FORMAT}", err=True)
    if state.recipe_hash != graph.recipe_hash:
        fail(
            f"state {path}: the job runs recipe {state.recipe_hash[:12]}, "
            f"not this one ({graph.recipe_hash[:12]})",
            1,
        )
    unfit = misfit(graph, state)
    if unfit is not None:
        fail(f"state {path}: the state does not fit the recipe: {unfit}", 1)
    return state


def load_script(path: Path, graph: Graph) -> SimulationScript:
    """A simulation script checked against the recipe, or exit 2 naming the path of the problem."""
    data = read(path, "script")
    try:
        return parse_script(data, graph)
    except ScriptError as e:
        fail(f"script {path}: {e.path}: {e.message}", 2)
