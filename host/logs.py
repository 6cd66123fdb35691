"""The logs of `sfc serve` and its workers: text, or JSON with one object a line
(docs/metrics.md, "Logs").

The worker passes what it knows of an entry with `extra=`: `scope`, `job`, `entry` (the
entry id), `kind`, `disposition` and `reason`. The text format shows the message alone (it
already names them); the JSON format gives each as a field of its own.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FIELDS = ("scope", "job", "entry", "kind", "disposition", "ended_by", "reason", "consumer")
"""The record attributes (set with `extra=`) that a JSON line carries when they are set."""


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, the known fields, and the
    exception's traceback as `exc` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                doc[name] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure(level: int, fmt: LogFormat = "text") -> None:
    """Log at `level` to stderr in `fmt`, replacing the root logger's handlers."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
