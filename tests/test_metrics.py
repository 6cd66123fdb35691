"""Metrics and logs of `sfc serve` (docs/metrics.md), against the real session server.

One `sfc serve --workers 2 --metrics-port P --log-format json` runs jobs answered by an
in-process responder, with a malformed entry, an answer for no job, an unmatched event and a
job whose equipment fails. The tests scrape `/metrics` over HTTP and find the counters equal
to what happened, the gauges equal to what the server holds, and parse every line that serve
and its workers wrote to stderr as one JSON object.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from host import joborder, keys
from host.apply import decode_order
from host.equipment import Answer, Responder, publish_event, respond
from host.joborder import ReturnStatus
from host.jobs import abort, pause, submit
from host.logs import JsonFormatter
from host.store import Store
from tests.clikit import Background, cli_env, processes
from tests.hostkit import Host, linear_recipe, new_scope, wait_for

JOBS = 6
STEPS = 3
FAULTY = "faulty"
"""The job whose equipment answers its first command with an error (the job faults)."""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/plain")
        text = r.read().decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, frozenset(s.labels.items())] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@dataclass
class Run:
    scope: str
    port: int
    serve: Background
    tmp: Path
    samples: Samples
    during: list[str]
    """The multiprocess files while serve ran."""
    stderr: str


def _reply(kind: str, data: Any) -> Answer:
    if data.job == FAULTY:
        return Answer(error="the press is jammed")
    return Answer(outcome="held" if kind == "hold" else "ok")


@pytest.fixture(scope="module")
def run(valkey_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    tmp = tmp_path_factory.mktemp("metrics")
    (tmp / "tmp").mkdir()
    scope = new_scope("metrics")
    port = free_port()
    store = Store.from_url(valkey_url)
    try:
        with processes(tmp / "logs") as procs:
            serve = procs.start(
                "serve", "serve", "--redis", valkey_url, "--scope", scope, "--workers", "2",
                "--metrics-port", str(port), "--log-format", "json", "--log-level", "info",
                "--sweep-interval", "100ms", cwd=tmp, env=cli_env(TMPDIR=str(tmp / "tmp")),
            )  # fmt: skip
            serve.wait_for_stderr('"message": "worker ', count=2)
            responder = Responder(store, scope, _reply)
            recipe = linear_recipe(STEPS)
            jobs = [submit(store, scope, recipe, job_id=f"j{i}").job for i in range(JOBS)]
            jobs.append(submit(store, scope, recipe, job_id=FAULTY).job)
            store.add_work(scope, {"v": b"1", "kind": b"bogus", "data": b"{}"})
            respond(store, scope, "ghost", "a1")
            assert publish_event(store, scope, "com.example.nobody.v1") is None

            def ended() -> bool:
                responder.pump()
                _, records = store.load(scope, jobs)
                return all(
                    r is not None and joborder.ended(decode_order(r.order))
                    for r in records.values()
                )

            wait_for(ended, timeout=40, what="every job to end")
            # methods applied by this process, not serve's: counted in the server
            held = submit(store, scope, recipe, job_id="held", start=False).job
            assert abort(store, scope, held).ok
            assert abort(store, scope, held).status == ReturnStatus.INVALID_JOB_ORDER_STATUS
            assert pause(store, scope, held).status == ReturnStatus.INVALID_JOB_ORDER_STATUS
            assert pause(store, scope, "nobody").status == ReturnStatus.UNKNOWN_JOB_ORDER_ID
            expected = _expected()

            def counted() -> bool:
                got = scrape(port)
                return all(value(got, n, scope=scope, **dict(lb)) == v for (n, lb), v in expected)

            wait_for(counted, timeout=20, what="the counters to reach what happened")
            samples = scrape(port)
            during = sorted(p.name for p in (tmp / "tmp").rglob("*.db"))
            serve.stop()
            yield Run(scope, port, serve, tmp, samples, during, serve.stderr())
    finally:
        store.close()


def _expected() -> list[tuple[tuple[str, frozenset[tuple[str, str]]], float]]:
    """What happened, as counters: every job started; each good job answered STEPS times,
    the faulty one once; the answer for no job dropped; STEPS pushes for each good job and
    one for the faulty one; one malformed entry dead; a stored job aborted, then refused an
    Abort and a Pause (a Pause of an unknown job is not counted)."""

    def e(
        name: str, v: float, **labels: str
    ) -> tuple[tuple[str, frozenset[tuple[str, str]]], float]:
        return (name, frozenset(labels.items())), v

    return [
        e("sfc_events_total", JOBS + 1, kind="start", disposition="applied"),
        e("sfc_events_total", JOBS * STEPS + 1, kind="answer", disposition="applied"),
        e("sfc_events_total", 1, kind="answer", disposition="dropped"),
        e("sfc_commands_total", JOBS * STEPS + 1, kind="push"),
        e("sfc_jobs_ended_total", JOBS, ended_by="completed"),
        e("sfc_jobs_ended_total", 1, ended_by="faulted"),
        e("sfc_dead_entries_total", 1, reason="malformed"),
        e("sfc_scope_methods_total", 1, method="Abort", result="applied"),
        e("sfc_scope_methods_total", 1, method="Abort", result="refused"),
        e("sfc_scope_methods_total", 1, method="Pause", result="refused"),
    ]


def test_the_counters_equal_what_happened(run: Run) -> None:
    got, scope = run.samples, run.scope
    for (name, labels), v in _expected():
        assert value(got, name, scope=scope, **dict(labels)) == v, (name, labels)
    # nothing else was counted
    events = {
        (dict(lb)["kind"], dict(lb)["disposition"]): v
        for (n, lb), v in got.items()
        if n == "sfc_events_total" and dict(lb).get("scope") == scope
    }
    assert events == {
        ("start", "applied"): JOBS + 1,
        ("answer", "applied"): JOBS * STEPS + 1,
        ("answer", "dropped"): 1,
    }
    commands = {
        dict(lb)["kind"]: v
        for (n, lb), v in got.items()
        if n == "sfc_commands_total" and dict(lb).get("scope") == scope
    }
    assert commands == {"push": JOBS * STEPS + 1}
    methods = {
        (dict(lb)["method"], dict(lb)["result"]): v
        for (n, lb), v in got.items()
        if n == "sfc_scope_methods_total" and dict(lb).get("scope") == scope
    }
    assert methods == {("Abort", "applied"): 1, ("Abort", "refused"): 1, ("Pause", "refused"): 1}
    assert value(got, "sfc_dead_entries_total", scope=scope, reason="deliveries") == 0
    assert value(got, "sfc_outages_total", scope=scope) == 0
    assert value(got, "sfc_commit_gone_total", scope=scope) == 0
    # the histograms: one apply time for every entry applied or dropped (the dead one was
    # never applied), and one answer-to-command latency per answer that sent the next push
    applied = (JOBS + 1) + (JOBS * STEPS + 1) + 1
    assert value(got, "sfc_apply_entry_seconds_count") == applied
    assert value(got, "sfc_answer_to_command_seconds_count") == JOBS * (STEPS - 1)
    assert 0 < value(got, "sfc_apply_batch_seconds_count") <= applied
    assert value(got, "sfc_apply_batch_seconds_sum") > 0
    # read from the server at scrape time, whoever counted
    assert value(got, "sfc_scope_events_unmatched_total", scope=scope) == 1
    assert value(got, "sfc_scope_answers_dropped_total", scope=scope) == 1
    assert value(got, "sfc_dead_stream_entries", scope=scope) == 1
    assert value(got, "sfc_job_orders", scope=scope) == JOBS + 2  # and the held one
    assert value(got, "sfc_active_jobs", scope=scope) == 0
    assert value(got, "sfc_due_jobs", scope=scope) == 0
    assert value(got, "sfc_work_pending", scope=scope) == 0
    assert value(got, "sfc_work_unread", scope=scope) == 0
    assert value(got, "sfc_equipment_unread", scope=scope, group="sfc-responder") == 0
    assert value(got, "sfc_equipment_entries", scope=scope) == JOBS * STEPS + 1
    assert value(got, "sfc_server_up") == 1
    assert value(got, "sfc_workers_alive") == 2


def test_every_metric_is_documented(run: Run) -> None:
    """docs/metrics.md names every metric the endpoint serves, with its type."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "metrics.md").read_text()
    documented = dict(
        re.findall(r"^\| `(sfc_[a-z_]+)` \| (counter|gauge|histogram) \|", text, re.M)
    )
    assert len(documented) >= 25
    served = {name for name, _ in run.samples}
    assert served, "nothing scraped"
    for name in served:
        family = re.sub(r"_(bucket|count|sum)$", "", name)
        assert name in documented or documented.get(family) == "histogram", name
    # and the types: what the scrape calls a counter ends in _total
    for name, kind in documented.items():
        assert name.endswith("_total") == (kind == "counter"), name


