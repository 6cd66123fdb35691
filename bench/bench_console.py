"""The console and the HTTP API on one real server (`nox -s bench -- console`).

- **Reading a job.** RUNNING jobs of a 200-step linear recipe are stored and started (a
  worker applies every start, so that each is Running with its first command out). The
  console runs in a process of its own (`sfc console`, as `sfc serve` would serve it);
  this process asks for REQUESTS random jobs, one at a time: the job page
  (`/jobs/{scope}/{job}`, with its 200-step chart drawn) and its JSON twin
  (`/api/v1/jobs/{scope}/{job}`). Figures: p50 and p99 in ms.
- **The cost of watching.** The batched throughput of bench_host (JOBS jobs of linear-10,
  one worker in this process, a responder process answering every push) with no console,
  and with a console process and a client process that watches the scope as a job page
  does: the stream of changes, and on a change the job read again (at most once a second).
  Rounds alternate; the figure is the median of each side and their ratio.

Benchmarks print figures; they assert nothing.
"""

from __future__ import annotations

import http.client
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.bench_host import JOBS, SETTINGS, STEPS, go, linear, responder_process, stop_responder
from host.jobs import submit
from host.server import EmbeddedServer
from host.store import Store
from host.worker import Worker

RUNNING = 1000
CHART_STEPS = 200
REQUESTS = 300
ROUNDS = 3
ROOT = Path(__file__).resolve().parent.parent


UNKEPT = (
    "import sys, host.console.app as a; a.DRAWN_KEPT = 0; from cli.main import run; "
    "sys.argv[0] = 'sfc'; run()"
)
"""`sfc console` that keeps no chart body drawn: every job page draws its chart."""


def console_process(url: str, kept: bool = True) -> tuple[subprocess.Popen[bytes], str]:
    """`sfc console` on a free port of loopback; its address once it serves. Not `kept`:
    it keeps no chart body, as for jobs each in a state of its own."""
    sfc = [str(Path(sys.executable).parent / "sfc")] if kept else [sys.executable, "-c", UNKEPT]
    p = subprocess.Popen(
        [*sfc, "console", "--redis", url, "--http", "127.0.0.1:0",
         "--http-token-file", str(Path(tempfile.mkdtemp()) / "token")],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    assert p.stderr is not None
    while True:
        line = p.stderr.readline().decode()
        if not line:
            raise RuntimeError("sfc console exited")
        found = re.search(r"console at http://(127\.0\.0\.1:\d+)/", line)
        if found:
            return p, found.group(1)


def get(conn: http.client.HTTPConnection, path: str) -> float:
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    r.read()
    assert r.status == 200, (path, r.status)
    return (time.perf_counter() - t0) * 1000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def reading(url: str) -> None:
    scope = f"bench-console-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = linear(CHART_STEPS)
    for i in range(RUNNING):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    worker = Worker(Store.from_url(url), SETTINGS, [scope])
    worker.refresh_scopes()
    while len(store.active_jobs(scope)) < RUNNING:
        worker.read_once(block_ms=50)
    print(f"  {RUNNING} running jobs of a {CHART_STEPS}-step chart, {REQUESTS} requests each:")
    for kept in (True, False):
        page, api = ask(url, scope, kept)
        said = "" if kept else ", no chart kept"
        print(f"    job page{said:<18}p50 {pct(page, 0.5):6.1f} ms  p99 {pct(page, 0.99):6.1f} ms")
        if kept:
            print(
                f"    GET /api/v1/jobs/S/J      p50 {pct(api, 0.5):6.1f} ms  "
                f"p99 {pct(api, 0.99):6.1f} ms"
            )


def ask(url: str, scope: str, kept: bool) -> tuple[list[float], list[float]]:
    """The times of REQUESTS job pages and JSON twins of random jobs, ms."""
    console, where = console_process(url, kept)
    try:
        conn = http.client.HTTPConnection(where, timeout=60)
        get(conn, f"/api/v1/jobs/{scope}/j0")  # warm
        get(conn, f"/jobs/{scope}/j0")
        page, api = [], []
        rng = random.Random(7)
        for _ in range(REQUESTS):
            job = f"j{rng.randrange(RUNNING)}"
            page.append(get(conn, f"/jobs/{scope}/{job}"))
            api.append(get(conn, f"/api/v1/jobs/{scope}/{job}"))
        conn.close()
    finally:
        console.terminate()
        console.wait()
    return page, api


WATCHER = """
import http.client, json, sys, time
where, scope = sys.argv[1], sys.argv[2]
conn = http.client.HTTPConnection(where, timeout=60)
conn.request("GET", "/api/v1/stream?scope=" + scope)
r = conn.getresponse()
reader = http.client.HTTPConnection(where, timeout=60)
last = 0.0
print("watching", flush=True)
while True:
    line = r.fp.readline()
    if not line:
        break
    if not line.startswith(b"data:") or time.monotonic() - last < 1:
        continue
    jobs = json.loads(line[5:]).get("jobs")
    if jobs:  # a change of work alone moves no job page
        last = time.monotonic()
        job = jobs[0]
        reader.request("GET", "/api/v1/jobs/%s/%s?chart=true" % (scope, job))
        reader.getresponse().read()
"""


def batched_round(url: str, where: str | None) -> float:
    """Applied entries per second of bench_host's batched round; with `where`, a console
    there and a client watching the scope as a job page does."""
    scope = f"bench-watch-{time.time_ns()}"
    store = Store.from_url(url)
    watcher = None
    if where is not None:
        watcher = subprocess.Popen(
            [sys.executable, "-c", WATCHER, where, scope], cwd=ROOT, stdout=subprocess.PIPE
        )
        assert watcher.stdout is not None and watcher.stdout.readline() == b"watching\n"
    recipe = linear(STEPS)
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    worker = Worker(Store.from_url(url), replace(SETTINGS), [scope], overlap=True)
    worker.refresh_scopes()
    responder = responder_process(url, scope)
    try:
        t0 = time.perf_counter()
        go(responder)
        while worker.counters.outcome.applied < JOBS * (STEPS + 1):
            worker.read_once(block_ms=50)
        elapsed = time.perf_counter() - t0
    finally:
        stop_responder(responder)
        if watcher is not None:
            watcher.terminate()
            watcher.wait()
    return worker.counters.outcome.applied / elapsed


def watching(url: str) -> None:
    console, where = console_process(url)
    alone: list[float] = []
    watched: list[float] = []
    try:
        for _ in range(ROUNDS):
            alone.append(batched_round(url, None))
            watched.append(batched_round(url, where))
    finally:
        console.terminate()
        console.wait()
    a, w = statistics.median(alone), statistics.median(watched)
    print(f"  batched throughput, {JOBS} jobs of linear-{STEPS}, median of {ROUNDS} rounds:")
    print(f"    no console                {a:8.0f} entries/s  ({min(alone):.0f}-{max(alone):.0f})")
    print(
        f"    a console watching        {w:8.0f} entries/s  ({min(watched):.0f}-{max(watched):.0f})"
    )
    print(f"    watched / alone           {w / a:8.3f}")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        url = server.url
        Store.from_url(url).load_library()
        reading(url)
        watching(url)
