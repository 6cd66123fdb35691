"""The local 3-node Valkey Cluster of the tests (host.server.LocalCluster)."""

from host.server import LocalCluster

__all__ = ["LocalCluster"]
