"""The one package that talks to the server (docs/host.md).

Each call is a round trip or one pipeline of them; what to write is decided elsewhere.
A function call loads the library `sfc_1` when the server says it is missing, and retries.

- wire: redis-py's and hiredis's private internals (packing, raw replies, kept connections)
- errors: how an error reads (the server away, a slot moving), StoreError
- client: the connection, its options, routing by scope, the function library
- commit: a batch's load, its commits (CommitStream) and read ahead
- commands: scopes, recipes, jobs, the work stream, dead entries, the sweep
- equipment: the equipment stream, as adapters use it
- views: the reads of `sfc job show`, `sfc work`, the metrics
"""

from __future__ import annotations

from host.store.client import (
    PROBE_TIMEOUT_S,
    SOCKET_TIMEOUT_S,
    StoreOptions,
    library_source,
)
from host.store.commands import DEAD_FIELDS, RETIRED_TTL_MS, Commands, scope_keys
from host.store.commit import CommitCommands, CommitStream, ReadAhead
from host.store.equipment import EquipmentCommands
from host.store.errors import (
    Moved,
    StoreError,
    moved_to,
    redacted,
    slot_moved,
    slot_moving,
    slot_of,
    slot_rehashing,
    unreachable,
    unreachable_reason,
)
from host.store.records import (
    JOB_FIELDS,
    Commit,
    EquipmentGroup,
    EquipmentHolder,
    JobRecord,
    Loaded,
    Row,
    ScopeGauges,
    ShowReads,
    id_tuple,
)
from host.store.views import ReadViews, work_unread


class Store(Commands, CommitCommands, EquipmentCommands, ReadViews):
    """A connection to the server, with one method per operation the host needs."""


__all__ = [
    "DEAD_FIELDS",
    "JOB_FIELDS",
    "PROBE_TIMEOUT_S",
    "RETIRED_TTL_MS",
    "SOCKET_TIMEOUT_S",
    "Commit",
    "CommitStream",
    "EquipmentGroup",
    "EquipmentHolder",
    "JobRecord",
    "Loaded",
    "Moved",
    "ReadAhead",
    "Row",
    "ScopeGauges",
    "ShowReads",
    "Store",
    "StoreError",
    "StoreOptions",
    "id_tuple",
    "library_source",
    "moved_to",
    "redacted",
    "scope_keys",
    "slot_moved",
    "slot_moving",
    "slot_of",
    "slot_rehashing",
    "unreachable",
    "unreachable_reason",
    "work_unread",
]
