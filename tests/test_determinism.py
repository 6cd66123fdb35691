"""The core gives the same bytes in every process, whatever PYTHONHASHSEED is.

A comparison of two calls in one process cannot see an order that depends on the hash seed
(iterating a set of names, say): both calls share the seed. Here child processes with
different seeds build, render, explain, run and replay every example and every recipe of the
test corpus, and print a digest of each output; the digests must agree item by item.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from sfc.builder import build
from sfc.codec import encode
from sfc.evolution import evolve, new_state
from sfc.explain import explain
from sfc.render import FORMATS, render
from sfc.simulation import Simulation, load_script
from sfc.transcript import from_json, lines, to_json

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ("0", "1", "4242")


def _digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:16]


def digests() -> dict[str, str]:
    """Every output of the core over the examples and the recipe corpus, as digests by name."""
    out: dict[str, str] = {}
    for recipe in sorted((ROOT / "tests" / "data").glob("recipe_v*/*/*.json")):
        result = build(recipe.read_bytes())
        name = recipe.relative_to(ROOT).as_posix()
        out[f"build {name}"] = _digest(repr([(e.code, e.path, e.message) for e in result.errors]))
    for recipe in sorted((ROOT / "examples").glob("*/recipe.json")):
        example = recipe.parent.name
        graph = build(recipe.read_bytes()).graph
        assert graph is not None, example
        out[f"explain {example}"] = _digest(explain(graph))
        for fmt in FORMATS:
            out[f"render {fmt} {example}"] = _digest(render(graph, None, fmt))
        for script in sorted(recipe.parent.glob("*.script.json")):
            sim = Simulation(graph, load_script(script.read_bytes(), graph))
            result = sim.run()
            key = f"{example}.{script.name.removesuffix('.script.json')}"
            out[f"dryrun {key}"] = _digest(to_json(result))
            out[f"transcript {key}"] = _digest(
                "\n".join(f"{x.tone} {x.text}" for x in lines(result, stalled=sim.stalled))
            )
            out[f"state {key}"] = _digest(encode(sim.state))
            out[f"explain {key}"] = _digest(explain(graph, sim.state))
            for fmt in FORMATS:
                out[f"render {fmt} {key}"] = _digest(render(graph, sim.state, fmt))
    for frozen in sorted((ROOT / "tests" / "data" / "frozen_transcripts").glob("*.json")):
        example = frozen.name.split(".")[0]
        graph = build((ROOT / "examples" / example / "recipe.json").read_bytes()).graph
        assert graph is not None, example
        state = new_state(graph, "job-1", "sim")
        replayed = []
        for entry in from_json(frozen.read_bytes()).transcript:
            step = evolve(graph, state, None, entry.event)
            replayed.append(encode(step))
            state = step.state
        out[f"replay {frozen.name}"] = _digest(b"\n".join(replayed))
    return out


def _child(seed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    code = "import json; from tests.test_determinism import digests; print(json.dumps(digests()))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_every_output_is_the_same_under_every_hash_seed() -> None:
    runs = {seed: _child(seed) for seed in SEEDS}
    first = runs[SEEDS[0]]
    assert len(first) > 100, sorted(first)  # the corpus and every example were covered
    for seed, other in runs.items():
        assert other.keys() == first.keys(), seed
        differ = sorted(k for k in first if first[k] != other[k])
        assert not differ, f"PYTHONHASHSEED={seed} gives other bytes for {differ}"
