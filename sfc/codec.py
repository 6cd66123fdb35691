"""Encoders and decoders for the wire types, built once at module level and reused."""

from __future__ import annotations

from typing import Any

import msgspec

from generated.capabilities_v1_1 import Capabilities
from generated.command_v1_0 import Command
from generated.event_v1_0 import Event
from generated.snapshot_v1_0 import Snapshot
from generated.state_v1_5 import SfcState
from generated.step_result_v1_2 import StepResult

encoder = msgspec.json.Encoder()
"""Encodes any wire struct; field order is the schema's, so equal values give equal bytes."""

state_decoder = msgspec.json.Decoder(SfcState)
event_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Event)
command_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Command)
snapshot_decoder = msgspec.json.Decoder(Snapshot)
capabilities_decoder = msgspec.json.Decoder(Capabilities)
step_result_decoder = msgspec.json.Decoder(StepResult)


def encode(value: Any) -> bytes:
    return encoder.encode(value)
