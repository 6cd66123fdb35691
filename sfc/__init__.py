"""The pure SFC core: build a recipe into a graph, evolve a job's state.

    result = build(recipe_json)                  # validate once, reuse result.graph
    state = new_state(result.graph, "job-7", "plant.line1")
    step = evolve(result.graph, state, None, Start(at=now_ms))
    # store step.state, apply step.commands in order, map step.continuation to the job

No clock, no I/O, no randomness: time arrives only as `event.at` (epoch milliseconds).
A stored state of an older format is read with `migrate(document, graph)`.
"""

from sfc.builder import (
    RECIPE_V1_0_0,
    RECIPE_V1_1_0,
    RECIPE_V1_2_0,
    BuildError,
    BuildResult,
    build,
)
from sfc.evolution import evolve, new_state, next_deadline
from sfc.graph import Graph
from sfc.migrate import MigrationError, migrate

__all__ = [
    "RECIPE_V1_0_0",
    "RECIPE_V1_1_0",
    "RECIPE_V1_2_0",
    "BuildError",
    "BuildResult",
    "Graph",
    "MigrationError",
    "build",
    "evolve",
    "migrate",
    "new_state",
    "next_deadline",
]
