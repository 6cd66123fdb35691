"""The console's pages, rendered here; `static/console.js` keeps them live from the API.

Each page is the HTML of its JSON twin under /api/v1 (the same read model), with the
token box, and with control buttons only when the console allows control. All text is
escaped; a job's chart is the core's SVG, inline.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

import msgspec

from host.console.auth import Guard
from host.readmodel import JobDetail
from sfc.words import when

NAV = (("/", "Jobs"), ("/work", "Work"), ("/recipe", "Recipe"))


def _layout(title: str, page: str, body: str, guard: Guard, data: Any = None) -> str:
    nav = " ".join(f'<a href="{href}">{name}</a>' for href, name in NAV)
    control = "true" if guard.allow_control else "false"
    embedded = (
        ""
        if data is None
        else '<script type="application/json" id="data">'
        + json.dumps(data).replace("</", "<\\/")
        + "</script>"
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · sfc console</title>"
        '<link rel="stylesheet" href="/static/console.css"></head>'
        f'<body data-page="{page}" data-control="{control}">'
        f"<header><strong>sfc console</strong> <nav>{nav}</nav>"
        '<span id="live" class="live" role="status">connecting…</span>'
        '<form id="login" class="login" autocomplete="off">'
        '<input id="token" type="password" placeholder="token" aria-label="token">'
        '<button type="submit">Enter</button><span id="who"></span></form></header>'
        f"<main>{body}</main>{embedded}"
        '<script src="/static/console.js"></script></body></html>\n'
    )


def login(guard: Guard) -> str:
    """The page shown to a browser without a session where every request needs the token."""
    body = (
        "<h1>Token needed</h1><p>This console is served beyond loopback: enter the token "
        "(<code>&lt;data-dir&gt;/http-token</code>) above.</p>"
    )
    return _layout("Token needed", "login", body, guard)


def problem(message: str, guard: Guard) -> str:
    return _layout("Not found", "problem", f"<h1>{escape(message)}</h1>", guard)


def jobs(scope: str, guard: Guard) -> str:
    body = (
        f'<h1>Jobs of scope <span id="scope">{escape(scope)}</span></h1>'
        '<form id="filter" class="filter">'
        f'<label>scope <input name="scope" value="{escape(scope)}"></label> '
        '<label>state <select name="state"><option value="">any</option>'
        + "".join(
            f'<option value="{s}">{s}</option>'
            for s in (
                "NotAllowedToStart",
                "AllowedToStart",
                "Running",
                "Interrupted",
                "Ended",
                "Aborted",
            )
        )
        + "</select></label> "
        '<label>job <input name="text" placeholder="part of the id"></label></form>'
        '<table id="jobs" class="list"><thead><tr><th>job</th><th>state</th>'
        "<th>waits for</th><th>since</th><th>stored</th><th>ended</th></tr></thead>"
        "<tbody></tbody></table>"
        '<p id="total" class="muted"></p>'
    )
    return _layout(f"Jobs of {scope}", "jobs", body, guard, {"scope": scope})


def job(detail: JobDetail, svg: str | None, guard: Guard) -> str:
    """The job page: the chart live, the actions with their deadlines, the history, the order
    and response, and the control buttons when control is allowed."""
    doc = msgspec.to_builtins(detail)
    buttons = ""
    if guard.allow_control:
        buttons = (
            '<div id="controls" class="controls">'
            + "".join(
                f'<button type="button" data-method="{m}">{m}</button>'
                for m in ("start", "revoke", "pause", "resume", "stop", "abort", "cancel", "clear")
            )
            + '<input id="comment" placeholder="comment"><span id="said"></span></div>'
        )
    state = "" if detail.order is None else escape(_state(doc))
    body = (
        f'<h1>Job <span id="job">{escape(detail.job)}</span> '
        f"<small>scope {escape(detail.scope)}</small></h1>"
        f'<p>state <strong id="state">{state}</strong> · '
        f'<span id="waiting">{escape(_waiting(doc))}</span></p>'
        f"{buttons}"
        f'<section class="chart" id="chart">{svg or ""}</section>'
        '<h2>Actions</h2><table id="actions" class="list"><thead><tr><th>action</th>'
        "<th>step</th><th>status</th><th>command</th><th>attempt</th><th>deadline</th>"
        "<th>outcome</th><th>hold</th></tr></thead><tbody></tbody></table>"
        '<p id="next"></p>'
        '<h2>History</h2><ol id="history" class="timeline"></ol>'
        '<h2>Order and response</h2><pre id="order"></pre><pre id="response"></pre>'
    )
    return _layout(f"Job {detail.job}", "job", body, guard, {"detail": doc})


def _state(doc: dict[str, Any]) -> str:
    order = doc.get("order") or {}
    return "/".join(s.get("stateText", "") for s in order.get("state", []))


def _waiting(doc: dict[str, Any]) -> str:
    waits = doc.get("waitingFor") or []
    if not waits:
        return "waits for nothing"
    first = waits[0]
    since = first.get("since")
    said = f"waits for {first.get('for', '?')}"
    return said if since is None else f"{said} since {when(since)}"


def work(scope: str, guard: Guard) -> str:
    body = (
        f"<h1>Work of scope {escape(scope)}</h1>"
        '<h2>Pending</h2><table id="pending" class="list"><thead><tr><th>entry</th>'
        "<th>what</th><th>job</th><th>consumer</th><th>idle</th><th>deliveries</th></tr>"
        '</thead><tbody></tbody></table><p id="unread" class="muted"></p>'
        '<h2>Dead</h2><table id="dead" class="list"><thead><tr><th>entry</th><th>kind</th>'
        "<th>job</th><th>reason</th><th>deliveries</th><th></th></tr></thead>"
        "<tbody></tbody></table>"
    )
    return _layout(f"Work of {scope}", "work", body, guard, {"scope": scope})


def recipe(guard: Guard) -> str:
    body = (
        "<h1>Check a recipe</h1><p>Validate, explain, chart and dry-run a recipe and a "
        "script: nothing is stored.</p>"
        '<form id="check"><label>recipe (JSON) <input type="file" id="recipe-file" '
        'accept=".json"></label><textarea id="recipe" rows="12"></textarea>'
        '<label>script (JSON, optional) <input type="file" id="script-file" '
        'accept=".json"></label><textarea id="script" rows="6"></textarea>'
        '<button type="submit">Check</button></form>'
        '<section id="result"></section>'
    )
    return _layout("Recipe", "recipe", body, guard)
