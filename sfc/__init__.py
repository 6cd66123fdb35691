"""The pure SFC core: build a recipe into a graph, evolve a job's state."""

from sfc.build import RECIPE_V1_0_0, RECIPE_V1_1_0, BuildError, BuildResult, build

__all__ = ["RECIPE_V1_0_0", "RECIPE_V1_1_0", "BuildError", "BuildResult", "build"]
