"""The wire schemas and the generated msgspec types agree.

For every schema in schemas/, the documents under tests/data/NAME/valid/ must be accepted and
those under tests/data/NAME/invalid/ refused, by jsonschema (the schema) and by msgspec (the
generated type, the runtime decoder) alike. More refused documents are made from every valid
one by walking its schema: each required property dropped, an unknown property in each closed
object, each enum value and union tag replaced.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from generated.recipe_v1_0_0 import Recipe as RecipeV100
from generated.recipe_v1_1_0 import Recipe as RecipeV110
from generated.recipe_v1_2_0 import Recipe as RecipeV120
from tests import wire

PYTHON_RECIPES = wire.DATA / "python_recipes"
NOT_RECIPES = {
    # WorkMaster.data stubs: no Transitions or Actions.
    "WorkMasterStub.json",
    "WorkMasterStub.orig.json",
    # The docs' snake_case form, which the original accepted by field name; not the wire format.
    "RearAxleFitting.docs.orig.json",
}
RECIPE_SCHEMAS = ("recipe_v1_0_0", "recipe_v1_1_0", "recipe_v1_2_0")

KNOWN_DISAGREEMENTS = {
    "state_v1_3/invalid/sequence_float.json": (
        "JSON Schema's \"integer\" accepts 4.0 (a number with no fraction); msgspec's int "
        "refuses any float. The core only ever writes integers."
    ),
}


def _rel(path: Path) -> str:
    return path.relative_to(wire.DATA).as_posix()


def _case_id(name: str, path: Path) -> str:
    # The python recipes are checked against both recipe versions: say which.
    return _rel(path) if path.parent.parent.name == name else f"{name}:{_rel(path)}"


def _load(path: Path) -> object:
    return json.loads(path.read_bytes())


def _corpus() -> list[tuple[str, bool, Path]]:
    cases = [
        (name, verdict == "valid", path)
        for name in wire.SCHEMA_NAMES
        for verdict in ("valid", "invalid")
        for path in wire.corpus(name, verdict)
    ]
    # The Python project's recipes are v1.0.0 documents, so both recipe versions accept them.
    cases += [
        (name, path.name not in NOT_RECIPES, path)
        for name in RECIPE_SCHEMAS
        for path in sorted(PYTHON_RECIPES.glob("*.json"))
    ]
    return cases


CORPUS = _corpus()
VALID = [(name, path) for name, ok, path in CORPUS if ok]
VALID_PARAMS = [pytest.param(name, path, id=_case_id(name, path)) for name, path in VALID]


def _corpus_params() -> list[object]:
    params = []
    for name, ok, path in CORPUS:
        reason = KNOWN_DISAGREEMENTS.get(_rel(path))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(name, ok, path, id=_case_id(name, path), marks=marks))
    return params


def _describe(js: str | None, ms: str | None) -> str:
    return (
        f"jsonschema: {'accepts' if js is None else 'refuses: ' + js}\n"
        f"msgspec:    {'accepts' if ms is None else 'refuses: ' + ms}"
    )


# --- the corpus ------------------------------------------------------------------------------


def test_every_schema_has_a_root_type_and_a_corpus() -> None:
    assert sorted(p.stem for p in wire.SCHEMAS.glob("*.json")) == wire.SCHEMA_NAMES
    for name in wire.SCHEMA_NAMES:
        assert wire.corpus(name, "valid"), f"tests/data/{name}/valid/ is empty"
        assert wire.corpus(name, "invalid"), f"tests/data/{name}/invalid/ is empty"


def test_every_full_document_holds_every_field_of_its_version() -> None:
    """A `valid/full.json` pins every top-level field of its schema, and a new version's is not
    a copy of the previous version's: a field the new version adds is never left unpinned."""
    fulls = {n: wire.DATA / n / "valid" / "full.json" for n in wire.SCHEMA_NAMES}
    fulls = {n: p for n, p in fulls.items() if p.is_file()}
    assert "dryrun_result_v1_2" in fulls
    for name, path in fulls.items():
        doc = _load(path)
        fields = set(wire.schema(name).get("properties", {}))
        assert isinstance(doc, dict), name
        assert not fields - set(doc), f"{_rel(path)} lacks {sorted(fields - set(doc))}"
    by_family: dict[str, list[str]] = {}
    for name in sorted(fulls):
        by_family.setdefault(name.rsplit("_v", 1)[0], []).append(name)
    for names in by_family.values():
        for older, newer in itertools.pairwise(names):
            if set(wire.schema(newer).get("properties", {})) != set(
                wire.schema(older).get("properties", {})
            ):
                assert fulls[older].read_bytes() != fulls[newer].read_bytes(), newer


