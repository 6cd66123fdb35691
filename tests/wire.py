"""Shared helpers of the wire-type tests: the schemas, their generated root types, the corpus.

The schemas refer to each other by relative file name (`"$ref": "state_v1_3.json"`,
`"step_result_v1_0.json#/$defs/Continuation"`), which resolves against the referring
schema's `$id` to the `$id` of the schema it names. `REGISTRY` holds every schema under its
`$id` alone (no retrieve hook), so jsonschema never reaches the network.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin

import msgspec
from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from generated.capabilities_v1_0 import Capabilities as CapabilitiesV10
from generated.capabilities_v1_1 import Capabilities
from generated.command_v1_0 import Command
from generated.dryrun_result_v1_0 import DryRunResult
from generated.dryrun_result_v1_1 import DryRunResult as DryRunResultV11
from generated.dryrun_result_v1_2 import DryRunResult as DryRunResultV12
from generated.equipment_entry_v1_0 import EquipmentEntry
from generated.event_v1_0 import Event
from generated.history_entry_v1_0 import HistoryEntry
from generated.job_order_v1_0 import JobOrder
from generated.job_response_v1_0 import JobResponse
from generated.recipe_v1_0_0 import Recipe as RecipeV100
from generated.recipe_v1_1_0 import Recipe as RecipeV110
from generated.recipe_v1_2_0 import Recipe as RecipeV120
from generated.simulation_script_v1_0 import SimulationScript
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_3 import SfcState as SfcStateV13
from generated.state_v1_4 import SfcState as SfcStateV14
from generated.state_v1_5 import SfcState
from generated.step_result_v1_0 import StepResult as StepResultV10
from generated.step_result_v1_1 import StepResult as StepResultV11
from generated.step_result_v1_2 import StepResult
from generated.work_entry_v1_0 import WorkEntry

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
DATA = Path(__file__).resolve().parent / "data"

ROOT_TYPES: dict[str, Any] = {
    "recipe_v1_0_0": RecipeV100,
    "recipe_v1_1_0": RecipeV110,
    "recipe_v1_2_0": RecipeV120,
    "state_v1_3": SfcStateV13,
    "state_v1_4": SfcStateV14,
    "state_v1_5": SfcState,
    "event_v1_0": Event,
    "command_v1_0": Command,
    "step_result_v1_0": StepResultV10,
    "step_result_v1_1": StepResultV11,
    "step_result_v1_2": StepResult,
    "snapshot_v1_0": Snapshot,
    "capabilities_v1_0": CapabilitiesV10,
    "capabilities_v1_1": Capabilities,
    "simulation_script_v1_0": SimulationScript,
    "dryrun_result_v1_0": DryRunResult,
    "dryrun_result_v1_1": DryRunResultV11,
    "dryrun_result_v1_2": DryRunResultV12,
    "job_order_v1_0": JobOrder,
    "job_response_v1_0": JobResponse,
    "work_entry_v1_0": WorkEntry,
    "equipment_entry_v1_0": EquipmentEntry,
    "history_entry_v1_0": HistoryEntry,
}
"""Schema name (file stem in schemas/) -> the generated type that decodes its documents."""

SCHEMA_NAMES = sorted(ROOT_TYPES)


def _resource(path: Path) -> Resource[Any]:
    return Resource.from_contents(json.loads(path.read_bytes()), default_specification=DRAFT202012)


def file_refs(node: Any, base: str) -> Iterator[str]:
    """Every reference to another document in a schema, resolved against `base` (no fragment)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            yield urldefrag(urljoin(base, ref)).url
        for value in node.values():
            yield from file_refs(value, base)
    elif isinstance(node, list):
        for value in node:
            yield from file_refs(value, base)


def _registry() -> Registry[Any]:
    # Every schema under its own $id and nothing else: no retrieve hook. A relative $ref
    # resolves by URI resolution to another schema's $id (docs/formats.md, "Schemas").
    resources = [_resource(path) for path in sorted(SCHEMAS.glob("*.json"))]
    registry: Registry[Any] = Registry().with_resources(
        (resource.id() or "", resource) for resource in resources
    )
    return registry.crawl()


REGISTRY = _registry()


@cache
def schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.json").read_bytes())


@cache
def validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(schema(name), registry=REGISTRY)


@cache
def decoder(name: str) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(ROOT_TYPES[name])


def jsonschema_error(name: str, data: bytes) -> str | None:
    """None when jsonschema accepts the document, else its best error."""
    try:
        doc = json.loads(data)
    except ValueError as exc:
        return f"not JSON: {exc}"
    error = best_match(validator(name).iter_errors(doc))
    return None if error is None else f"{error.message} at {error.json_path}"


def msgspec_error(name: str, data: bytes) -> str | None:
    """None when msgspec decodes the document, else its error."""
    try:
        decoder(name).decode(data)
    except msgspec.DecodeError as exc:  # ValidationError is one
        return str(exc)
    return None


