"""The JetStream page as HTML: one server-rendered document from the overview dict, every value escaped,
links opening in Airflow's own window (the page is shown in an iframe of Airflow's UI)."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

from airflow_provider_jetstream.core.status.report import format_seconds

#: Seconds between two reloads of the page (each reload is one check).
REFRESH = 30

STYLE = """
body{font-family:system-ui,sans-serif;margin:1rem;color:#1a202c;background:#fff}
h1{font-size:1.4rem}h2{font-size:1.15rem;margin-top:1.5rem}h3{font-size:1rem;margin:.8rem 0 .3rem}
table{border-collapse:collapse;margin:.3rem 0 .8rem}td,th{border:1px solid #cbd5e0;padding:.25rem .5rem;
text-align:left;vertical-align:top;font-size:.9rem}th{background:#edf2f7}
.ok{color:#22543d;background:#c6f6d5}.bad{color:#742a2a;background:#fed7d7}.warn{color:#744210;background:#fefcbf}
.muted{color:#718096;font-size:.85rem}form{margin:.5rem 0}code{font-size:.85rem}
"""

#: Airflow's UI shows the page in an iframe sandboxed without ``allow-top-navigation``: a ``target="_top"`` link
#: does nothing there. The frame is same-origin and may run scripts, so a click on such a link moves Airflow's own
#: window instead, as its router does (history entry, then ``popstate``). Elsewhere the browser follows the link.
TOP_LINKS = """
document.addEventListener("click", function (event) {
  var a = event.target.closest ? event.target.closest('a[target="_top"]') : null;
  if (!a || window.top === window || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
  try {
    var top = window.top;
    if (top.location.origin !== window.location.origin) return;
    top.history.pushState(null, "", a.href);
    top.dispatchEvent(new top.PopStateEvent("popstate", {state: null}));
    event.preventDefault();
  } catch (err) { /* another origin: the browser's own handling */ }
});
"""

STATE_CLASS = {"caught up": "ok", "behind": "warn", "unreachable": "bad", "missing": "bad"}


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def link(href: str, text: str) -> str:
    return f'<a href="{e(href)}" target="_top">{e(text)}</a>'


def table(header: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "") -> str:
    """An HTML table; the cells are HTML already (escape what goes in)."""
    head = "".join(f"<th>{e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _headroom(found: dict[str, Any] | None) -> str:
    if not found:
        return ""
    loss = found.get("time_to_loss")
    text = f"{found['uncopied_msgs']} uncopied; time to loss " + (
        f"{format_seconds(loss)} ({found.get('binding_limit')})" if loss is not None else "none at this rate"
    )
    return e(text + (" (last known, projected)" if found.get("last_known") else ""))


def _replication(stream: dict[str, Any]) -> str:
    replication = stream.get("replication")
    if not replication:
        return ""
    if not replication["origins"]:
        return f'<span class="bad">{e(replication.get("error"))}</span>'
    rows = [
        [
            e(o["kind"]),
            e(o["origin"]),
            e(o["where"]),
            f'<span class="{STATE_CLASS.get(o["state"], "")}" data-state="{e(o["state"])}">{e(o["summary"])}</span>',
            e(o.get("since")),
            _headroom(o.get("headroom")),
            e(o["check"]),
        ]
        for o in replication["origins"]
    ]
    failed = f'<div class="bad">{e(replication["error"])}</div>' if replication.get("error") else ""
    return failed + table(["Kind", "Origin", "Domain / API prefix", "State", "Since", "Headroom", "Check"], rows)


def _consumers(stream: dict[str, Any]) -> str:
    if stream.get("consumers_error"):
        return f'<span class="bad">{e(stream["consumers_error"])}</span>'
    return "<br>".join(
        f'<span class="{"ok" if c["idle"] else "warn"}">{e(c["consumer"])}: {e(c["num_pending"])} pending, '
        f"{e(c['num_ack_pending'])} unacknowledged, {e(c['num_redelivered'])} redelivered</span>"
        for c in stream["consumers"]
    )


def _links(stream: dict[str, Any], root: str) -> str:
    links = stream.get("links") or {}
    parts = [f"<code>{e(stream['asset_uri'])}</code>"]
    if links.get("asset"):
        parts.append(link(root + links["asset"]["href"], f"asset {links['asset']['name']}"))
    parts += [link(root + run["href"], f"{run['dag_id']} / {run['run_id']}") for run in links.get("runs") or []]
    return "<br>".join(parts)


def _domain(domain: dict[str, Any], root: str) -> str:
    name = domain["domain"]
    if not domain["reachable"]:
        body = f'<p class="bad">unreachable since {e(domain.get("since"))}: {e(domain["reason"])}</p>'
    elif domain.get("error"):
        body = f'<p class="bad">{e(domain["error"])}</p>'
    elif not domain["streams"]:
        body = "<p>no streams</p>"
    else:
        rows = [
            [
                e(s["name"]),
                e(f"{s['messages']} msgs, seq {s['first_seq']}..{s['last_seq']}"),
                e((s["cluster"] or {}).get("summary", "single server")),
                _replication(s),
                _consumers(s),
                _links(s, root),
            ]
            for s in domain["streams"]
        ]
        body = table(["Stream", "Messages", "Cluster", "Replication", "Consumers", "Asset and runs"], rows)
    return f'<section id="domain-{e(name)}"><h2>Domain {e(name)}</h2>{body}</section>'


def render_page(
    conn_ids: list[str], chosen: str | None, overview: dict[str, Any] | None, error: str | None, root: str = ""
) -> str:
    """The whole page: the connection chooser, then (with a chosen connection) its domains, streams and history.
    ``root``: the way from the page up to Airflow's base URL (``../../``), for links that must work under a
    base path too."""
    options = "".join(f'<option value="{e(c)}"{" selected" if c == chosen else ""}>{e(c)}</option>' for c in conn_ids)
    chooser = (
        f'<form method="get" action="{e(root)}jetstream/">'
        f'<label>Connection <select name="conn_id">{options}</select></label> '
        '<button type="submit">Check</button></form>'
    )
    parts = [f"<h1>NATS JetStream</h1>{chooser}"]
    if error:
        parts.append(f'<p class="bad" id="error">{e(error)}</p>')
    if overview:
        conn = overview["connection"]
        where = conn["domain"] or conn["api_prefix"] or "the servers' own JetStream"
        parts.append(
            f'<p class="muted">Connection {e(conn["conn_id"])}: {e(", ".join(conn["servers"]))}, {e(where)}; '
            f"checked {e(overview['checked_at'])}, again every {REFRESH} s</p>"
        )
        rows = [
            [
                e(d["domain"]),
                e(d["role"]),
                f'<span class="{"ok" if d["reachable"] else "bad"}" data-reachable="{str(d["reachable"]).lower()}">'
                f"{'reachable' if d['reachable'] else 'unreachable'}</span>",
                e(d.get("since")),
                e(len(d["streams"]) if d["reachable"] else "unknown"),
            ]
            for d in overview["domains"]
        ]
        parts.append("<h2>Domains</h2>" + table(["Domain", "Role", "State", "Since", "Streams"], rows, "domains"))
        parts += [_domain(d, root) for d in overview["domains"]]
        news = list(reversed((overview.get("history") or {}).get("news") or []))
        parts.append(
            '<h2>History</h2><p class="muted">What changed between checks, newest first.</p>'
            + table(["At", "What changed"], ([e(n["at"]), e(n["what"])] for n in news), "history")
        )
    refresh = f'<meta http-equiv="refresh" content="{REFRESH}">' if overview else ""
    return (
        f'<!doctype html><html><head><meta charset="utf-8">{refresh}<title>JetStream</title>'
        f"<style>{STYLE}</style></head><body>{''.join(parts)}<script>{TOP_LINKS}</script></body></html>"
    )
