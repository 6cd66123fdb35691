"""The evaluator keeps decoded states and orders by their bytes (host/apply.py, Decoded):
it never changes what is evaluated, only how often bytes are decoded. And a worker process's
garbage collector (host/worker.py, tune_collector)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from host.apply import Decoded
from tests.hostkit import FAST, Host, linear_recipe


@given(
    limit=st.integers(min_value=1, max_value=4),
    reads=st.lists(st.integers(min_value=0, max_value=6), max_size=40),
)
def test_a_decoded_cache_gives_what_decoding_gives_and_stays_bounded(
    limit: int, reads: list[int]
) -> None:
    decoded: list[bytes] = []

    def decode(raw: bytes) -> dict[str, int]:
        decoded.append(raw)
        return json.loads(raw)  # type: ignore[no-any-return]

    cache = Decoded(decode, limit)
    for n in reads:
        raw = json.dumps({"n": n}).encode()
        assert cache.get(bytes(raw)) == {"n": n}  # an equal copy, not the same object
        assert len(cache.items) <= limit
    # a miss decodes once; the same bytes again while held decode nothing
    assert len(decoded) <= len(reads)
    if reads and limit >= len(set(reads)):
        assert sorted(decoded) == sorted({json.dumps({"n": n}).encode() for n in reads})


def test_the_oldest_decoding_goes_first() -> None:
    cache = Decoded(lambda raw: raw.decode(), 2)
    for raw in (b"a", b"b", b"c"):
        cache.get(raw)
    assert list(cache.items) == [b"b", b"c"]
    assert cache.put(b"d", "d") == b"d" and list(cache.items) == [b"c", b"d"]
    with pytest.raises(ValueError, match="at least 1"):
        Decoded(lambda raw: raw, 0)


def test_a_worker_reuses_the_state_its_commit_wrote_and_decodes_a_moved_job_again(
    host: Host,
) -> None:
    scope = host.scope("decoded")
    jobs = [host.submit(scope, linear_recipe(3), job_id=f"j{i}").job for i in range(3)]
    w = host.worker([scope], replace(FAST, read_count=10))
    misses: list[bytes] = []
    states = w.applier.evaluator.states
    inner = states.decode
    states.decode = lambda raw: misses.append(raw) or inner(raw)  # type: ignore[func-returns-value]
    responder = host.responder(scope)
    host.run([w], [responder], host.ended(scope, jobs))
    assert all(host.order_path(scope, j) == "Ended/Completed" for j in jobs)
    # each job's state was decoded once, at its start: every later load returned the bytes
    # the worker's own last commit had written
    assert len(misses) == len(jobs), misses
    # a state changed by someone else (here: by hand) is decoded afresh
    r = host.client()
    from host import keys

    raw = r.hget(keys.job(scope, "j0"), "state")
    assert isinstance(raw, bytes)
    moved = raw.replace(b'"status":"completed"', b'"status": "completed"')
    assert moved != raw
    assert states.get(moved) == states.get(raw) and len(misses) == len(jobs) + 1


def test_a_worker_process_freezes_its_start_up_and_collects_young_objects_rarely() -> None:
    # in a process of its own: the collector's settings are the process's
    code = (
        "import gc, json\n"
        "from host.worker import tune_collector\n"
        "before = gc.get_threshold()\n"
        "tune_collector()\n"
        "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    before, after, frozen = json.loads(out)
    assert before[0] == 700  # Python's default, which the worker leaves
    assert after == [50_000, before[1], before[2]]
    assert frozen > 10_000  # the modules and classes of host and sfc