def test_one_endpoint_sums_both_workers_and_serve_cleans_up(run: Run) -> None:
    # two worker processes counted in files of their own, in the directory serve made
    pids = {name.rsplit("_", 1)[1] for name in run.during if name.startswith("counter_")}
    assert len(pids) == 2, run.during
    assert run.serve.code == 0, run.stderr
    assert not list((run.tmp / "tmp").iterdir()), "serve left its metrics directory"
    with pytest.raises(OSError):
        scrape(run.port)


def test_json_logs_one_object_a_line(run: Run) -> None:
    lines = run.stderr.splitlines()
    assert lines
    docs = []
    for line in lines:
        doc = json.loads(line)
        assert isinstance(doc, dict), line
        assert {"time", "level", "logger", "message", "pid"} <= doc.keys(), line
        docs.append(doc)
    said = [d["message"] for d in docs]
    assert any(m.startswith("sfc serve: metrics at http://127.0.0.1:") for m in said), said
    assert any(m.startswith("sfc serve: stopped in") for m in said), said
    assert sum(m.startswith("worker ") and m.endswith(" started") for m in said) == 2
    dead = [d for d in docs if d.get("disposition") == "dead"]
    assert len(dead) == 1, dead
    (d,) = dead
    assert d["level"] == "warning"
    assert d["scope"] == run.scope and d["kind"] == "bogus" and d["entry"]
    assert d["reason"].startswith("malformed")
    faults = [d for d in docs if d.get("ended_by") == "faulted"]
    assert len(faults) == 1, faults
    (f,) = faults
    assert f["level"] == "warning"
    assert f["job"] == FAULTY and f["scope"] == run.scope and f["kind"] == "answer"
    assert f["disposition"] == "applied" and "error" in f["reason"]
    # and what the equipment said, which the core's fault message quotes (once)
    assert f["reason"].count("the equipment reported 'the press is jammed'") == 1, f
    assert "the equipment reported:" not in f["reason"], f
    assert keys.check_scope(f["scope"])
    assert all(d["level"] != "error" for d in docs), [d for d in docs if d["level"] == "error"]


