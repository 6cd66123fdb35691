"""The OpenAPI document of the HTTP API, `GET /api/v1/openapi.json` (docs/api.md).

A test holds it against the routing table: every route is described, and nothing else.
"""

from __future__ import annotations

from typing import Any

_ERROR = {
    "description": "Refused: the JSON body names the field (`field`) and why (`error`); "
    "nothing was written.",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_METHOD_ANSWER = {
    "description": "The host's ReturnStatus, in words (`status`) and as its number "
    "(`statusCode`), with the message.",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/MethodAnswer"}}},
}


def _json(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {}}}}


def _param(name: str, where: str, description: str, kind: str = "string") -> dict[str, Any]:
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": {"type": kind},
    }


_SCOPE_Q = _param("scope", "query", "The scope (default `default`).")
_SCOPE = _param("scope", "path", "The scope of the job.")
_JOB = _param("job", "path", "The job id.")
_WRITE: list[dict[str, list[str]]] = [{"bearer": []}, {"session": []}]


def _write(summary: str, body: dict[str, Any] | None, ok: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": summary,
        "security": _WRITE,
        "responses": {
            "200": ok,
            "400": _ERROR,
            "401": _ERROR,
            "403": _ERROR,
            "404": _ERROR,
            "409": _ERROR,
        },
    }
    if body is not None:
        op["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
    return op


def _object(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        doc["required"] = required
    return doc


_S = {"type": "string"}
_I = {"type": "integer"}


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document of every route."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "microdcs-sfc HTTP API",
            "version": "1",
            "description": "Jobs, their charts and history, job control, answers, events and "
            "the work stream of an sfc host. Reads need no token on loopback; every write "
            "needs the token and a console started with --allow-control.",
        },
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "session": {"type": "apiKey", "in": "cookie", "name": "sfc_session"},
            },
            "schemas": {
                "Error": _object({"error": _S, "field": {"type": ["string", "null"]}}),
                "MethodAnswer": _object(
                    {
                        "job": _S,
                        "status": _S,
                        "statusCode": _I,
                        "message": _S,
                        "errors": {"type": "array"},
                    }
                ),
            },
        },
        "paths": {
            "/healthz": {
                "get": {
                    "summary": "The process is alive and the server answers",
                    "responses": {"200": _json("Healthy"), "503": _json("No server")},
                }
            },
            "/api/v1/openapi.json": {
                "get": {"summary": "This document", "responses": {"200": _json("OpenAPI")}}
            },
            "/api/v1/jobs": {
                "get": {
                    "summary": "A scope's jobs, oldest first, filtered by state, paged",
                    "parameters": [
                        _SCOPE_Q,
                        _param("state", "query", "A state or state path (repeat it)."),
                        _param("offset", "query", "The first job (default 0).", "integer"),
                        _param("limit", "query", "At most this many (default 100).", "integer"),
                        _param(
                            "waits",
                            "query",
                            "true: each row's `waiting`, what it waits for and since when.",
                            "boolean",
                        ),
                    ],
                    "responses": {"200": _json("JobPage"), "400": _ERROR},
                },
                "post": _write(
                    "Store, or store and start, a job order (StoreAndStart, or Store with "
                    "start false)",
                    _object(
                        {
                            "jobId": _S,
                            "recipe": {"type": "object"},
                            "scope": _S,
                            "start": {"type": "boolean"},
                            "priority": _I,
                            "description": _S,
                            "workMasterId": _S,
                        },
                        ["recipe"],
                    ),
                    _METHOD_ANSWER,
                ),
            },
            "/api/v1/jobs/{scope}/{job}": {
                "get": {
                    "summary": "One job: order, state, actions, waits, next deadline, "
                    "history, response",
                    "parameters": [
                        _SCOPE,
                        _JOB,
                        _param("history", "query", "History entries (default 20).", "integer"),
                        _param("chart", "query", "true: the chart's SVG too (`chart`).", "boolean"),
                    ],
                    "responses": {"200": _json("JobDetail"), "400": _ERROR, "404": _ERROR},
                }
            },
            "/api/v1/jobs/{scope}/{job}/history": {
                "get": {
                    "summary": "The job's last history entries, oldest first",
                    "parameters": [
                        _SCOPE,
                        _JOB,
                        _param("count", "query", "At most this many (default 100).", "integer"),
                    ],
                    "responses": {"200": _json("History"), "400": _ERROR, "404": _ERROR},
                }
            },
            "/api/v1/jobs/{scope}/{job}/chart.svg": {
                "get": {
                    "summary": "The job's chart, IEC 61131-3 style, its state marked",
                    "parameters": [_SCOPE, _JOB],
                    "responses": {
                        "200": {
                            "description": "SVG",
                            "content": {"image/svg+xml": {"schema": {"type": "string"}}},
                        },
                        "404": _ERROR,
                        "409": _ERROR,
                    },
                }
            },
            "/api/v1/jobs/{scope}/{job}/{method}": {
                "post": {
                    **_write(
                        "A job-control method: start, revoke, pause, resume, stop, abort, "
                        "cancel or clear",
                        None,
                        _METHOD_ANSWER,
                    ),
                    "parameters": [
                        _SCOPE,
                        _JOB,
                        {
                            "name": "method",
                            "in": "path",
                            "required": True,
                            "schema": {
                                "enum": [
                                    "start",
                                    "revoke",
                                    "pause",
                                    "resume",
                                    "stop",
                                    "abort",
                                    "cancel",
                                    "clear",
                                ]
                            },
                        },
                    ],
                    "requestBody": {
                        "required": False,
                        "content": {
                            "application/json": {
                                "schema": _object({"comment": _S}),
                            }
                        },
                    },
                }
            },
            "/api/v1/answers": {
                "post": _write(
                    "Answer a command as equipment would (sfc respond)",
                    _object(
                        {
                            "scope": _S,
                            "job": _S,
                            "action": _S,
                            "outcome": _S,
                            "error": _S,
                            "commandId": _S,
                            "round": _I,
                        },
                        ["job", "action"],
                    ),
                    _json("Queued: the entry id"),
                )
            },
            "/api/v1/events": {
                "post": _write(
                    "Publish an event for the jobs that wait for its type (sfc event)",
                    _object(
                        {
                            "scope": _S,
                            "type": _S,
                            "subject": _S,
                            "correlationId": _S,
                            "outcome": _S,
                            "source": _S,
                            "id": _S,
                        },
                        ["type"],
                    ),
                    _json("Queued (the entry id), or dropped: no job waits for the type"),
                )
            },
            "/api/v1/work": {
                "get": {
                    "summary": "The scope's pending and dead work entries",
                    "parameters": [_SCOPE_Q],
                    "responses": {"200": _json("Work"), "400": _ERROR},
                }
            },
            "/api/v1/work/{scope}/{entry}/{action}": {
                "post": {
                    **_write("Requeue or drop a dead entry", None, _json("Done")),
                    "parameters": [
                        _SCOPE,
                        _param("entry", "path", "The dead entry's id."),
                        {
                            "name": "action",
                            "in": "path",
                            "required": True,
                            "schema": {"enum": ["requeue", "drop"]},
                        },
                    ],
                }
            },
            "/api/v1/stream": {
                "get": {
                    "summary": "Server-sent events of the scope's job changes: `change` "
                    "events whose data names the jobs that moved (`jobs`), and `work` when "
                    "the scope's work moved (added, read, claimed, committed, buried)",
                    "parameters": [_SCOPE_Q],
                    "responses": {
                        "200": {
                            "description": "An event stream",
                            "content": {"text/event-stream": {"schema": {"type": "string"}}},
                        },
                        "400": _ERROR,
                    },
                }
            },
            "/api/v1/session": {
                "post": {
                    "summary": "Open a browser session with the token (an HttpOnly, "
                    "SameSite=Strict cookie)",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": _object({"token": _S}, ["token"])}
                        },
                    },
                    "responses": {"200": _json("Session opened"), "401": _ERROR},
                },
                "delete": {
                    "summary": "Close the browser session",
                    "responses": {"200": _json("Session closed")},
                },
            },
            "/api/v1/recipe/check": {
                "post": {
                    "summary": "Validate, explain, chart and dry-run a recipe and a script; "
                    "nothing is stored",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": _object(
                                    {"recipe": {"type": "object"}, "script": {"type": "object"}},
                                    ["recipe"],
                                )
                            }
                        },
                    },
                    "responses": {"200": _json("The check"), "400": _ERROR},
                }
            },
        },
    }
