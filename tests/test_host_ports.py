"""The ports of the servers that tests kill and start again (host.server.held_port)."""

from __future__ import annotations

import subprocess
import sys

from host.server import BUS_OFFSET, HELD_LOCKS, _ephemeral_low, held_port


def test_a_held_port_is_below_the_ephemeral_range_with_its_bus_port() -> None:
    """An outgoing connection takes its local port from the ephemeral range: a node's port
    there could be taken while the node was down, and its restart failed, port in use."""
    ports = [held_port() for _ in range(5)]
    assert len(set(ports)) == 5, ports
    for port in ports:
        assert port + BUS_OFFSET < _ephemeral_low(), port


def test_a_port_held_here_is_not_given_to_another_process() -> None:
    """Another test session asks for ports at the same time: a port this process holds is
    locked for it until this process exits."""
    port = held_port(bus=False)
    lock = HELD_LOCKS / f"{port}.lock"
    taken = subprocess.run(
        [
            sys.executable,
            "-c",
            "import fcntl, sys\n"
            f"f = open({str(lock)!r}, 'wb')\n"
            "try:\n"
            "    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
            "except BlockingIOError:\n"
            "    sys.exit(3)\n",
        ],
        check=False,
    )
    assert taken.returncode == 3
