"""The published wire schemas of schemas/: found by `$id`, checked against, and bundled.

Every schema's `$id` is where it is published (docs/formats.md, "Schemas"): the recipe
formats under their dataschema URIs, every other schema as
`https://aschamberger.github.io/schemas/microdcs/sfc/<name>.json`. A relative `$ref` such as
`"event_v1_0.json"` resolves by plain URI resolution against the referring schema's `$id`
to the `$id` of the schema it names, so a `referencing.Registry` of the schemas by `$id`
alone resolves every reference, with no retrieve hook.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from functools import cache
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urldefrag, urljoin

from sfc.builder import qualifier_hint

if TYPE_CHECKING:  # jsonschema is imported when a document is checked, not at every start
    from jsonschema.exceptions import ValidationError
    from referencing import Registry

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"

_TYPES = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


def names() -> list[str]:
    """The schema names (file stems), sorted."""
    return sorted(p.stem for p in SCHEMAS.glob("*.json"))


@cache
def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((SCHEMAS / f"{name}.json").read_bytes())
    return doc


@cache
def registry() -> Registry[Any]:
    """Every published schema under its `$id`; no retrieve hook."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    resources = [
        (load(n)["$id"], Resource.from_contents(load(n), default_specification=DRAFT202012))
        for n in names()
    ]
    return Registry().with_resources(resources)


def by_id(uri: str) -> str | None:
    """The name of the schema whose `$id` is `uri`, or None."""
    return next((n for n in names() if load(n)["$id"] == uri), None)


def _path(parts: Any) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "a whole number"
    for py, word in ((str, "a string"), (float, "a number"), (dict, "an object"), (list, "a list")):
        if isinstance(value, py):
            return word
    return "null"


def _describe(error: ValidationError, what: str) -> list[tuple[str, str]]:
    """(path, message) of one schema error, worded as the decoder words its own."""
    path = _path(error.absolute_path)
    # jsonschema types these fields "or unset" (an error made by hand may lack them); the
    # validator always sets them, so the checks below narrow the types and always hold.
    instance, wanted, schema = error.instance, error.validator_value, error.schema
    if error.validator == "required" and isinstance(wanted, list) and isinstance(instance, dict):
        missing = [f for f in wanted if f not in instance]
        return [(f"{path}.{f}", f"the required field {f} is missing") for f in missing]
    if (
        error.validator in ("additionalProperties", "unevaluatedProperties")
        and isinstance(schema, Mapping)
        and isinstance(instance, dict)
    ):
        known = set(schema.get("properties", {}))
        extra = [f for f in instance if f not in known]
        return [(f"{path}.{f}", f"{f} is not a field of the {what}") for f in extra]
    if error.validator == "type":
        want = (
            " or ".join(_TYPES.get(str(w), str(w)) for w in wanted)
            if isinstance(wanted, list)
            else _TYPES.get(str(wanted), str(wanted))
        )
        return [(path, f"expected {want}, got {_kind(instance)}")]
    if error.validator in ("enum", "const"):
        hint = qualifier_hint(instance) if path.endswith(".Qualifier") else ""
        return [(path, f"{json.dumps(instance)} is not an allowed value{hint}")]
    if error.validator in _BOUNDS and isinstance(schema, Mapping):
        bounds = [f"{word} {schema[key]:g}" for key, word in _BOUNDS.items() if key in schema]
        week = " (one week)" if schema.get("maximum") == 604_800 else ""
        field = path.rsplit(".", 1)[-1]
        return [(path, f"{field} must be a number {' and '.join(bounds)}{week}")]
    return [(path, error.message)]


_BOUNDS = {
    "exclusiveMinimum": "above",
    "minimum": "at least",
    "exclusiveMaximum": "below",
    "maximum": "at most",
}
"""Range keywords, in the order a message names them (DurationSeconds, MinSeconds)."""


def _order(part: str | int) -> tuple[int, int, str]:
    """Indexes in numeric order (`[3]` before `[10]`), fields by name."""
    return (1, part, "") if isinstance(part, int) else (0, 0, part)


MAX_ERRORS = 100
"""Most schema errors reported for one document; a last line says when there are more."""


def validation_errors(document: Any, name: str, what: str) -> list[tuple[str, str]]:
    """The errors of `document` against schema `name`, as (JSON path, message), by path.

    At most MAX_ERRORS, then one more saying that the rest are not shown.
    """
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(load(name), registry=registry())
    errors = list(islice(validator.iter_errors(document), MAX_ERRORS + 1))
    found: list[tuple[str, str]] = []
    for error in sorted(errors[:MAX_ERRORS], key=lambda e: [_order(p) for p in e.path]):
        for item in _describe(error, what):
            if item not in found:
                found.append(item)
    if len(errors) > MAX_ERRORS:
        found.append(("$", f"more shape errors than these {MAX_ERRORS}; correct them first"))
    return found


def schema_errors(data: bytes, dataschema: str) -> list[tuple[str, str]]:
    """Every schema error of a recipe document; [] when it is no JSON or no schema is known."""
    name = by_id(dataschema)
    if name is None:
        return []
    try:
        document = json.loads(data)
    except (ValueError, RecursionError):
        return []
    version = dataschema.rstrip("/").rsplit("/", 1)[-1]
    try:
        return validation_errors(document, name, f"recipe format {version}")
    except RecursionError:
        return []


def bundle(name: str) -> dict[str, Any]:
    """Schema `name` with every schema it refers to inlined under `$defs`: one document
    whose every `$ref` is a local pointer (`#/$defs/event_v1_0`), for tools that cannot
    follow references between files."""
    root = copy.deepcopy(load(name))
    inlined: dict[str, Any] = {}
    pending = [name]
    while pending:
        current = pending.pop()
        doc = root if current == name else inlined[current]
        base = load(current)["$id"]
        prefix = "#" if current == name else f"#/$defs/{current}"

        def rewrite(node: Any, base: str = base, prefix: str = prefix) -> None:
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str):
                    target, fragment = urldefrag(urljoin(base, ref))
                    other = by_id(target)
                    if ref.startswith("#") or other is None:
                        node["$ref"] = prefix + ref[1:] if ref.startswith("#") else ref
                    else:
                        if other != name and other not in inlined:
                            embedded = copy.deepcopy(load(other))
                            embedded.pop("$id", None)
                            embedded.pop("$schema", None)
                            inlined[other] = embedded
                            pending.append(other)
                        where = "#" if other == name else f"#/$defs/{other}"
                        node["$ref"] = where + fragment
                for key, value in node.items():
                    if key != "$ref":
                        rewrite(value)
            elif isinstance(node, list):
                for value in node:
                    rewrite(value)

        rewrite(doc)
    if inlined:
        root.setdefault("$defs", {}).update(dict(sorted(inlined.items())))
    return root
