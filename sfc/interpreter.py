"""Recipe interpreters: the dataschema URI of a work master picks the one that builds it.

The SFC interpreter is the first implementation. It is registered once per recipe format it
reads: v1.2.0; v1.1.0 (the same chart with qualifier N only, and no DurationSeconds or
MinSeconds); and v1.0.0 (v1.1.0 without Hold and Restart). A document that declares a field
its format lacks is refused with SFC000 naming the field. All build the same Graph.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from generated.capabilities_v1_1 import Capabilities
from sfc.builder import (
    FORMATS,
    RECIPE_V1_0_0,
    RECIPE_V1_1_0,
    RECIPE_V1_2_0,
    BuildResult,
    decode_and_check,
)


class RecipeInterpreter(Protocol):
    """Builds the recipes of the dataschemas it accepts (evolve joins later)."""

    @property
    def dataschemas(self) -> tuple[str, ...]:
        """The dataschema URIs this interpreter accepts."""
        ...

    def build(self, recipe_json: bytes, capabilities: Capabilities | None = None) -> BuildResult:
        """A graph, or every build error; never raises for any bytes."""
        ...


class SfcInterpreter:
    """The IEC 61131-3 SFC interpreter for one recipe format."""

    def __init__(self, dataschema: str, version: str, decoder: msgspec.json.Decoder[Any] | None):
        self._dataschema = dataschema
        self._version = version
        self._decoder = decoder
        """Decodes the format first when it is older than v1.2.0; None for v1.2.0 itself."""

    @property
    def dataschemas(self) -> tuple[str, ...]:
        return (self._dataschema,)

    def build(self, recipe_json: bytes, capabilities: Capabilities | None = None) -> BuildResult:
        return decode_and_check(
            recipe_json, self._decoder, self._dataschema, capabilities, self._version
        )

    def __repr__(self) -> str:
        return f"SfcInterpreter({self._dataschema!r})"


SFC_V1_0_0 = SfcInterpreter(RECIPE_V1_0_0, *FORMATS[RECIPE_V1_0_0])
SFC_V1_1_0 = SfcInterpreter(RECIPE_V1_1_0, *FORMATS[RECIPE_V1_1_0])
SFC_V1_2_0 = SfcInterpreter(RECIPE_V1_2_0, *FORMATS[RECIPE_V1_2_0])

_REGISTRY: dict[str, RecipeInterpreter] = {
    uri: interpreter
    for interpreter in (SFC_V1_0_0, SFC_V1_1_0, SFC_V1_2_0)
    for uri in interpreter.dataschemas
}


def interpreter_for(dataschema: str) -> RecipeInterpreter | None:
    """The interpreter registered for a dataschema URI, or None."""
    return _REGISTRY.get(dataschema)


def known_dataschemas() -> tuple[str, ...]:
    return tuple(_REGISTRY)
