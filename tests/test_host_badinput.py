"""Bad input on a real server: entry points refuse what a worker would bury and write
nothing; data never reaches Lua source; a worker survives any stream."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from host import jobs, keys
from host.entries import ENTRY_LIMIT, EntryError, decode_equipment, decode_history
from host.equipment import Answer, publish_event, respond
from host.joborder import ReturnStatus
from host.jobs import PARAMETERS_LIMIT
from sfc.codec import state_decoder
from tests.hostkit import Host, linear_recipe

ODD = "quote \" apostrophe ' newline \n ]] [[ ]=] NUL \x00 tab \t emoji \U0001f529 end"


def _keys(host: Host, scope: str) -> set[bytes]:
    return set(host.client().scan_iter(match=f"*{{{scope}}}*"))


def _lengths(host: Host, scope: str) -> dict[bytes, int]:
    r = host.client()
    return {k: r.xlen(k) for k in _keys(host, scope) if r.type(k) == b"stream"}


@pytest.mark.parametrize(
    ("what", "kwargs"),
    [
        ("an outcome over 256 characters", {"outcome": "x" * 257}),
        ("an error over 64 KiB", {"error": "e" * 65537}),
        ("an outcome and an error", {"outcome": "ok", "error": "jammed"}),
        ("a round of 0", {"outcome": "ok", "round": 0}),
        ("a command id over 512 characters", {"outcome": "ok", "command_id": "c" * 513}),
    ],
)
def test_respond_refuses_what_a_worker_would_bury_and_writes_nothing(
    host: Host, what: str, kwargs: dict[str, Any]
) -> None:
    scope = host.scope("respond")
    host.submit(scope, linear_recipe(1), job_id="j", start=False)
    before = _lengths(host, scope)
    with pytest.raises(ValueError) as refused:
        respond(host.store(), scope, "j", "a1", **kwargs)
    assert str(refused.value), what
    assert _lengths(host, scope) == before


@pytest.mark.parametrize("job", ["", "a{b}", "tab\tjob", "nul\x00", "x" * 129])
def test_respond_refuses_a_job_id_that_cannot_be_a_key(host: Host, job: str) -> None:
    scope = host.scope("respondid")
    host.store().create_group(scope)
    with pytest.raises(ValueError):
        respond(host.store(), scope, job, "a1", outcome="ok")
    assert host.client().xlen(keys.work(scope)) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"subject": "s" * 1025},
        {"correlation_id": "c" * 1025},
        {"outcome": "o" * 257},
        {"source": "s" * 257, "id": "1"},
        {"source": "only-source"},
    ],
)
def test_publish_event_refuses_oversize_fields_and_writes_nothing(
    host: Host, kwargs: dict[str, Any]
) -> None:
    scope = host.scope("event")
    host.store().create_group(scope)
    # a job waits for the type, so a good event would be queued
    host.client().zadd(keys.waits(scope, "t.v1"), {'["j",null,null]': 1})
    with pytest.raises(ValueError):
        publish_event(host.store(), scope, "t.v1", **kwargs)
    assert host.client().xlen(keys.work(scope)) == 0
    assert host.client().hget(keys.settings(scope), "eventsUnmatched") is None


def test_submit_refuses_odd_ids_scopes_and_oversize_documents_and_writes_nothing(
    host: Host,
) -> None:
    scope = host.scope("submit")
    store = host.store()
    cases = [
        ({"job_id": "a{b}"}, scope, linear_recipe(1), ReturnStatus.INVALID_REQUEST),
        ({"job_id": "line\nfeed"}, scope, linear_recipe(1), ReturnStatus.INVALID_REQUEST),
        ({"job_id": "x" * 129}, scope, linear_recipe(1), ReturnStatus.INVALID_REQUEST),
        ({"job_id": "j"}, "sc{ope}", linear_recipe(1), ReturnStatus.INVALID_REQUEST),
        ({"job_id": "j"}, "", linear_recipe(1), ReturnStatus.INVALID_REQUEST),
        ({"job_id": "j"}, scope, b'{"Steps": [', ReturnStatus.UNABLE_TO_ACCEPT),
        ({"job_id": "j"}, scope, b" " * (jobs.RECIPE_LIMIT + 1), ReturnStatus.UNABLE_TO_ACCEPT),
    ]
    big = json.loads(linear_recipe(1))
    big["Actions"][0]["Parameters"] = {"blob": "b" * PARAMETERS_LIMIT}
    cases.append(({"job_id": "j"}, scope, json.dumps(big).encode(), ReturnStatus.UNABLE_TO_ACCEPT))
    for kwargs, in_scope, recipe, status in cases:
        result = jobs.submit(store, in_scope, recipe, **kwargs)
        assert result.status == status, (kwargs, in_scope, result.words())
        assert result.message
    assert _keys(host, scope) == set()
    assert not host.client().sismember(keys.SCOPES, scope)


def test_odd_text_round_trips_byte_for_byte_through_commit_history_and_stream(
    host: Host,
) -> None:
    scope = host.scope("odd")
    recipe = json.loads(linear_recipe(2))
    recipe["Actions"][0]["Parameters"] = {"text": ODD, "big": "p" * (PARAMETERS_LIMIT - 100)}
    text = json.dumps(recipe).encode()
    job = host.submit(scope, text, job_id="odd-job").job
    worker = host.worker([scope])
    odd_outcome = ODD[:200]
    responder = host.responder(
        scope,
        lambda kind, data: (
            Answer(outcome=odd_outcome)
            if data.action_key.endswith(":a1")
            else Answer(error=ODD * 10)
        ),
    )
    host.run([worker], [responder], host.ended(scope, [job], "Aborted"))
    push = next(d for _, k, d in host.equipment(scope) if k == "push")
    assert push.parameters == recipe["Actions"][0]["Parameters"]
    state = state_decoder.decode(host.store().job(scope, job).state)  # type: ignore[union-attr]
    order = host.order(scope, job)
    assert (order.result.ended_by, order.result.fault_code) == ("faulted", "error")
    # the error text went through the answer entry, the commit and the stored state intact
    assert state.actions["a2"].error == ODD * 10
    history = [decode_history(f) for _, f in host.store().history(scope, job, 100)]
    assert any(h.reason == f"a1 answered {odd_outcome}" for h in history), [
        h.reason for h in history
    ]
    # every equipment entry decodes again, parameters included
    for entry_id, f in host.store().equipment_entries(scope):
        decode_equipment(entry_id, f)


def test_an_oversize_entry_in_the_stream_is_buried_with_its_reason(host: Host) -> None:
    scope = host.scope("oversize")
    worker = host.worker([scope])
    r = host.client()
    r.xadd(keys.work(scope), {"v": "1", "kind": "event", "data": b" " * (ENTRY_LIMIT + 1)})
    r.xadd(keys.work(scope), {"v": "1", "kind": "answer",
                              "data": json.dumps({"job": "j", "actionKey": "j:a", "outcome": "o" * 300})})  # fmt: skip
    worker.read_once(block_ms=100)
    reasons = [f[b"reason"].decode() for _, f in host.store().dead(scope)]
    assert len(reasons) == 2
    assert f"at most {ENTRY_LIMIT}" in reasons[0]
    assert "outcome" in reasons[1] and "256" in reasons[1]


FIELD = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"1", b"start", b"answer", b"event", b"tick", b"resume", b"{}", b"null"]),
    st.builds(
        lambda d: json.dumps(d).encode(),
        st.dictionaries(
            st.sampled_from(
                ["job", "actionKey", "typeId", "outcome", "error", "round", "outageMs"]
            ),
            st.one_of(st.text(max_size=20), st.integers(-5, 5), st.none()),
            max_size=4,
        ),
    ),
)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(entries=st.lists(st.dictionaries(st.sampled_from([b"v", b"kind", b"data", b"x"]), FIELD, max_size=4), min_size=1, max_size=8))  # fmt: skip
def test_a_worker_over_any_stream_never_dies_and_buries_every_bad_entry(
    valkey_url: str, entries: list[dict[bytes, bytes]]
) -> None:
    host = Host(valkey_url)
    try:
        scope = host.scope("anything")
        worker = host.worker([scope])
        r = host.client()
        ids = [r.xadd(keys.work(scope), e or {b"x": b""}).decode() for e in entries]  # type: ignore[arg-type]
        for _ in range(3):
            worker.read_once(block_ms=20)
        dead = {f[b"entry"].decode(): f[b"reason"] for _, f in host.store().dead(scope)}
        for entry_id, raw in zip(ids, entries, strict=True):
            try:
                from host.entries import decode_work

                decode_work(entry_id, raw)
            except EntryError:
                assert dead.get(entry_id), entry_id
            else:
                assert entry_id not in dead  # a good entry for a job that is not there
        assert r.xpending(keys.work(scope), keys.GROUP)["pending"] == 0
    finally:
        host.close()