def corpus(name: str, verdict: str) -> list[Path]:
    """The hand-written documents of tests/data/NAME/{valid,invalid}/."""
    return sorted((DATA / name / verdict).glob("*.json"))


# --- mutations of valid documents, found by walking the schema beside the document ----------


class MapKey(str):
    """A key of a JSON object used as a map (additionalProperties), not a property name."""


Path_ = tuple[str | int, ...]


def json_path(path: Path_, *, as_msgspec: bool = False) -> str:
    """A path in msgspec's spelling, $.Actions[0].TypeId; msgspec writes a map key as [...]."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, MapKey) and as_msgspec:
            out += "[...]"
        else:
            out += f".{part}"
    return out


def _branches(node: dict[str, Any], resolver: Any, instance: Any) -> Iterator[tuple[Any, Any]]:
    """The oneOf/anyOf branches (resolved) that the instance is meant for."""
    for key in ("oneOf", "anyOf"):
        for branch in node.get(key, []):
            sub, sub_resolver = _deref(branch, resolver)
            types = sub.get("type")
            if types == "null" and instance is not None:
                continue
            if types == "object" and not isinstance(instance, dict):
                continue
            tag = sub.get("properties", {}).get("kind", {}).get("const")
            if tag is not None and isinstance(instance, dict) and instance.get("kind") != tag:
                continue
            yield sub, sub_resolver


def _deref(node: dict[str, Any], resolver: Any) -> tuple[dict[str, Any], Any]:
    while "$ref" in node:
        resolved = resolver.lookup(node["$ref"])
        node, resolver = resolved.contents, resolved.resolver
    return node, resolver


def walk(name: str, instance: Any) -> Iterator[tuple[str, Path_, Any]]:
    """Every strict spot of a valid document: yields (what, path, schema node).

    what is "required" (path names a required property that is present), "closed" (path
    names an object whose schema forbids unknown properties), "enum" or "const" (path names
    a value restricted to a list or a tag).
    """
    root = schema(name)
    resolver = REGISTRY.resolver(base_uri=root["$id"])
    yield from _walk(root, resolver, instance, ())


def _walk(node: Any, resolver: Any, instance: Any, path: Path_) -> Iterator[tuple[str, Path_, Any]]:
    node, resolver = _deref(node, resolver)
    for sub, sub_resolver in _branches(node, resolver, instance):
        yield from _walk(sub, sub_resolver, instance, path)
    if "enum" in node:
        yield "enum", path, node
    if "const" in node:
        yield "const", path, node
    if isinstance(instance, dict) and node.get("type") == "object":
        properties = node.get("properties", {})
        if node.get("additionalProperties") is False:
            yield "closed", path, node
        for key in node.get("required", []):
            if key in instance:
                yield "required", (*path, key), node
        extra = node.get("additionalProperties")
        for key, value in instance.items():
            if key in properties:
                yield from _walk(properties[key], resolver, value, (*path, key))
            elif isinstance(extra, dict):
                yield from _walk(extra, resolver, value, (*path, MapKey(key)))
    if isinstance(instance, list) and isinstance(node.get("items"), dict):
        # Items of the same shape add nothing but time (a log of 200 entries).
        shapes: set[str] = set()
        for index, value in enumerate(instance):
            shape = _shape(value)
            if shape not in shapes:
                shapes.add(shape)
                yield from _walk(node["items"], resolver, value, (*path, index))


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps({k: _shape(v) for k, v in value.items()} | {"kind": value.get("kind")})
    if isinstance(value, list):
        return json.dumps(sorted({_shape(v) for v in value}))
    return type(value).__name__


def mutate(doc: Any, path: Path_, change: Any) -> Any:
    """A deep copy of doc with change(parent, last key) applied at path."""
    out = copy.deepcopy(doc)
    parent = out
    for part in path[:-1]:
        parent = parent[part]
    change(parent, path[-1])
    return out


def broken_variants(name: str, doc: Any) -> Iterator[tuple[str, str, bytes]]:
    """Documents that both tools must refuse, made from a valid one: (label, at, document).

    Each required property dropped, an unknown property added to each closed object, and
    each enum value or union tag replaced with "bogus". `at` is the JSON path that msgspec's
    error must name: the object for a missing or unknown property, else the value.
    """
    seen: set[str] = set()
    for what, path, _node in walk(name, doc):
        if what == "required":
            label, at = f"missing {json_path(path)}", json_path(path[:-1], as_msgspec=True)
            broken = mutate(doc, path, lambda parent, key: parent.pop(key))
        elif what == "closed":
            label, at = f"unknown field in {json_path(path)}", json_path(path, as_msgspec=True)
            if path:
                broken = mutate(doc, path, lambda parent, key: parent[key].update(bogusField=1))
            else:
                broken = {**doc, "bogusField": 1}
        else:
            if not path:
                continue
            label, at = f"bogus {what} at {json_path(path)}", json_path(path, as_msgspec=True)
            broken = mutate(doc, path, lambda parent, key: parent.__setitem__(key, "bogus"))
        if label not in seen:
            seen.add(label)
            yield label, at, json.dumps(broken).encode()
