"""The console's pages, rendered here; `static/console.js` keeps them live from the API.

Each page is the HTML of its JSON twin under /api/v1 (the same read model), with the
token box, and with control buttons only when the console allows control. All text is
escaped; a job's chart is the core's SVG, inline.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import quote

import msgspec

from host.console.auth import Guard
from host.readmodel import JobDetail

NAV = (("/", "Jobs"), ("/work", "Work"), ("/recipe", "Recipe"))


def _text(value: Any) -> str:
    return "" if value is None else escape(str(value))


def _when(ms: int | None) -> str:
    """A point in time as console.js writes it: `2026-12-05 22:10:53.120Z`."""
    if ms is None:
        return ""
    at = datetime.fromtimestamp(ms // 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{at}Z" if ms % 1000 == 0 else f"{at}.{ms % 1000:03d}Z"


def _span(ms: int) -> str:
    """A length of time as console.js writes it: `4.2 s`, `3 min 5 s`, `2 h 1 min`."""
    s = max(0, ms) / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60)} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"


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


def jobs(scope: str, listing: dict[str, Any], guard: Guard) -> str:
    """The jobs list, its rows those of `listing` (`GET /api/v1/jobs?waits=true`)."""
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
        f"<tbody>{''.join(job_row(scope, j) for j in listing['jobs'])}</tbody></table>"
        f'<p id="total" class="muted">{len(listing["jobs"])} of {listing["total"]} job(s)</p>'
    )
    return _layout(f"Jobs of {scope}", "jobs", body, guard, {"scope": scope})


def job_row(scope: str, j: dict[str, Any]) -> str:
    """A row of the jobs list (`GET /api/v1/jobs?waits=true`), as console.js writes it."""
    w = j.get("waiting")
    link = f"/jobs/{quote(scope, safe='')}/{quote(j['job'], safe='')}"
    what = "" if not w else f"{w['for']}: {w['what']}" + (" (held)" if w.get("held") else "")
    since = "" if not w or w.get("since") is None else f' data-since="{int(w["since"])}"'
    return (
        f'<tr data-job="{_text(j["job"])}"><td><a href="{_text(link)}">{_text(j["job"])}</a>'
        f"</td><td>{_text('unreadable' if j.get('unreadable') else j.get('state'))}</td>"
        f'<td>{_text(what)}</td><td class="since"{since}>{_when(w and w.get("since"))}</td>'
        f"<td>{_when(j.get('storedAt'))}</td><td>{_when(j.get('endedAt'))}</td></tr>"
    )


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
        "<th>outcome</th><th>hold</th></tr></thead>"
        f"<tbody>{''.join(action_row(a) for a in doc['actions'])}</tbody></table>"
        f'<p id="next">{_text((doc.get("nextDeadline") or {}).get("text"))}</p>'
        '<h2>History</h2><ol id="history" class="timeline">'
        + "".join(history_item(h) for h in reversed(doc["history"]))
        + "</ol>"
        f'<h2>Order and response</h2><pre id="order">{_text(_pretty(doc.get("order")))}</pre>'
        f'<pre id="response">{_text(_pretty(doc.get("response")))}</pre>'
    )
    # the script counts the deadlines down from the server's clock
    twin = {"detail": {"scope": detail.scope, "job": detail.job, "now": doc["now"]}}
    return _layout(f"Job {detail.job}", "job", body, guard, twin)


def action_row(a: dict[str, Any]) -> str:
    """A row of the job page's actions (`JobDetail.actions`), as console.js writes it."""
    step = "" if a.get("step") is None else f' data-step="{_text(a["step"])}"'
    deadline = a.get("deadline")
    counts = "" if a["status"] != "open" or deadline is None else f' data-deadline="{deadline}"'
    attempt = _text(a.get("attempt")) + (f" of {a['maxAttempts']}" if a.get("maxAttempts") else "")
    return (
        f'<tr data-action="{_text(a["name"])}"{step} data-status="{_text(a["status"])}">'
        f"<td>{_text(a['name'])}</td><td>{_text(a.get('step'))}</td>"
        f"<td>{_text(a['status'])}</td><td>{_text(a.get('commandId'))}</td><td>{attempt}</td>"
        f'<td class="deadline"{counts}>'
        f"{_when(deadline)}</td><td>{_text(a.get('outcome') or a.get('error'))}</td>"
        f"<td>{_text(a.get('hold'))}</td></tr>"
    )


def history_item(h: dict[str, Any]) -> str:
    """An entry of the job page's history timeline, as console.js writes it."""
    reason = f": {_text(h['reason'])}" if h.get("reason") else ""
    return (
        f"<li><time>{_when(h['at'])}</time> <b>{_text(h['event'])}</b> "
        f"{_text(h['disposition'])}{reason}</li>"
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _state(doc: dict[str, Any]) -> str:
    order = doc.get("order") or {}
    return "/".join(s.get("stateText", "") for s in order.get("state", []))


def _waiting(doc: dict[str, Any]) -> str:
    waits = doc.get("waitingFor") or []
    if not waits:
        dwells = doc.get("dwells") or {}
        if dwells:
            step = min(dwells, key=lambda k: (dwells[k], k))
            return f"waits for the dwell of step {step} until {_when(dwells[step])}"
        return "waits for nothing"
    first = waits[0]
    since = first.get("since")
    said = f"waits for {first.get('for', '?')}"
    return said if since is None else f"{said} since {_when(since)}"


def work(scope: str, work: dict[str, Any], guard: Guard) -> str:
    """The work page, its rows those of `work` (`GET /api/v1/work`)."""
    pending, dead = work["pending"], work["dead"]["dead"]
    buttons = (
        '<button data-do="requeue">requeue</button> <button data-do="drop">drop</button>'
        if guard.allow_control
        else ""
    )
    body = (
        f"<h1>Work of scope {escape(scope)}</h1>"
        '<h2>Pending</h2><table id="pending" class="list"><thead><tr><th>entry</th>'
        "<th>what</th><th>job</th><th>consumer</th><th>idle</th><th>deliveries</th></tr>"
        "</thead><tbody>"
        + "".join(
            f"<tr><td>{_text(p['id'])}</td><td>{_text(p['entry'])}</td><td>{_text(p['job'])}"
            f"</td><td>{_text(p['consumer'])}</td><td>{_span(p['idleMs'])}</td>"
            f"<td>{_text(p['deliveries'])}</td></tr>"
            for p in pending["pending"]
        )
        + '</tbody></table><p id="unread" class="muted">'
        f"{pending['unread']} entr(ies) no worker has read yet</p>"
        '<h2>Dead</h2><table id="dead" class="list"><thead><tr><th>entry</th><th>kind</th>'
        "<th>job</th><th>reason</th><th>deliveries</th><th></th></tr></thead><tbody>"
        + "".join(
            f'<tr data-entry="{_text(d["id"])}"><td>{_text(d["id"])}</td><td>{_text(d["kind"])}'
            f"</td><td>{_text(d['job'])}</td><td>{_text(d['reason'])}</td>"
            f"<td>{_text(d['deliveries'])}</td><td>{buttons}</td></tr>"
            for d in dead
        )
        + "</tbody></table>"
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
