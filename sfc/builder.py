"""Build: a recipe document becomes a Graph, or every error found in it (SFC000 to SFC026).

Build errors are data: `build()` never raises for any bytes, it returns a BuildResult with
either a graph or a non-empty tuple of errors. Each error has a code from the table in docs/errors.md,
the JSON path of the element (`$.Transitions[2].Target`) and a message that names the step,
transition, action or divergence by its name.

Theory of operation. The checks run as passes over the decoded recipe, each pass reading the
tables the earlier ones left behind:

1. decode (SFC000): size limit, then the module-level decoder of the dataschema;
2. size (SFC018): above the limits nothing else is checked;
3. elements, each on its own: names (SFC017, SFC002), the initial step (SFC001), actions
   (SFC003, SFC009, SFC010, SFC019, and the qualifiers of v1.2.0: SFC000 for a missing
   field, SFC023 to SFC026), R blocks against the actions they reset (SFC021, SFC022,
   SFC002), divergences (SFC004, SFC003, SFC005), transitions (SFC009 for a condition that
   can never match, SFC003, SFC006);
4. the chart, over what resolved: priorities (SFC008), defaults (SFC007), pull-event
   ambiguity (SFC011), reachability (SFC012), loops without a wait (SFC013: a step waits
   for its N actions and its MinSeconds);
5. the station, only with capabilities: types (SFC014), features (SFC015, the qualifier
   groups too), outcomes of the N actions (SFC016), the hold outcome (SFC020).

Only N actions are gating: `step_actions` of the checker holds them alone, so SFC011,
SFC013 and SFC016 see what the step waits for. A document of v1.1.0 or v1.0.0 counts every
block as N after SFC010 refused its other qualifiers.

An error is reported once, where it is. A later pass skips what an earlier one refused:
a transition with an unknown or ambiguous end takes no part in the chart checks, and when a
transition leads to an unknown name, or there is no initial step, no step is called
unreachable (the broken transition may be the one meant to reach it). A divergence with an
unknown kind, no or empty sequences, or an unknown step in a sequence is left out of the
chart checks. An action whose type or feature the station refuses has no outcomes to check.

Every pass is linear in the size of the recipe (the benchmark in bench/ measures it).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from msgspec import UNSET

from generated.capabilities_v1_1 import Capabilities
from generated.recipe_v1_0_0 import Recipe as RecipeV1_0_0
from generated.recipe_v1_1_0 import Recipe as RecipeV1_1_0
from generated.recipe_v1_2_0 import Action, EquipmentCommand, Recipe
from sfc.graph import (
    BIDI_CONTROLS,
    DEFAULT_OUTCOME,
    OUTCOME_LIMIT,
    PULSES,
    RESERVED_OUTCOMES,
    STORED,
    TIMED,
    TRUE,
    Graph,
    cycles,
    index,
    unsafe_char,
    visible,
)

RECIPE_V1_0_0: Final = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.0.0/"
RECIPE_V1_1_0: Final = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.1.0/"
RECIPE_V1_2_0: Final = "https://aschamberger.github.io/schemas/microdcs/sfc-recipe/v1.2.0/"

MAX_DOCUMENT_BYTES: Final = 16 * 1024 * 1024
"""Documents above 16 MiB are refused before decoding (SFC000)."""
MAX_ELEMENTS: Final = 20_000
"""Most steps, transitions, actions or divergences, each counted on its own (SFC018)."""
MAX_TIMEOUT_SECONDS: Final = 604_800
"""One week."""
MAX_ATTEMPTS: Final = 100
SUGGESTIONS: Final = 20
"""Most unknown names that get a "did you mean" in their message."""
RESERVED_LOOKALIKES: Final = {"timeout": "timeout", "timedout": "timeout", "error": "error"}
"""A condition, in lower case without `_` and `-`, that means a reserved outcome: one
spelled otherwise (`"Error"`, `"timed_out"`) could never match (SFC009)."""

PUSH: Final = "push_command"
PULL: Final = "pull_event"
SIMULTANEOUS: Final = "simultaneous"
SELECTION: Final = "selection"
JOB_ID: Final = "{jobId}"
HELD: Final = "held"
QUALIFIERS: Final = ("N", "R", "S", "L", "D", "P", "SD", "DS", "SL", "P1", "P0")

QUALIFIER_FEATURES: Final = {
    **dict.fromkeys(PULSES, ("pulseActions", "a pulse action")),
    **dict.fromkeys(("L", "D"), ("timedActions", "a timed action")),
    **dict.fromkeys((*STORED, "R"), ("storedActions", "a stored action")),
}
"""Qualifier -> (the capabilities feature it needs, what it is called in a message)."""

_PLACEHOLDER = re.compile(r"\{[^{}]*\}")
_AT = re.compile(r"^(?P<message>.*) - at `(?P<path>\$[^`]*)`$", re.DOTALL)
_FIELD = re.compile(
    r"^Object (?P<what>missing required|contains unknown) field `(?P<field>[^`]*)`$"
)
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`$")
_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}


@dataclass(frozen=True, slots=True)
class BuildError:
    code: str
    """SFC000 to SFC026."""
    path: str
    """JSON path of the element, starting with `$`: `$.Transitions[2].Target`."""
    message: str

    def __str__(self) -> str:
        return f"{self.code} {self.path}: {self.message}"


@dataclass(frozen=True, slots=True)
class BuildResult:
    graph: Graph | None
    errors: tuple[BuildError, ...] = ()

    @property
    def ok(self) -> bool:
        return self.graph is not None


def build(
    recipe_json: bytes,
    capabilities: Capabilities | None = None,
    dataschema: str = RECIPE_V1_2_0,
) -> BuildResult:
    """Validate a recipe document and index it into a Graph; the dataschema picks the format.

    `sfc.interpreter` registers one interpreter per entry of FORMATS; this function reads
    the same table, so the two modules do not import each other.
    """
    fmt = FORMATS.get(dataschema)
    if fmt is None:
        known = ", ".join(FORMATS)
        return refused(
            "SFC000", "$", f"no recipe interpreter for dataschema {_q(dataschema)}; known: {known}"
        )
    version, decoder = fmt
    return decode_and_check(recipe_json, decoder, dataschema, capabilities, version)


def refused(code: str, path: str, message: str) -> BuildResult:
    return BuildResult(None, (BuildError(code, path, message),))


# -- decoding (SFC000)

_canonical = msgspec.json.Encoder(order="deterministic")
_decoder_v1_2_0 = msgspec.json.Decoder(Recipe)

FORMATS: Final[dict[str, tuple[str, msgspec.json.Decoder[Any] | None]]] = {
    RECIPE_V1_0_0: ("v1.0.0", msgspec.json.Decoder(RecipeV1_0_0)),
    RECIPE_V1_1_0: ("v1.1.0", msgspec.json.Decoder(RecipeV1_1_0)),
    RECIPE_V1_2_0: ("v1.2.0", None),
}
"""Dataschema URI -> (version, the decoder of that format; None for v1.2.0 itself)."""


def qualifier_hint(value: object) -> str:
    """`; did you mean "L"?` for a qualifier in the wrong case or with blanks, else ""."""
    if not isinstance(value, str):
        return ""
    fixed = value.strip().upper()
    return f'; did you mean "{fixed}"?' if fixed in QUALIFIERS and fixed != value else ""


def decode_error(exc: msgspec.DecodeError, what: str = "recipe") -> tuple[str, str]:
    """The JSON path and a readable message of a msgspec decode or validation error.

    `what` names the document: "recipe format v1.0.0", "capabilities".
    """
    text = str(exc)
    path = "$"
    at = _AT.match(text)
    if at:
        text, path = at["message"], at["path"]
    if not isinstance(exc, msgspec.ValidationError):
        return path, f"the document is not valid JSON: {text}"
    field = _FIELD.match(text)
    if field:
        name = field["field"] or '""'
        path = f"{path}.{field['field']}"
        if field["what"] == "missing required":
            return path, f"the required field {name} is missing"
        return path, f"{name} is not a field of the {what}"
    expected = _EXPECTED.match(text)
    if expected:
        want = _WORDS.get(expected["want"], expected["want"])
        got = _WORDS.get(expected["got"], expected["got"])
        if path == "$" and expected["want"] == "object":
            return path, f"the document must be a JSON object, not {got}"
        return path, f"expected {want}, got {got}"
    if text.startswith("Invalid enum value "):
        message = f"{text.removeprefix('Invalid enum value ')} is not an allowed value"
        if path.endswith(".Qualifier"):
            value = text.removeprefix("Invalid enum value ").strip("'")
            message += f" (IEC 61131-3 qualifiers: {', '.join(QUALIFIERS)}){qualifier_hint(value)}"
        return path, message
    return path, text[:1].lower() + text[1:]


def decode_and_check(
    recipe_json: bytes,
    decoder: msgspec.json.Decoder[Any] | None,
    dataschema: str,
    capabilities: Capabilities | None,
    version: str,
) -> BuildResult:
    """Decode with `decoder` (None: v1.2.0 itself), then check and index as v1.2.0.

    A document of an older format that decodes is a valid v1.2.0 document too (each version
    only adds fields), so it is decoded again with the v1.2.0 model for the checks; its
    actions may have qualifier N only (SFC010).
    """
    size = len(recipe_json)
    if size > MAX_DOCUMENT_BYTES:
        return refused(
            "SFC000",
            "$",
            f"the document has {size:,} bytes; recipes above 16 MiB "
            f"({MAX_DOCUMENT_BYTES:,} bytes) are refused",
        )
    try:
        if decoder is not None:
            decoder.decode(recipe_json)
        recipe = _decoder_v1_2_0.decode(recipe_json)
    except msgspec.DecodeError as exc:
        if not bytes(recipe_json).strip():
            return refused("SFC000", "$", "the document is empty")
        syntax = _syntax_error(recipe_json) if isinstance(exc, msgspec.ValidationError) else None
        if syntax is not None:
            return refused("SFC000", "$", syntax)
        path, message = decode_error(exc, f"recipe format {version}")
        if path.endswith((".Hold", ".Restart")) and "is not a field" in message:
            message += f"; Hold and Restart need dataschema {RECIPE_V1_1_0}"
        elif path.endswith((".DurationSeconds", ".MinSeconds")) and "is not a field" in message:
            message += f"; DurationSeconds and MinSeconds need dataschema {RECIPE_V1_2_0}"
        elif path.endswith((".DurationSeconds", ".MinSeconds")) and "expected" in message:
            field = path.rsplit(".", 1)[1]
            message = (
                f"{field} must be a number above 0 and at most {MAX_TIMEOUT_SECONDS} (one week)"
            )
        elif path.endswith(".Qualifier") and "is not an allowed value" in message:
            return refused("SFC010", path, message)
        elif decoder is not None and _bare_reset(recipe_json, path):
            message += (
                f"; an R block of only Name, Step and Qualifier needs dataschema {RECIPE_V1_2_0}"
            )
        return refused("SFC000", path, message)
    except RecursionError:
        return refused("SFC000", "$", "the document is nested too deeply")
    errors = check(recipe, capabilities, version)
    if errors:
        return BuildResult(None, tuple(errors))
    try:
        recipe_hash = recipe_hash_of(recipe)
    except RecursionError:
        return refused("SFC000", "$", "the document is nested too deeply")
    return BuildResult(index(recipe, recipe_hash, dataschema))


_MISSING_AT = re.compile(r"^\$\.Actions\[(?P<index>\d+)\]\.(Interaction|TypeId|TimeoutSeconds)$")


def _bare_reset(recipe_json: bytes, path: str) -> bool:
    """Whether the field missing at `path` belongs to an R block (v1.2.0's form of one)."""
    at = _MISSING_AT.match(path)
    if at is None:
        return False
    try:
        actions = msgspec.json.decode(recipe_json).get("Actions")
        return bool(actions[int(at["index"])].get("Qualifier") == "R")
    except (msgspec.DecodeError, RecursionError, AttributeError, LookupError, TypeError):
        return False


def _syntax_error(recipe_json: bytes) -> str | None:
    """Why the bytes are no JSON at all, or None.

    The typed decoder may stop at an unknown field before it reaches the end of a document
    that was cut short; the reader needs to hear that the file is cut short first.
    """
    try:
        msgspec.json.decode(recipe_json)
    except msgspec.DecodeError as exc:
        return decode_error(exc)[1]
    except RecursionError:
        return "the document is nested too deeply"
    return None


def recipe_hash_of(recipe: Recipe) -> str:
    """The hash a state pins: sha256 of the canonical encoding of the decoded recipe."""
    return hashlib.sha256(_canonical.encode(recipe)).hexdigest()


# -- the checks


def check(
    recipe: Recipe, capabilities: Capabilities | None = None, version: str = "v1.2.0"
) -> list[BuildError]:
    """Every build error of a decoded recipe, in the order of the passes.

    `version` is the format the document was read as; before v1.2.0 only N is allowed.
    """
    return _Checker(recipe, capabilities, version).run()


def _q(name: str) -> str:
    """A name quoted for a message; a control or bidi character shows as `\\uXXXX`."""
    return visible(json.dumps(name, ensure_ascii=False))


def _names(names: Iterable[str], limit: int = 5) -> str:
    shown = list(names)
    more = len(shown) - limit
    text = ", ".join(_q(n) for n in shown[:limit])
    return f"{text} and {more} more" if more > 0 else text


def _character_kind(ch: str) -> str:
    if ch in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029":
        return "a line break"
    if ch in BIDI_CONTROLS:
        return "a bidi control"
    if ch.isspace():
        return "white space other than a space"
    return "a control character" if ord(ch) < 0xA0 else "an invisible or unassigned character"


STEP: Final = 1
DIVERGENCE: Final = 2
AMBIGUOUS: Final = 3


class _Checker:
    """One pass per method; each reads the tables the earlier passes filled."""

    def __init__(self, recipe: Recipe, capabilities: Capabilities | None, version: str) -> None:
        self.recipe = recipe
        self.version = version
        self.qualified = version not in ("v1.0.0", "v1.1.0")
        """The format has the qualifiers besides N (v1.2.0 on)."""
        self.steps = recipe.steps
        self.transitions = recipe.transitions
        self.actions = recipe.actions
        self.divergences = [] if recipe.branches is UNSET else recipe.branches
        self.caps = capabilities
        self.errors: list[BuildError] = []
        self.suggested = 0

        self.step_at: dict[str, int] = {}
        """Step name -> index of its first declaration."""
        self.div_at: dict[str, int] = {}
        """Divergence name -> index of its first declaration."""
        self.ambiguous: set[str] = set()
        """Names that do not name one node: a step and a divergence, or two divergences."""
        self.initials: list[int] = []
        self.position: dict[str, tuple[int, int, int]] = {}
        """Step -> (divergence index, sequence, index in the sequence), first occurrence."""
        self.div_usable: list[bool] = []
        """Divergences the chart checks can rely on."""
        self.step_actions: dict[str, list[int]] = {}
        """Step name -> its gating (N) actions (those whose Step resolved)."""
        self.gating: list[bool] = []
        """Per action block: N (before v1.2.0 every block counts as N)."""
        self.type_ids: list[str] = []
        """Per action block: its TypeId, "" for an R block or one without it."""
        self.defined: dict[str, int] = {}
        """Action name -> its first defining block (not an R)."""
        self.resets: dict[str, list[int]] = {}
        """Step name -> its R blocks."""
        self._not_gating: dict[str, list[int]] | None = None
        """Step name -> its action blocks but N and R (for SFC016's message), made once."""
        self.interaction_ok: list[bool] = []
        self.selector_ok: list[bool] = []
        self.equipment_ok: list[bool] = []
        """Hold and Restart both present and complete, on a push command."""
        self.src_ok: list[bool] = []
        """The transition leaves a top-level step or a usable divergence (no SFC003/SFC006)."""
        self.tgt_kind: list[int | None] = []
        """STEP, DIVERGENCE, AMBIGUOUS or None (unknown)."""
        self.entry_of: list[int] = []
        """Divergence index for a selection transition, else -1."""
        self.into_sequence: list[bool] = []
        """The target is a step inside a sequence (an entry, or SFC006)."""
        self._incoming: dict[str, list[int]] | None = None
        self.kind: dict[str, int] = {}
        """Node name -> STEP, DIVERGENCE or AMBIGUOUS."""
        self.waiting: dict[str, list[int]] = {}
        """Step name -> its pull-event actions with a usable selector (for SFC011)."""

    def error(self, code: str, path: str, message: str) -> None:
        self.errors.append(BuildError(code, path, message))

    def did_you_mean(self, name: str, known: Iterable[str]) -> str:
        """`; did you mean "Fill"?` for a misspelt reference, for the first few of them.

        A recipe with thousands of broken references would make this quadratic, so only
        the first SUGGESTIONS unknown names get a suggestion.
        """
        if self.suggested >= SUGGESTIONS:
            return ""
        self.suggested += 1
        close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.75)
        return f"; did you mean {_q(close[0])}?" if close else ""

    def run(self) -> list[BuildError]:
        if self.sizes():
            return self.errors
        self.names()
        self.initial()
        self.check_actions()
        self.check_divergences()
        self.check_transitions()
        self.initial_placement()
        self.priorities()
        self.defaults()
        self.ambiguity()
        self.reachability()
        self.loops()
        if self.caps is not None:
            self.station(self.caps)
        return self.errors

    # -- SFC018

    def sizes(self) -> bool:
        for field, items, noun in (
            ("Steps", self.steps, "steps"),
            ("Transitions", self.transitions, "transitions"),
            ("Actions", self.actions, "actions"),
            ("Branches", self.divergences, "divergences"),
        ):
            if len(items) > MAX_ELEMENTS:
                self.error(
                    "SFC018",
                    f"$.{field}",
                    f"the recipe has {len(items):,} {noun}; at most {MAX_ELEMENTS:,} are allowed",
                )
        return bool(self.errors)

    # -- SFC017, SFC002

    def unsafe_name(self, path: str, what: str, name: str) -> None:
        ch = unsafe_char(name)
        if ch is not None:
            self.error(
                "SFC017",
                path,
                f"{what} name {_q(name)} contains the character U+{ord(ch):04X} "
                f"({_character_kind(ch)}); names may not contain control, line-break or "
                "bidi-control characters",
            )

    def names(self) -> None:
        for i, s in enumerate(self.steps):
            if s.name == "":
                self.error("SFC017", f"$.Steps[{i}].Name", "a step has an empty name")
            self.unsafe_name(f"$.Steps[{i}].Name", "step", s.name)
            if s.name not in self.step_at:
                self.step_at[s.name] = i
            elif s.name != "":
                first = self.step_at[s.name]
                self.error(
                    "SFC002",
                    f"$.Steps[{i}].Name",
                    f"step {_q(s.name)} is declared twice (also at $.Steps[{first}])",
                )
        for k, d in enumerate(self.divergences):
            if d.name == "":
                self.error("SFC017", f"$.Branches[{k}].Name", "a divergence has an empty name")
            self.unsafe_name(f"$.Branches[{k}].Name", "divergence", d.name)
            if d.name in self.step_at:
                self.ambiguous.add(d.name)
                if d.name != "":
                    self.error(
                        "SFC002",
                        f"$.Branches[{k}].Name",
                        f"divergence {_q(d.name)} has the name of step {_q(d.name)} "
                        f"($.Steps[{self.step_at[d.name]}]); transitions could not tell them apart",
                    )
            elif d.name in self.div_at:
                self.ambiguous.add(d.name)
                if d.name != "":
                    self.error(
                        "SFC002",
                        f"$.Branches[{k}].Name",
                        f"divergence {_q(d.name)} is declared twice "
                        f"(also at $.Branches[{self.div_at[d.name]}])",
                    )
            self.div_at.setdefault(d.name, k)
        seen: dict[str, int] = {}
        for i, a in enumerate(self.actions):
            if self.qualified and a.qualifier == "R":
                continue  # it names an action defined elsewhere: check_resets
            if a.name == "":
                self.error("SFC017", f"$.Actions[{i}].Name", "an action has an empty name")
            elif ":" in a.name:
                self.error(
                    "SFC017",
                    f"$.Actions[{i}].Name",
                    f'action name {_q(a.name)} contains ":"; the action key is '
                    "{jobId}:{action}, so an action name cannot contain one",
                )
            self.unsafe_name(f"$.Actions[{i}].Name", "action", a.name)
            if a.name in seen:
                if a.name != "":
                    self.error(
                        "SFC002",
                        f"$.Actions[{i}].Name",
                        f"action {_q(a.name)} is declared twice (also at $.Actions[{seen[a.name]}])",
                    )
            else:
                seen[a.name] = i
        self.kind = dict.fromkeys(self.step_at, STEP)
        for name in self.div_at:
            self.kind[name] = AMBIGUOUS if name in self.ambiguous else DIVERGENCE

    def resolve(self, name: str) -> int | None:
        """STEP, DIVERGENCE, AMBIGUOUS, or None for an unknown name."""
        return self.kind.get(name)

    # -- SFC001

    def initial(self) -> None:
        self.initials = [i for i, s in enumerate(self.steps) if s.initial is True]
        if not self.initials:
            self.error(
                "SFC001",
                "$.Steps",
                'no step is the initial step; mark exactly one step with "Initial": true'
                if self.steps
                else "the recipe has no steps; it needs exactly one initial step",
            )
            return
        first = self.steps[self.initials[0]].name
        for i in self.initials[1:]:
            self.error(
                "SFC001",
                f"$.Steps[{i}].Initial",
                f"step {_q(self.steps[i].name)} is marked initial, and so is step {_q(first)}; "
                "exactly one step is the initial step",
            )

    # -- SFC003, SFC009, SFC010, SFC019, SFC021 to SFC026 on each action

    def check_actions(self) -> None:
        step_actions: dict[str, list[int]] = {name: [] for name in self.step_at}
        self.step_actions = step_actions
        waiting = self.waiting
        interaction_ok = self.interaction_ok
        selector_ok = self.selector_ok
        equipment_ok = self.equipment_ok
        defined = self.defined
        for i, a in enumerate(self.actions):
            if a.step not in step_actions:
                self.unknown_step(i, a)
            qualifier = a.qualifier if self.qualified else "N"
            if not self.qualified and a.qualifier != "N":
                self.error(
                    "SFC010",
                    f"$.Actions[{i}].Qualifier",
                    f"action {_q(a.name)} has qualifier {a.qualifier}; the recipe format "
                    f"{self.version} supports only N (non-stored): the other qualifiers "
                    f"need dataschema {RECIPE_V1_2_0}",
                )
            gating = qualifier == "N"
            self.gating.append(gating)
            if qualifier == "R":
                self.check_reset_block(i, a)
                for flags in (interaction_ok, selector_ok, equipment_ok):
                    flags.append(False)
                self.type_ids.append("")
                continue
            defined.setdefault(a.name, i)
            if gating and a.step in step_actions:
                step_actions[a.step].append(i)
            self.check_duration(i, a, qualifier)
            missing = [
                field
                for field, value in (
                    ("Interaction", a.interaction),
                    ("TypeId", a.type_id),
                    ("TimeoutSeconds", a.timeout_seconds),
                )
                if value is UNSET
            ]
            for field in missing:
                self.error(
                    "SFC000",
                    f"$.Actions[{i}].{field}",
                    f"the required field {field} is missing (only an R block goes without it)",
                )
            if missing:
                for flags in (interaction_ok, selector_ok, equipment_ok):
                    flags.append(False)
                self.type_ids.append("")
                continue
            interaction, type_id, timeout = a.interaction, a.type_id, a.timeout_seconds
            assert isinstance(interaction, str) and isinstance(type_id, str)
            assert isinstance(timeout, int)
            self.type_ids.append(type_id)
            ok = interaction in (PUSH, PULL)
            interaction_ok.append(ok)
            if not ok:
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].Interaction",
                    f"action {_q(a.name)} has interaction {_q(interaction)}; "
                    f"it must be {PUSH} or {PULL}",
                )
            elif interaction == PULL and not gating:
                self.error(
                    "SFC024",
                    f"$.Actions[{i}].Qualifier",
                    f"action {_q(a.name)} waits for an event and has qualifier {qualifier}; "
                    "a pull event is always N (the step waits for it): send a command instead, "
                    "or make it N",
                )
            self.check_type_id(f"$.Actions[{i}].TypeId", f"action {_q(a.name)}", type_id)
            if not 1 <= timeout <= MAX_TIMEOUT_SECONDS:
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].TimeoutSeconds",
                    f"action {_q(a.name)} has TimeoutSeconds {timeout}; "
                    f"it must be from 1 to {MAX_TIMEOUT_SECONDS} (one week)",
                )
            if a.max_attempts is not UNSET and not 1 <= a.max_attempts <= MAX_ATTEMPTS:
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].MaxAttempts",
                    f"action {_q(a.name)} has MaxAttempts {a.max_attempts}; "
                    f"it must be from 1 to {MAX_ATTEMPTS}",
                )
            selector = a.selector is UNSET or self.check_selector(i, a)
            selector_ok.append(selector)
            if interaction == PULL and gating and selector and a.step in step_actions:
                waiting.setdefault(a.step, []).append(i)
            held = not (a.hold is UNSET and a.restart is UNSET)
            if held and not gating:
                field = "Hold" if a.hold is not UNSET else "Restart"
                self.error(
                    "SFC025",
                    f"$.Actions[{i}].{field}",
                    f"action {_q(a.name)} has qualifier {qualifier} and a {field} command; "
                    "equipment hold (Hold and Restart) is for N actions only",
                )
            equipment_ok.append(held and self.check_equipment(i, a))
        self.check_resets()

    def check_duration(self, i: int, a: Action, qualifier: str) -> None:
        """SFC023: DurationSeconds is T of L, D, SD, DS and SL, and of no other qualifier."""
        if qualifier in TIMED and a.duration_seconds is UNSET:
            self.error(
                "SFC023",
                f"$.Actions[{i}].Qualifier",
                f"action {_q(a.name)} has qualifier {qualifier} and no DurationSeconds; "
                f"{qualifier} needs its time T: add DurationSeconds",
            )
        elif qualifier not in TIMED and a.duration_seconds is not UNSET:
            self.error(
                "SFC023",
                f"$.Actions[{i}].DurationSeconds",
                f"action {_q(a.name)} has qualifier {qualifier} and DurationSeconds; only "
                "L, D, SD, DS and SL have a time: remove it, or use a timed qualifier",
            )

    def check_reset_block(self, i: int, a: Action) -> None:
        """SFC026: an R block is `{"Name", "Step", "Qualifier": "R"}` and nothing more."""
        extra = [
            field
            for field, value in (
                ("Interaction", a.interaction),
                ("TypeId", a.type_id),
                ("TimeoutSeconds", a.timeout_seconds),
                ("MaxAttempts", a.max_attempts),
                ("Parameters", a.parameters),
                ("Selector", a.selector),
                ("Hold", a.hold),
                ("Restart", a.restart),
                ("DurationSeconds", a.duration_seconds),
            )
            if value is not UNSET
        ]
        if extra:
            self.error(
                "SFC026",
                f"$.Actions[{i}].{extra[0]}",
                f"the R block of action {_q(a.name)} has {', '.join(extra)}; an R block has "
                "only Name, Step and Qualifier: it resets the action that Name defines elsewhere",
            )
        if a.step in self.step_at:
            self.resets.setdefault(a.step, []).append(i)

    def check_resets(self) -> None:
        """SFC021, SFC022, SFC002: each R names one stored action of another step, once a step."""
        names = self.defined
        for step, blocks in self.resets.items():
            seen: dict[str, int] = {}
            for i in blocks:
                a = self.actions[i]
                path = f"$.Actions[{i}].Name"
                if a.name in seen:
                    self.error(
                        "SFC002",
                        path,
                        f"step {_q(step)} resets action {_q(a.name)} twice "
                        f"(also at $.Actions[{seen[a.name]}]); one R block is enough",
                    )
                    continue
                seen[a.name] = i
                target = names.get(a.name)
                if target is None:
                    self.error(
                        "SFC021",
                        path,
                        f"the R block in step {_q(step)} resets action {_q(a.name)}, which no "
                        "block defines" + self.did_you_mean(a.name, names),
                    )
                    continue
                stored = self.actions[target]
                if stored.qualifier not in STORED:
                    self.error(
                        "SFC021",
                        path,
                        f"the R block in step {_q(step)} resets action {_q(a.name)}, which has "
                        f"qualifier {stored.qualifier} ($.Actions[{target}]); R resets only "
                        "stored actions (S, SD, DS, SL)",
                    )
                elif stored.step == step:
                    self.error(
                        "SFC022",
                        path,
                        f"step {_q(step)} both starts ({stored.qualifier}, $.Actions[{target}]) "
                        f"and resets action {_q(a.name)}; reset it in a later step",
                    )

    def check_type_id(self, path: str, owner: str, type_id: str) -> None:
        """SFC009: a type id that no command or event can carry (empty, or with white space)."""
        if type_id.strip() == "":
            self.error(
                "SFC009", path, f"{owner} has an empty TypeId; name the command or event type"
            )
        elif unsafe_char(type_id) is not None or any(c.isspace() for c in type_id):
            self.error(
                "SFC009",
                path,
                f"{owner} has TypeId {_q(type_id)} with white space or a control character; "
                "a type id is one word such as com.example.station.run.v1",
            )

    def unknown_step(self, i: int, a: Action) -> None:
        if a.step in self.div_at:
            self.error(
                "SFC003",
                f"$.Actions[{i}].Step",
                f"action {_q(a.name)} belongs to {_q(a.step)}, which is a divergence, not a step",
            )
        else:
            self.error(
                "SFC003",
                f"$.Actions[{i}].Step",
                f"action {_q(a.name)} belongs to step {_q(a.step)}, which does not exist"
                + self.did_you_mean(a.step, self.step_at),
            )

    def check_selector(self, i: int, a: Action) -> bool:
        if a.selector is UNSET:
            return True
        if a.interaction == PUSH:
            self.error(
                "SFC009",
                f"$.Actions[{i}].Selector",
                f"action {_q(a.name)} is a push command and has a Selector; "
                "only pull events select the event they wait for",
            )
            return False
        ok = True
        for field, value in (
            ("Subject", a.selector.subject),
            ("CorrelationId", a.selector.correlation_id),
        ):
            if value is UNSET:
                continue
            if value == "":
                ok = False
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].Selector.{field}",
                    f"action {_q(a.name)} has an empty Selector {field}; "
                    "leave the field out to accept any",
                )
                continue
            others = [p for p in _PLACEHOLDER.findall(value) if p != JOB_ID] if "{" in value else []
            if others:
                ok = False
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].Selector.{field}",
                    f"action {_q(a.name)} has Selector {field} {_q(value)} with the placeholder "
                    f"{others[0]}; the only placeholder is {JOB_ID}",
                )
        return ok

    def check_equipment(self, i: int, a: Action) -> bool:
        hold, restart = a.hold, a.restart
        if hold is UNSET and restart is UNSET:
            return False
        if a.interaction == PULL:
            for field in ("Hold", "Restart"):
                if (hold if field == "Hold" else restart) is not UNSET:
                    self.error(
                        "SFC019",
                        f"$.Actions[{i}].{field}",
                        f"action {_q(a.name)} waits for an event and has a {field} command; "
                        "only push commands can be held and restarted",
                    )
            return False
        if a.interaction != PUSH:
            return False
        ok = True
        if restart is UNSET:
            ok = False
            self.error(
                "SFC019",
                f"$.Actions[{i}].Restart",
                f"action {_q(a.name)} has a Hold command but no Restart command; "
                "declare both or neither",
            )
        if hold is UNSET:
            ok = False
            self.error(
                "SFC019",
                f"$.Actions[{i}].Hold",
                f"action {_q(a.name)} has a Restart command but no Hold command; "
                "declare both or neither",
            )
        for field, cmd in (("Hold", hold), ("Restart", restart)):
            if not isinstance(cmd, EquipmentCommand):
                continue
            if cmd.type_id is UNSET or cmd.type_id.strip() == "":
                ok = False
                self.error(
                    "SFC019",
                    f"$.Actions[{i}].{field}.TypeId",
                    f"the {field} command of action {_q(a.name)} has no TypeId",
                )
            elif any(c.isspace() or unsafe_char(c) for c in cmd.type_id):
                ok = False
                self.check_type_id(
                    f"$.Actions[{i}].{field}.TypeId",
                    f"the {field} command of action {_q(a.name)}",
                    cmd.type_id,
                )
            if cmd.timeout_seconds is UNSET or cmd.timeout_seconds <= 0:
                ok = False
                self.error(
                    "SFC019",
                    f"$.Actions[{i}].{field}.TimeoutSeconds",
                    f"the {field} command of action {_q(a.name)} needs TimeoutSeconds above zero",
                )
            elif cmd.timeout_seconds > MAX_TIMEOUT_SECONDS:
                ok = False
                self.error(
                    "SFC009",
                    f"$.Actions[{i}].{field}.TimeoutSeconds",
                    f"the {field} command of action {_q(a.name)} has TimeoutSeconds "
                    f"{cmd.timeout_seconds}; it must be from 1 to {MAX_TIMEOUT_SECONDS} (one week)",
                )
        return ok

    # -- SFC004, SFC003, SFC005 on each divergence

    def check_divergences(self) -> None:
        for k, d in enumerate(self.divergences):
            name = _q(d.name)
            usable = self.div_at[d.name] == k and d.name not in self.ambiguous
            if d.type not in (SIMULTANEOUS, SELECTION):
                usable = False
                self.error(
                    "SFC004",
                    f"$.Branches[{k}].Type",
                    f"divergence {name} has type {_q(d.type)}; "
                    f"it must be {SIMULTANEOUS} or {SELECTION}",
                )
            if not d.branches:
                usable = False
                self.error(
                    "SFC004", f"$.Branches[{k}].Branches", f"divergence {name} has no sequences"
                )
            for s, seq in enumerate(d.branches):
                if not seq:
                    usable = False
                    self.error(
                        "SFC004",
                        f"$.Branches[{k}].Branches[{s}]",
                        f"divergence {name} has an empty sequence; a sequence lists at least one step",
                    )
                for p, step in enumerate(seq):
                    path = f"$.Branches[{k}].Branches[{s}][{p}]"
                    if step not in self.step_at:
                        usable = False
                        if step in self.div_at:
                            self.error(
                                "SFC003",
                                path,
                                f"a sequence of divergence {name} lists {_q(step)}, which is a "
                                "divergence; a sequence lists steps, divergences do not nest",
                            )
                        else:
                            self.error(
                                "SFC003",
                                path,
                                f"a sequence of divergence {name} lists step {_q(step)}, "
                                "which does not exist" + self.did_you_mean(step, self.step_at),
                            )
                    elif step in self.position:
                        usable = False
                        k0, s0, p0 = self.position[step]
                        where = (
                            f"already in its sequence {s0 + 1}"
                            if k0 == k
                            else "already in a sequence of divergence "
                            f"{_q(self.divergences[k0].name)}"
                        )
                        self.error(
                            "SFC005",
                            path,
                            f"step {_q(step)} is in a sequence of divergence {name} and {where} "
                            f"($.Branches[{k0}].Branches[{s0}][{p0}]); a step belongs to one "
                            "sequence only",
                        )
                    else:
                        self.position[step] = (k, s, p)
            self.div_usable.append(usable)

    # -- SFC003, SFC006 on each transition

    def check_transitions(self) -> None:
        kind = self.kind
        position = self.position
        div_at = self.div_at
        usable = self.div_usable
        src_ok, tgt_kind = self.src_ok, self.tgt_kind
        entry_of, into_sequence = self.entry_of, self.into_sequence
        for j, t in enumerate(self.transitions):
            source, target = t.source, t.target
            src = kind.get(source)
            tgt = kind.get(target)
            if src is None:
                self.error(
                    "SFC003",
                    f"$.Transitions[{j}].Source",
                    f"transition {_q(f'{source} -> {target}')} leaves {_q(source)}, "
                    "which is neither a step nor a divergence" + self.did_you_mean(source, kind),
                )
            if tgt is None:
                self.error(
                    "SFC003",
                    f"$.Transitions[{j}].Target",
                    f"transition {_q(f'{source} -> {target}')} targets {_q(target)}, "
                    "which is neither a step nor a divergence" + self.did_you_mean(target, kind),
                )
            self.check_condition(j, source, target, t.condition)
            ok = src == STEP or (src == DIVERGENCE and usable[div_at[source]])
            if src == STEP and source in position:
                ok = False
                self.leaves_sequence(j, source, target)
            inside = tgt == STEP and target in position
            src_ok.append(ok)
            tgt_kind.append(tgt)
            entry_of.append(self.enters_sequence(j, source, target, src) if inside else -1)
            into_sequence.append(inside)

    def check_condition(self, j: int, source: str, target: str, condition: str) -> None:
        """SFC009: a condition no outcome can ever equal.

        A condition is `"true"` (the default) or the name of an outcome; outcomes are single
        words of at most OUTCOME_LIMIT characters, compared exactly. IEC structured text
        writes TRUE, so `"TRUE"` and `"True"` get a hint, and so do look-alikes of the
        core's own outcomes (`"Error"`, `"Timeout"`, `"timed_out"`).
        """
        path = f"$.Transitions[{j}].Condition"
        label = _q(f"{source} -> {target}")
        problem = None
        reserved = RESERVED_LOOKALIKES.get(condition.lower().replace("_", "").replace("-", ""))
        if condition.strip() == "":
            problem = 'an empty condition; write "true" for the default, or an outcome name'
        elif condition != TRUE and condition.lower() == TRUE:
            problem = (
                f'the condition {_q(condition)}; the default condition is "true", '
                "in lower case (conditions are compared exactly)"
            )
        elif reserved is not None and condition != reserved:
            problem = (
                f"the condition {_q(condition)}; did you mean {_q(reserved)}? The outcomes "
                'the engine gives itself are "timeout" (attempts used up) and "error" (a '
                "failure reported), in lower case (conditions are compared exactly)"
            )
        elif unsafe_char(condition) is not None or any(c.isspace() for c in condition):
            problem = (
                f"the condition {_q(condition)}, with white space or a control character; "
                "an outcome is one word, so it could never match"
            )
        elif len(condition) > OUTCOME_LIMIT:
            problem = (
                f"a condition of {len(condition)} characters; an outcome has at most "
                f"{OUTCOME_LIMIT}, so it could never match"
            )
        if problem is not None:
            self.error("SFC009", path, f"transition {label} has {problem}")

    def leaves_sequence(self, j: int, source: str, target: str) -> None:
        k = self.position[source][0]
        self.error(
            "SFC006",
            f"$.Transitions[{j}].Source",
            f"transition {_q(f'{source} -> {target}')} leaves step {_q(source)}, which is "
            f"inside a sequence of divergence {_q(self.divergences[k].name)}; steps in a "
            "sequence follow each other, and only the divergence has transitions",
        )

    def enters_sequence(self, j: int, source: str, target: str, src: int | None) -> int:
        """The divergence index if this is a selection transition; else SFC006 and -1."""
        k, _, p = self.position[target]
        d = self.divergences[k]
        label, dname, path = _q(f"{source} -> {target}"), _q(d.name), f"$.Transitions[{j}].Target"
        if d.type not in (SIMULTANEOUS, SELECTION):
            pass  # SFC004 already
        elif p > 0:
            self.error(
                "SFC006",
                path,
                f"transition {label} enters step {_q(target)} in the middle of a sequence of "
                f"divergence {dname}; a sequence is entered through its divergence",
            )
        elif d.type == SIMULTANEOUS:
            self.error(
                "SFC006",
                path,
                f"transition {label} enters step {_q(target)}, the first step of a sequence "
                f"of simultaneous divergence {dname}; target {dname} instead, which starts "
                "all its sequences",
            )
        elif source == d.name and src == DIVERGENCE:
            return k
        elif src in (STEP, DIVERGENCE):
            self.error(
                "SFC006",
                path,
                f"transition {label} enters step {_q(target)}, the first step of a sequence "
                f"of selection divergence {dname}; only the selection transitions of {dname} "
                f"enter it, so target {dname} instead",
            )
        return -1

    def initial_placement(self) -> None:
        for i in self.initials:
            name = self.steps[i].name
            if name in self.position:
                k = self.position[name][0]
                self.error(
                    "SFC006",
                    f"$.Steps[{i}].Initial",
                    f"the initial step {_q(name)} is inside a sequence of divergence "
                    f"{_q(self.divergences[k].name)}; a sequence is entered through its divergence",
                )

    # -- SFC008

    def priorities(self) -> None:
        seen: dict[tuple[str, int], int] = {}
        src_ok = self.src_ok
        for j, t in enumerate(self.transitions):
            if not src_ok[j]:
                continue
            key = (t.source, 0 if t.priority is UNSET else t.priority)
            first = seen.setdefault(key, j)
            if first != j:
                other = self.transitions[first]
                self.error(
                    "SFC008",
                    f"$.Transitions[{j}].Priority",
                    f"transitions {_q(f'{t.source} -> {t.target}')} and "
                    f"{_q(f'{other.source} -> {other.target}')} both leave {_q(t.source)} with "
                    f"priority {key[1]}; the transitions of one source need different priorities",
                )

    # -- SFC007

    def outgoing(self) -> dict[str, list[int]]:
        out: defaultdict[str, list[int]] = defaultdict(list)
        src_ok = self.src_ok
        for j, t in enumerate(self.transitions):
            if src_ok[j]:
                out[t.source].append(j)
        return out

    def defaults(self) -> None:
        out = self.outgoing()
        kind, step_at = self.kind, self.step_at
        for name, js in out.items():
            if len(js) < 2 or kind[name] != STEP:
                continue
            i = step_at[name]
            if not any(self.transitions[j].condition == TRUE for j in js):
                self.error(
                    "SFC007",
                    f"$.Steps[{i}]",
                    f"step {_q(name)} has {len(js)} transitions ({self.conditions(js)}) and none "
                    'is the default "true"; a decision needs one',
                )
        for k, d in enumerate(self.divergences):
            if not self.div_usable[k]:
                continue
            js = out.get(d.name, [])
            if any(self.tgt_kind[j] in (None, AMBIGUOUS) for j in js):
                continue
            exits = [j for j in js if not self.into_sequence[j]]
            if len(exits) >= 2 and not any(self.transitions[j].condition == TRUE for j in exits):
                self.error(
                    "SFC007",
                    f"$.Branches[{k}]",
                    f"divergence {_q(d.name)} has {len(exits)} exit transitions "
                    f'({self.conditions(exits)}) and none is the default "true"; '
                    "a decision needs one",
                )
            if d.type != SELECTION:
                continue
            entries = [j for j in js if self.entry_of[j] == k]
            if not entries:
                self.error(
                    "SFC007",
                    f"$.Branches[{k}]",
                    f"selection divergence {_q(d.name)} has no selection transitions; add one "
                    f"from {_q(d.name)} to the first step of each sequence, one of them "
                    'the default "true"',
                )
                continue
            if not any(self.transitions[j].condition == TRUE for j in entries):
                self.error(
                    "SFC007",
                    f"$.Branches[{k}]",
                    f"selection divergence {_q(d.name)} has no default selection transition; "
                    'one of them must have the condition "true"',
                )
            chosen = {self.transitions[j].target for j in entries}
            for n, seq in enumerate(d.branches):
                if seq[0] not in chosen:
                    self.error(
                        "SFC007",
                        f"$.Branches[{k}].Branches[{n}]",
                        f"the sequence starting at step {_q(seq[0])} of selection divergence "
                        f"{_q(d.name)} has no selection transition, so it is never chosen",
                    )

    def conditions(self, js: list[int]) -> str:
        shown = [
            f"to {_q(self.transitions[j].target)} on {_q(self.transitions[j].condition)}"
            for j in js[:3]
        ]
        return ", ".join(shown) + (f" and {len(js) - 3} more" if len(js) > 3 else "")

    # -- SFC011

    def ambiguity(self) -> None:
        flagged: set[int] = set()
        waiting = self.waiting
        for step, pulls in waiting.items():
            if len(pulls) >= 2:
                self.separate([[i] for i in pulls], flagged, f"in step {_q(step)}")
        for k, d in enumerate(self.divergences):
            if not self.div_usable[k] or d.type != SIMULTANEOUS or len(d.branches) < 2:
                continue
            groups = [[i for step in seq for i in waiting.get(step, ())] for seq in d.branches]
            if sum(1 for g in groups if g) >= 2:
                self.separate(groups, flagged, f"in parallel sequences of divergence {_q(d.name)}")

    def separate(self, groups: list[list[int]], flagged: set[int], where: str) -> None:
        """SFC011 for each action that waits together with an earlier one of another group.

        Two waits of one type are told apart only when one selector field is a literal on
        both and the literals differ; a value with {jobId} matches any job id, so any
        literal. Each action is looked up in four tables of the earlier groups, keyed by
        (type, subject or ANY, correlation id or ANY), so the check stays linear.
        """
        seen: dict[tuple[str, str | None, str | None], int] = {}
        any_subject: dict[tuple[str, str | None], int] = {}
        any_correlation: dict[tuple[str, str | None], int] = {}
        any_type: dict[str, int] = {}
        for group in groups:
            for i in group:
                a, type_id = self.actions[i], self.type_ids[i]
                subj, corr = self.literals(a)
                found: list[int] = []
                if subj is not None and corr is not None:
                    for key in ((subj, corr), (None, corr), (subj, None), (None, None)):
                        if (type_id, *key) in seen:
                            found.append(seen[(type_id, *key)])
                elif subj is None and corr is not None:
                    found += [
                        any_subject[key]
                        for key in ((type_id, corr), (type_id, None))
                        if key in any_subject
                    ]
                elif corr is None and subj is not None:
                    found += [
                        any_correlation[key]
                        for key in ((type_id, subj), (type_id, None))
                        if key in any_correlation
                    ]
                elif type_id in any_type:
                    found.append(any_type[type_id])
                if found and i not in flagged:
                    flagged.add(i)
                    other = self.actions[min(found)]
                    self.error(
                        "SFC011",
                        f"$.Actions[{i}].Selector",
                        f"actions {_q(other.name)} and {_q(a.name)} both wait for event type "
                        f"{_q(type_id)} at the same time ({where}), so one event could "
                        "complete either; give both a Selector whose Subject or CorrelationId "
                        "are two different fixed values (a value with {jobId} tells nothing apart)",
                    )
            for i in group:
                a, type_id = self.actions[i], self.type_ids[i]
                subj, corr = self.literals(a)
                seen.setdefault((type_id, subj, corr), i)
                any_subject.setdefault((type_id, corr), i)
                any_correlation.setdefault((type_id, subj), i)
                any_type.setdefault(type_id, i)

    @staticmethod
    def literals(a: Action) -> tuple[str | None, str | None]:
        """The selector's literal Subject and CorrelationId; None where any value matches."""
        if a.selector is UNSET:
            return None, None
        values = (a.selector.subject, a.selector.correlation_id)
        subj, corr = (None if v is UNSET or JOB_ID in v else v for v in values)
        return subj, corr

    # -- SFC012

    def reachability(self) -> None:
        if not self.initials or any(k is None or k == AMBIGUOUS for k in self.tgt_kind):
            return
        kind = self.kind
        succ: defaultdict[str, list[str]] = defaultdict(list)
        roots: list[str] = []
        for t in self.transitions:
            src = kind.get(t.source)
            if src is None or src == AMBIGUOUS:
                roots.append(t.target)  # the source is refused already; assume it leads here
            else:
                succ[t.source].append(t.target)
        for d in self.divergences:
            succ[d.name].extend(step for seq in d.branches for step in seq)
        for i in self.initials:
            name = self.steps[i].name
            roots.append(name)
            if name in self.position:
                roots.append(self.divergences[self.position[name][0]].name)
        reached = set(roots)
        todo = list(reached)
        while todo:
            for nxt in succ.get(todo.pop(), ()):
                if nxt not in reached:
                    reached.add(nxt)
                    todo.append(nxt)
        start = _q(self.steps[self.initials[0]].name)
        for name, i in self.step_at.items():
            if name not in reached and name not in self.position and name != "":
                self.error(
                    "SFC012",
                    f"$.Steps[{i}]",
                    f"step {_q(name)} cannot be reached from the initial step {start}; "
                    "no transition leads to it",
                )
        for name, k in self.div_at.items():
            if name not in reached and name != "":
                d = self.divergences[k]
                steps = [step for seq in d.branches for step in seq]
                self.error(
                    "SFC012",
                    f"$.Branches[{k}]",
                    f"divergence {_q(name)} cannot be reached from the initial step {start}; "
                    f"no transition leads to it, so its steps ({_names(steps)}) never run",
                )

    # -- SFC013

    def loops(self) -> None:
        """A loop of nodes that all pass through at once would run without end."""
        kind, position, step_actions = self.kind, self.position, self.step_actions
        # A step waits for its gating actions, and for its MinSeconds; nothing else holds it.
        waits = {
            name
            for name, acts in step_actions.items()
            if acts or self.steps[self.step_at[name]].min_seconds is not UNSET
        }
        free = {
            name
            for name in step_actions
            if name not in waits and kind[name] == STEP and name not in position
        }
        for k, d in enumerate(self.divergences):
            if self.div_usable[k]:
                seqs = [all(s not in waits for s in seq) for seq in d.branches]
                if any(seqs) if d.type == SELECTION else all(seqs):
                    free.add(d.name)
        if not free:
            return
        transitions, src_ok, into = self.transitions, self.src_ok, self.into_sequence
        edges: dict[str, list[int]] = defaultdict(list)
        indegree: dict[str, int] = {}
        for j, t in enumerate(transitions):
            if t.source in free and t.target in free and src_ok[j] and not into[j]:
                edges[t.source].append(j)
                indegree[t.target] = indegree.get(t.target, 0) + 1
        # Peel off the nodes nothing leads into; what is left lies on a loop or behind one.
        todo = [n for n in edges if n not in indegree]
        while todo:
            for j in edges.pop(todo.pop(), ()):
                target = transitions[j].target
                indegree[target] -= 1
                if indegree[target] == 0:
                    todo.append(target)
        targets = {n: [self.transitions[j].target for j in out] for n, out in edges.items()}
        for component in cycles(targets):
            members = set(component)
            closing = min(
                j
                for n in component
                for j in edges.get(n, ())
                if self.transitions[j].target in members
            )
            order = sorted(
                component,
                key=lambda n: (0, self.step_at[n]) if n in self.step_at else (1, self.div_at[n]),
            )
            self.error(
                "SFC013",
                f"$.Transitions[{closing}]",
                f"the loop through {_names(order)} has nothing to wait for: none of its steps has "
                + ("an N action or MinSeconds" if self.qualified else "an action")
                + " (a selection divergence passes through when one of its sequences "
                "has none), so the chart would run around it without end",
            )

    # -- SFC014, SFC015, SFC016, SFC020

    def station(self, caps: Capabilities) -> None:
        declared: dict[tuple[str, str], set[str]] = {}
        for tc in caps.types:
            names = declared.setdefault((tc.type_id, tc.kind), set())
            if tc.outcomes is not UNSET:
                names.update(tc.outcomes)
        features = caps.features
        enabled = {
            "push": features is UNSET or features.push is not False,
            "pull": features is UNSET or features.pull is not False,
            SIMULTANEOUS: features is UNSET or features.simultaneous is not False,
            SELECTION: features is UNSET or features.selection is not False,
            "equipmentHold": features is UNSET or features.equipment_hold is not False,
            "pulseActions": features is UNSET or features.pulse_actions is not False,
            "timedActions": features is UNSET or features.timed_actions is not False,
            "storedActions": features is UNSET or features.stored_actions is not False,
        }
        if self.qualified:
            self.qualifier_features(enabled)
        for k, d in enumerate(self.divergences):
            if d.type in (SIMULTANEOUS, SELECTION) and not enabled[d.type]:
                self.error(
                    "SFC015",
                    f"$.Branches[{k}].Type",
                    f"divergence {_q(d.name)} is a {d.type} divergence, which this station "
                    "does not support",
                )

        outcomes: list[set[str] | None] = []
        """Per action: the outcomes it can give, or None when the station refuses it."""
        for i, a in enumerate(self.actions):
            outcomes.append(self.station_action(i, a, declared, enabled))

        allowed: dict[tuple[str, int], set[str] | None] = {}
        for j, t in enumerate(self.transitions):
            if t.condition == TRUE or not self.src_ok[j]:
                continue
            entry = self.entry_of[j]
            key = (t.source, entry)
            if key not in allowed:
                allowed[key] = self.possible(t.source, entry, outcomes)
            possible = allowed[key]
            if possible is None or t.condition in possible:
                continue
            where = (
                f"step {_q(t.source)}"
                if entry < 0 and self.resolve(t.source) == STEP
                else f"divergence {_q(t.source)}"
                if entry < 0
                else f"the steps that lead into selection divergence {_q(t.source)}"
            )
            self.error(
                "SFC016",
                f"$.Transitions[{j}].Condition",
                f"transition {_q(f'{t.source} -> {t.target}')} waits for outcome "
                f"{_q(t.condition)}, which no action type of {where} declares "
                f"(possible: {', '.join(sorted(possible)) or 'none, only true can fire'})"
                + self.not_waited_for(t.source, t.condition, outcomes),
            )

    def not_waited_for(self, step: str, outcome: str, outcomes: list[set[str] | None]) -> str:
        """`; "blow" (L) declares it, ...` when a non-gating action of the step has the outcome:
        the reader wrote the condition for it, and needs to hear why it cannot work."""
        if not self.qualified:
            return ""
        if self._not_gating is None:  # once, so that many SFC016s stay linear
            self._not_gating = {}
            for i, a in enumerate(self.actions):
                if not self.gating[i]:
                    self._not_gating.setdefault(a.step, []).append(i)
        for i in self._not_gating.get(step, ()):
            a, own = self.actions[i], outcomes[i]
            if own is not None and outcome in own:
                return (
                    f"; action {_q(a.name)} ({a.qualifier}) declares it, but it is not waited "
                    "for: only the outcomes of N actions decide a transition"
                )
        return ""

    def qualifier_features(self, enabled: dict[str, bool]) -> None:
        """SFC015 for each action block whose qualifier needs a feature the station lacks."""
        for i, a in enumerate(self.actions):
            feature = QUALIFIER_FEATURES.get(a.qualifier)
            if feature is not None and not enabled[feature[0]]:
                self.error(
                    "SFC015",
                    f"$.Actions[{i}].Qualifier",
                    f"action {_q(a.name)} has qualifier {a.qualifier} ({feature[1]}), which this "
                    f"station does not support (its capabilities set {feature[0]} false)",
                )

    def station_action(
        self, i: int, a: Action, declared: dict[tuple[str, str], set[str]], enabled: dict[str, bool]
    ) -> set[str] | None:
        """SFC014, SFC015 and SFC020 of one action; its possible outcomes, None if unknown."""
        if not self.interaction_ok[i]:
            return None
        kind = "push" if a.interaction == PUSH else "pull"
        if not enabled[kind]:
            self.error(
                "SFC015",
                f"$.Actions[{i}].Interaction",
                f"action {_q(a.name)} is a {'push command' if kind == 'push' else 'pull event'}, "
                "which this station does not support",
            )
            return None
        result: set[str] | None = None
        own = declared.get((self.type_ids[i], kind))
        if own is None:
            self.undeclared(f"$.Actions[{i}].TypeId", a.name, self.type_ids[i], kind, declared)
        else:
            result = own | set(RESERVED_OUTCOMES)
            if kind == "push":
                result.add(DEFAULT_OUTCOME)
        hold, restart = a.hold, a.restart
        if kind != "push" or (hold is UNSET and restart is UNSET):
            return result
        if not enabled["equipmentHold"]:
            self.error(
                "SFC015",
                f"$.Actions[{i}].{'Hold' if hold is not UNSET else 'Restart'}",
                f"action {_q(a.name)} declares equipment hold (Hold and Restart), which this "
                "station does not support",
            )
            return result
        if not (
            self.equipment_ok[i]
            and isinstance(hold, EquipmentCommand)
            and isinstance(restart, EquipmentCommand)
            and isinstance(hold.type_id, str)
            and isinstance(restart.type_id, str)
        ):
            return result  # SFC019 already
        held = declared.get((hold.type_id, "hold"))
        if held is None:
            self.undeclared(f"$.Actions[{i}].Hold.TypeId", a.name, hold.type_id, "hold", declared)
        elif HELD not in held:
            self.error(
                "SFC020",
                f"$.Actions[{i}].Hold.TypeId",
                f"the Hold command type {_q(hold.type_id)} of action {_q(a.name)} does not "
                f"declare the outcome {_q(HELD)}, so the equipment could never confirm a hold",
            )
        restarted = declared.get((restart.type_id, "restart"))
        if restarted is None:
            self.undeclared(
                f"$.Actions[{i}].Restart.TypeId", a.name, restart.type_id, "restart", declared
            )
            return None
        return None if result is None else result | restarted

    def undeclared(
        self,
        path: str,
        action: str,
        type_id: str,
        kind: str,
        declared: dict[tuple[str, str], set[str]],
    ) -> None:
        what = {
            "push": "sends command type",
            "pull": "waits for event type",
            "hold": "holds with command type",
            "restart": "restarts with command type",
        }[kind]
        others = sorted(k for k in ("push", "pull", "hold", "restart") if (type_id, k) in declared)
        also = f" (the station has it as {', '.join(others)})" if others else ""
        self.error(
            "SFC014",
            path,
            f"action {_q(action)} {what} {_q(type_id)}, which no processor of this station "
            f"declares as a {kind} type{also}",
        )

    def possible(self, source: str, entry: int, outcomes: list[set[str] | None]) -> set[str] | None:
        """The outcomes a transition of `source` can see; None when they cannot be known."""
        if entry >= 0:
            involved: list[int] = []
            feeders = self.incoming().get(source, [])
            if not feeders:
                return None  # unreachable: SFC012
            for j in feeders:
                involved += self.involved(self.transitions[j].source)
        else:
            involved = self.involved(source)
        # Without an N action nothing can time out or fail: only "true" can fire.
        result = set(RESERVED_OUTCOMES) if involved else set()
        for i in involved:
            own = outcomes[i]
            if own is None:
                return None
            result |= own
        return result

    def incoming(self) -> dict[str, list[int]]:
        """Transitions into each node that leave a resolved node, computed once."""
        if self._incoming is None:
            self._incoming = {}
            for j, t in enumerate(self.transitions):
                if self.src_ok[j] and not self.into_sequence[j]:
                    self._incoming.setdefault(t.target, []).append(j)
        return self._incoming

    def involved(self, node: str) -> list[int]:
        if self.resolve(node) == STEP:
            return self.step_actions[node]
        d = self.divergences[self.div_at[node]]
        return [i for seq in d.branches for step in seq for i in self.step_actions[step]]