def test_metrics_port_in_use_is_refused(valkey_url: str, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with processes(tmp_path / "logs") as procs:
            bg = procs.start(
                "serve", "serve", "--redis", valkey_url, "--scope", new_scope("busy"),
                "--metrics-port", str(port), cwd=tmp_path,
            )  # fmt: skip
            deadline = time.monotonic() + 30
            while bg.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert bg.stop() == 2
            assert f"--metrics-port {port}: cannot serve" in bg.stderr()


def test_an_outage_and_a_reconnect_are_logged_at_warning_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """In-process, on a server of its own that the test stops and starts again on its port:
    the worker logs the outage, the unreachable server and the reconnect at warning with the
    reason (as `extra` fields, which the JSON format shows), and counts them."""
    from prometheus_client import REGISTRY

    from host.metrics import WorkerMetrics
    from host.serve import setup_scope
    from host.server import EmbeddedServer, held_port
    from host.settings import Settings
    from host.worker import Worker

    caplog.set_level(logging.INFO)
    server = EmbeddedServer(tmp_path / "valkey", port=held_port(bus=False)).start()
    store = Store.from_url(server.url)
    stop = threading.Event()
    thread: threading.Thread | None = None
    try:
        scope = new_scope("outage")
        setup_scope(store, scope, {})
        settings = Settings(sweep_interval=50, outage_threshold=1000, scope_refresh_interval=200)
        worker = Worker(store, settings, [scope], metrics=WorkerMetrics())

        def counted(name: str, **labels: str) -> float:
            return REGISTRY.get_sample_value(name, labels) or 0.0

        outages = counted("sfc_outages_total", scope=scope)
        reconnects = counted("sfc_worker_reconnects_total")
        worker.refresh_scopes()
        worker.sweep_once()  # the heartbeat
        store.client(scope).hset(keys.heartbeat(scope), "at", str(store.time_ms() - 600_000))
        worker.sweep_once()
        (outage,) = [r for r in caplog.records if "outage of" in r.getMessage()]
        assert outage.levelno == logging.WARNING
        assert outage.__dict__["scope"] == scope
        assert outage.__dict__["reason"].startswith("outage of ")
        assert counted("sfc_outages_total", scope=scope) == outages + 1

        def said(text: str) -> list[logging.LogRecord]:
            return [r for r in caplog.records if text in r.getMessage()]

        thread = threading.Thread(target=worker.run, args=(stop,))
        thread.start()
        port = server.port
        server.stop()
        wait_for(lambda: bool(said("unreachable")), timeout=20, what="the unreachable warning")
        server = EmbeddedServer(tmp_path / "valkey", port=port).start()
        wait_for(lambda: bool(said("reconnected after")), timeout=20, what="the reconnect")
        # the outage at warning, its end at info (host/reconnect.py)
        warned = [(r, logging.WARNING) for r in said("unreachable")]
        for record, level in warned + [(r, logging.INFO) for r in said("reconnected after")]:
            assert record.levelno == level
            assert record.__dict__["reason"]
        assert counted("sfc_worker_reconnects_total") == reconnects + 1
        line = json.loads(JsonFormatter().format(said("reconnected after")[0]))
        assert line["level"] == "info" and line["reason"].startswith("the server was")
    finally:
        stop.set()
        if thread is not None:
            thread.join(10)
        store.close()
        server.stop()


def test_a_refusal_at_start_is_a_json_line_too(valkey_url: str, tmp_path: Path) -> None:
    """With --log-format json every line of serve's stderr is a JSON object: a refusal at
    start (a metrics port in use, a bad option) was a plain `sfc: ...` line."""
    from tests.clikit import sfc_all

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        at = ["serve", "--redis", valkey_url, "--log-format", "json"]
        busy, bad = sfc_all(
            [[*at, "--metrics-port", str(port)], [*at, "--read-count", "0"]], cwd=tmp_path
        )
    for r, said in ((busy, f"--metrics-port {port}: cannot serve on"), (bad, "--read-count=")):
        assert r.code == 2, r
        records = [json.loads(line) for line in r.err.splitlines()]  # every line is JSON
        (refusal,) = [x for x in records if x["level"] == "error"]
        assert refusal["message"].startswith("sfc: ") and said in refusal["message"], records


def _gauges(store: Store, scope: str) -> Samples:
    """The scope collector's samples, collected in-process from the real server."""
    from host.metrics import ScopeCollector

    out: Samples = {}
    for family in ScopeCollector(store, [scope]).collect():
        for x in family.samples:
            out[x.name, frozenset(x.labels.items())] = x.value
    return out


def test_the_unread_gauges_show_a_scope_no_worker_reads_and_an_adapter_that_is_down(
    host: Host,
) -> None:
    """docs/metrics.md's alert on a scope that no worker serves could not fire: entries no
    one reads are not pending (with no worker at all `sfc_work_pending` stays 0). The unread
    gauges count them: the work stream's group lag, and each adapter's on the equipment
    stream, also where the server cannot tell the lag (entries deleted after it)."""
    scope = host.scope("unread")
    store = host.store()
    recipe = linear_recipe(1)
    for i in range(3):  # no worker yet
        host.submit(scope, recipe, job_id=f"j{i}")
    got = _gauges(store, scope)
    assert value(got, "sfc_work_unread", scope=scope) == 3
    assert value(got, "sfc_work_pending", scope=scope) == 0
    # no adapter ever read the scope: no group, no sample
    assert not [k for k in got if k[0] == "sfc_equipment_unread"], got
    # a worker stalls holding j0's start; another applies j1's and j2's (and deletes them)
    assert len(host.store("stalled").read([scope], 1, None)) == 1
    worker = host.worker([scope])
    worker.read_once(block_ms=100)
    assert worker.counters.outcome.applied == 2
    assert value(_gauges(store, scope), "sfc_work_unread", scope=scope) == 0
    for i in range(3, 5):
        host.submit(scope, recipe, job_id=f"j{i}")
    group = {g["name"].decode(): g for g in host.client().xinfo_groups(keys.work(scope))}[
        keys.GROUP
    ]
    assert group["lag"] is None  # deleted entries before the unread ones: the server cannot tell
    got = _gauges(store, scope)
    assert value(got, "sfc_work_unread", scope=scope) == 2
    assert value(got, "sfc_work_pending", scope=scope) == 1
    assert value(got, "sfc_work_entries", scope=scope) == 3
    # the equipment: an adapter whose group read nothing since it was made (it is down)
    store.equipment_group(scope, "down")
    pushes = host.client().xlen(keys.equipment(scope))
    assert pushes == 2
    got = _gauges(store, scope)
    assert value(got, "sfc_equipment_unread", scope=scope, group="down") == pushes
    # one that reads them all; and one deleted by hand: the lag is unknown, and counted
    responder = host.responder(scope)
    responder.pump()
    last = host.client().xrevrange(keys.equipment(scope), count=1)[0][0]
    host.client().xdel(keys.equipment(scope), last)
    assert [
        g["lag"] for g in host.client().xinfo_groups(keys.equipment(scope)) if g["name"] == b"down"
    ] == [None]
    got = _gauges(store, scope)
    assert value(got, "sfc_equipment_unread", scope=scope, group="down") == pushes - 1
    assert value(got, "sfc_equipment_unread", scope=scope, group="sfc-responder") == 0


def test_a_scope_that_cannot_be_read_does_not_blank_the_others(
    host: Host, caplog: pytest.LogCaptureFixture
) -> None:
    """A group name that is not UTF-8 (made by hand) is shown with those bytes escaped
    (two that differ only in them are two labels, as `sfc job show` shows them);
    a scope whose gauges fail (its work stream a key of another type) has no samples, is
    logged once, and the scrape serves the other scopes, with `sfc_server_up 1`."""
    from host.metrics import ScopeCollector

    good, bad = host.scope("good"), host.scope("bad")
    host.submit(good, linear_recipe(1), job_id="j")
    host.client().xgroup_create(keys.equipment(good), b"bad\xffname", id="0", mkstream=True)
    host.client().xgroup_create(keys.equipment(good), b"bad\xfename", id="0")
    host.client().set(keys.work(bad), "not a stream")
    collector = ScopeCollector(host.store(), [bad, good])
    for _ in range(2):
        got: Samples = {}
        for family in collector.collect():
            for x in family.samples:
                got[x.name, frozenset(x.labels.items())] = x.value
        assert value(got, "sfc_server_up") == 1, got
        assert value(got, "sfc_work_unread", scope=good) == 1, got
        assert ("sfc_work_unread", frozenset({("scope", bad)})) not in got
        for name in ("bad\\xffname", "bad\\xfename"):
            labels = frozenset({("scope", good), ("group", name)})
            assert got[("sfc_equipment_unread", labels)] == 0, got
    said = [r for r in caplog.records if f"scope {bad} cannot be read" in r.getMessage()]
    assert len(said) == 1, caplog.records


def test_a_batch_observed_at_once_counts_as_observed_one_by_one(tmp_path: Path) -> None:
    """A batch's entries and answers are observed with one write of a histogram's sum and
    one of each bucket (metrics._observe_all): the buckets, the count and the sum are those
    of one `observe` each, in a process's own registry and in the multiprocess files that
    `sfc serve`'s workers write (amounts on a bound, between bounds, above the last)."""
    from prometheus_client import CollectorRegistry, Histogram, generate_latest, multiprocess
    from prometheus_client import values as client_values

    from host.metrics import ENTRY_BUCKETS, _observe_all

    amounts = [0.0001, 0.0003, 0.0003, 0.001, 0.7, 2.5, 0.0, 0.00025, 0.05]

    def samples(registry: CollectorRegistry) -> dict[str, float]:
        text = generate_latest(registry).decode()
        return {
            f"{s.name}{sorted(s.labels.items())}": s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if not s.name.endswith("_created")
        }

    registry = CollectorRegistry()
    one = Histogram("one", "", buckets=ENTRY_BUCKETS, registry=registry)
    together = Histogram("together", "", buckets=ENTRY_BUCKETS, registry=registry)
    for a in amounts:
        one.observe(a)
    _observe_all(together, amounts[:4])
    _observe_all(together, amounts[4:])
    got = samples(registry)
    named = {k.removeprefix("one"): v for k, v in got.items() if k.startswith("one")}
    assert named == pytest.approx(
        {k.removeprefix("together"): v for k, v in got.items() if k.startswith("together")}
    )
    assert named["_count[]"] == len(amounts) and named["_bucket[('le', '0.0005')]"] == 5

    # the multiprocess mode: each value a file's
    directory = tmp_path / "prom"
    directory.mkdir()
    previous = client_values.ValueClass
    client_values.ValueClass = client_values.MultiProcessValue(lambda: 12345)
    try:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
        for name in ("mone", "mtogether"):
            h = Histogram(name, "", buckets=ENTRY_BUCKETS, registry=None)
            if name == "mone":
                for a in amounts:
                    h.observe(a)
            else:
                _observe_all(h, amounts)
        collected = CollectorRegistry()
        multiprocess.MultiProcessCollector(collected, path=str(directory))
        got = samples(collected)
    finally:
        client_values.ValueClass = previous
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
    mone = {k.removeprefix("mone"): v for k, v in got.items() if k.startswith("mone")}
    mtogether = {
        k.removeprefix("mtogether"): v for k, v in got.items() if k.startswith("mtogether")
    }
    assert mone and mone == pytest.approx(mtogether)