@pytest.mark.parametrize("name", wire.SCHEMA_NAMES)
def test_schema_is_valid_draft_2020_12(name: str) -> None:
    wire.validator(name).check_schema(wire.schema(name))


# Keywords whose meaning the generated msgspec types carry (or that only annotate). Another
# keyword (format, uniqueItems, if/then, ...) may be checked by one tool and not the other:
# find out what the generator makes of it, add corpus documents, then list it here.
AGREED_KEYWORDS = frozenset(
    {"$schema", "$id", "$defs", "$ref", "title", "description", "default", "discriminator"}
    | {"type", "properties", "required", "additionalProperties", "items", "enum", "const"}
    | {"oneOf", "anyOf", "minimum", "maximum", "maxItems", "maxLength", "pattern"}
    | {"minItems", "minLength", "exclusiveMinimum"}
)


def _keywords(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            if key in ("properties", "$defs"):
                for sub in value.values():
                    yield from _keywords(sub)
            elif key not in ("enum", "const", "default", "discriminator"):
                yield from _keywords(value)
    elif isinstance(node, list):
        for sub in node:
            yield from _keywords(sub)


@pytest.mark.parametrize("name", wire.SCHEMA_NAMES)
def test_schema_uses_only_keywords_both_tools_enforce(name: str) -> None:
    unknown = set(_keywords(wire.schema(name))) - AGREED_KEYWORDS
    assert not unknown, f"schemas/{name}.json uses {sorted(unknown)}"


@pytest.mark.parametrize(("name", "ok", "path"), _corpus_params())
def test_corpus_document(name: str, ok: bool, path: Path) -> None:
    data = path.read_bytes()
    js, ms = wire.jsonschema_error(name, data), wire.msgspec_error(name, data)
    assert (js is None) == (ms is None), f"the tools disagree on {_rel(path)}\n{_describe(js, ms)}"
    assert (js is None) == ok, f"{_rel(path)} should be {'accepted' if ok else 'refused'}"


@pytest.mark.parametrize(("name", "path"), VALID_PARAMS)
def test_broken_variants_are_refused_by_both(name: str, path: Path) -> None:
    failures = []
    for label, at, data in wire.broken_variants(name, _load(path)):
        js, ms = wire.jsonschema_error(name, data), wire.msgspec_error(name, data)
        if js is None or ms is None:
            failures.append(f"{label}: both must refuse\n{_describe(js, ms)}")
        # msgspec names the JSON path at fault; at the root it names none.
        elif (" - at `" in ms) if at == "$" else not ms.endswith(f" - at `{at}`"):
            failures.append(f"{label}: msgspec's error should name {at}: {ms}")
    assert not failures, "\n".join(failures)


def test_generated_variants_cover_each_kind_of_refusal() -> None:
    labels = [
        label for name, path in VALID for label, _, _ in wire.broken_variants(name, _load(path))
    ]
    for kind in ("missing ", "unknown field in ", "bogus enum at ", "bogus const at "):
        assert any(label.startswith(kind) for label in labels), kind


def test_decode_error_names_the_json_path() -> None:
    data = (wire.DATA / "recipe_v1_1_0/invalid/type_id_int.json").read_bytes()
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(data, type=RecipeV110)
    assert str(caught.value) == "Expected `str`, got `int` - at `$.Actions[0].TypeId`"


# --- round trip and stability ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), VALID_PARAMS)
def test_round_trip_is_stable(name: str, path: Path) -> None:
    decoder = wire.decoder(name)
    value = decoder.decode(path.read_bytes())
    encoded = msgspec.json.encode(value)
    again = decoder.decode(encoded)
    assert again == value
    assert msgspec.json.encode(again) == encoded
    # what the encoder writes is a valid document too
    assert wire.jsonschema_error(name, encoded) is None


# --- versions ----------------------------------------------------------------------------------

VERSION_IN_NAME = re.compile(r"_v(\d+)_(\d+)(?:_(\d+))?$")


PUBLISHED = "https://aschamberger.github.io/schemas/microdcs/sfc/"


@pytest.mark.parametrize("name", wire.SCHEMA_NAMES)
def test_id_carries_the_version_of_the_file_name(name: str) -> None:
    """docs/formats.md "Schemas": a recipe format's $id is its dataschema URI (`.../v1.1.0/`);
    every other schema is published beside the others under its file name, which carries
    the version, so that a relative `$ref` by file name resolves to its `$id`."""
    match = VERSION_IN_NAME.search(name)
    assert match, f"schemas/{name}.json has no version in its name"
    major, minor, patch = match.group(1), match.group(2), match.group(3) or "0"
    schema_id = wire.schema(name)["$id"]
    if name.startswith("recipe_"):
        assert schema_id.endswith(f"/v{major}.{minor}.{patch}/")
    else:
        assert schema_id == f"{PUBLISHED}{name}.json"


def test_recipe_ids_are_the_dataschema_uris() -> None:
    base = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe"
    assert wire.schema("recipe_v1_2_0")["$id"] == f"{base}/v1.2.0/"
    assert wire.schema("recipe_v1_1_0")["$id"] == f"{base}/v1.1.0/"
    assert wire.schema("recipe_v1_0_0")["$id"] == f"{base}/v1.0.0/"


def test_state_format_is_1_3() -> None:
    assert wire.schema("state_v1_3")["properties"]["format"] == {"const": "1.3"}


V1_0_0_RECIPES = [
    pytest.param(path, id=_rel(path))
    for name, path in VALID
    if name == "recipe_v1_0_0" or (name == "recipe_v1_1_0" and path.parent == PYTHON_RECIPES)
]


@pytest.mark.parametrize("path", V1_0_0_RECIPES)
def test_v1_0_0_recipe_decodes_under_the_current_model(path: Path) -> None:
    data = path.read_bytes()
    old = msgspec.json.decode(data, type=RecipeV100)
    current = msgspec.json.decode(data, type=RecipeV110)
    assert msgspec.json.encode(current) == msgspec.json.encode(old)


V1_1_0_RECIPES = [
    pytest.param(path, id=_rel(path))
    for name, path in VALID
    if name in ("recipe_v1_0_0", "recipe_v1_1_0")
]


@pytest.mark.parametrize("path", V1_1_0_RECIPES)
def test_v1_1_0_recipe_encodes_the_same_under_v1_2_0(path: Path) -> None:
    """v1.2.0 only adds fields (and lets an R block go without TypeId, ...), so a v1.1.0
    recipe decodes to the same canonical bytes: the recipe hash a state pins stays."""
    data = path.read_bytes()
    old = msgspec.json.decode(data, type=RecipeV110)
    current = msgspec.json.decode(data, type=RecipeV120)
    assert msgspec.json.encode(current) == msgspec.json.encode(old)


def test_rear_axle_fitting_decodes_under_the_current_model() -> None:
    recipe = msgspec.json.decode(
        (PYTHON_RECIPES / "RearAxleFitting.json").read_bytes(), type=RecipeV110
    )
    assert [t.condition for t in recipe.transitions] == ["true", "true", "torque_ok"]
    assert [a.name for a in recipe.actions] == ["position_axle", "tighten", "camera_qa", "verify"]
    assert recipe.actions[1].parameters == {"torque_spec": "85Nm"}
    assert recipe.actions[1].hold is msgspec.UNSET
    assert recipe.branches is not msgspec.UNSET
    assert recipe.branches[0].branches == [["Positioning", "TightenBolts"], ["QaCheck"]]


def test_v1_1_0_recipe_with_hold_is_refused_by_v1_0_0() -> None:
    data = (wire.DATA / "recipe_v1_1_0/valid/full.json").read_bytes()
    msgspec.json.decode(data, type=RecipeV110)
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(data, type=RecipeV100)
    assert str(caught.value) == "Object contains unknown field `Hold` - at `$.Actions[1]`"
    assert wire.jsonschema_error("recipe_v1_0_0", data) is not None
