"""`archsearch dashboard`: optuna-dashboard on the study's storage, and one page of our own.

optuna-dashboard (its WSGI app, mounted as is) shows the study with our objective names (the
sweep sets them as the study's metric names), its Pareto-front view, and every trial's user
attributes (status, reason, summary, family, costs, ...). What it lacks for this use is added
as the page `/archsearch`: the front on any device profile (the stored cost numbers for
another device, or the cost model for one the sweep did not price), any pair or triple of
axes, points coloured by mixer family or by attention share, the infeasible and untrained
trials marked, the front's table with the command that exports each trial, and, on request,
what the study learned on that device (`archsearch.analysis.insights`). The page
reads the study again when a trial has been added or has ended since the last draw (one query
tells), so it follows a sweep that is still running, and redraws a large study at once.

Nothing is written to the study, and the server is local: it listens on 127.0.0.1 unless
`host=` says otherwise, answers only GET and HEAD (optuna-dashboard's write API, which could
delete a study or change its notes, is refused with 405), only requests whose Host header names
this machine (an allow-list against DNS rebinding: 403 otherwise; a Host header that is not
one host and port, with userinfo or repeated, is refused with 400), and takes devices only by
name, in `device=` and inside an axis label alike: a registered profile or one the study was
priced for, never a path (no file is read because a request named it).
"""

from __future__ import annotations

import functools
import html
import json
import re
import string
import threading
from importlib import resources
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from archsearch.analysis import confirm
from archsearch.analysis.front_table import (
    SHOWN_ROWS,
    export_command,
    front_columns,
    latency_note,
    row_cell,
    shown_note,
)
from archsearch.analysis.insights import insights
from archsearch.analysis.pareto import analyse, choose_axes
from archsearch.analysis.plots import front_figure
from archsearch.errors import UserError
from archsearch.study import StudyData, load

__all__ = [
    "PAGE",
    "Answers",
    "allowed_devices",
    "allowed_hosts",
    "front_payload",
    "host_name",
    "make_app",
    "optuna_study_path",
    "page_html",
    "read_only_and_local",
    "serve",
]

PAGE = "/archsearch"


def front_payload(
    url: str,
    study_name: str,
    home: Path | None,
    query: dict[str, str],
    *,
    data: StudyData | None = None,
) -> str:
    """The JSON the page draws: the plotly figure, the front table, a caption (of the study
    as read now, or of `data`, the study as read before)."""
    from archsearch.latency import load_device  # on demand: numpy and the profiles

    data = data or load(url, study_name)
    data.home = home
    device = query.get("device") or data.meta.get("device") or "rpi5"
    known = allowed_devices(data.meta)
    if device not in known:
        raise UserError(f"unknown device {device!r} (known: {', '.join(known)})", key="device")
    load_device(device)
    axes, is_default = choose_axes(
        data,
        device,
        query.get("x") or None,
        query.get("y") or None,
        query.get("z") or None,
        devices=known,  # a device inside an axis label: by name too, never a path
    )
    p = analyse(data, device, axes, is_default=is_default)
    cols = front_columns(p)
    rows = [
        [row_cell(k, row) for k, _ in cols] + [export_command(p, row["trial"])]
        for row in p.front_rows(SHOWN_ROWS)
    ]
    rest = {
        "columns": [t for _, t in cols] + ["export"],
        "rows": rows,
        "front_trials": [r.number for r, _ in p.front],
        "n_trained": len(p.trained),
        "caption": (
            f"{len(p.study.records)} trials; front of {int(p.on_front.sum())} among "
            f"{len(p.trained)} fully trained; hypervolume {p.hypervolume:.4g} against the "
            f"reference point ({', '.join(f'{x:.4g}' for x in p.reference)})"
            + (f"; {shown_note(p, SHOWN_ROWS)}" if shown_note(p, SHOWN_ROWS) else "")
            + (f"; latency error: {latency_note(p)}" if latency_note(p) else "")
            + (f"; {data.unreadable_note()}" if data.unreadable else "")
        ),
        "axes": [a.label for a in p.axes],
        "device": device,
        "confirmation": confirm.panel(data),  # `archsearch confirm`'s figures, if any
        "noise": p.noise.describe(),  # the seed-noise line under the caption
    }
    return '{"figure": ' + front_figure(p).to_json() + ', "info": ' + json.dumps(rest) + "}"


def page_html(study_name: str, study_page: str, devices: list[str], device: str) -> str:
    """The archsearch page: device and axes controls, the figure and the front's table, drawn
    from `PAGE/api/front`; `study_page` links optuna-dashboard's page of the study."""
    e = html.escape
    options = "".join(
        f'<option value="{e(d)}"{" selected" if d == device else ""}>{e(d)}</option>'
        for d in devices
    )
    return _page_template().substitute(
        study_name=e(study_name), study_page=e(study_page), options=options, page=PAGE
    )


@functools.cache
def _page_template() -> string.Template:
    """`dashboard.html` beside this module: the page's markup, style and script, with
    `$study_name`, `$study_page`, `$options` and `$page` (the page's path) to fill in."""
    text = resources.files("archsearch.analysis").joinpath("dashboard.html").read_text("utf-8")
    return string.Template(text)


def optuna_study_path(storage, study_name: str) -> str:
    """optuna-dashboard's page of the study (its id through the storage's public API)."""
    return f"/dashboard/studies/{storage.get_study_id_from_name(study_name)}"


class Answers:
    """The page's answers while the study stays the same: a study of 100,000 trials is read
    once, and each device and set of axes is answered once, until a trial is added or ends
    (`StudyData.current_version`, one query per request); then the study is read again."""

    def __init__(self, url: str, study_name: str, home: Path | None) -> None:
        self.url, self.study_name, self.home = url, study_name, home
        self.data: StudyData | None = None
        self.payloads: dict[tuple, str] = {}
        self.lock = threading.Lock()

    def front(self, query: dict[str, str]) -> str:
        with self.lock:  # the server answers in threads; one reads the study at a time
            if (
                self.data is None
                or self.data.version is None
                or (self.data.current_version() != self.data.version)
            ):
                self.data, self.payloads = load(self.url, self.study_name), {}
            key = tuple(sorted(query.items()))
            if key not in self.payloads:
                self.payloads[key] = front_payload(
                    self.url, self.study_name, self.home, query, data=self.data
                )
            return self.payloads[key]

    def learned(self, device: str) -> str:
        """What the study learned on `device` (`insights_payload`), once per study version."""
        with self.lock:
            if self.data is None or self.data.current_version() != self.data.version:
                self.data, self.payloads = load(self.url, self.study_name), {}
            key = (("insights", device),)
            if key not in self.payloads:
                self.payloads[key] = insights_payload(self.data, device)
            return self.payloads[key]


def insights_payload(data: StudyData, device: str) -> str:
    """The JSON of the page's "What the study learned": its sections of statements on
    `device` (`archsearch.analysis.insights`, with the report's resamples)."""
    from archsearch.analysis.report import REPORT_IMPORTANCE_RESAMPLES, REPORT_RESAMPLES

    known = allowed_devices(data.meta)
    if device not in known:
        raise UserError(f"unknown device {device!r} (known: {', '.join(known)})", key="device")
    got = insights(
        data,
        [device],
        fronts=[device],
        resamples=REPORT_RESAMPLES,
        importance_resamples=REPORT_IMPORTANCE_RESAMPLES,
    )
    return json.dumps({"device": device, "sections": got.sections()})


def make_app(storage, url: str, study_name: str, home: Path | None = None):
    """optuna-dashboard's WSGI app on `storage` (`archsearch.study.open_storage(url)`) with the
    archsearch page and its JSON route added."""
    import bottle
    from optuna_dashboard import wsgi

    app = wsgi(storage)
    answers = Answers(url, study_name, home)
    data = load(url, study_name)
    study_page = optuna_study_path(storage, study_name)
    devices = allowed_devices(data.meta)
    default_device = data.meta.get("device") or "rpi5"

    @app.get(PAGE)
    def page() -> str:
        return page_html(study_name, study_page, devices, default_device)

    @app.get(f"{PAGE}/plotly.min.js")
    def plotly_js() -> str:
        from plotly.offline import get_plotlyjs

        bottle.response.content_type = "application/javascript"
        return get_plotlyjs()

    @app.get(f"{PAGE}/api/insights")
    def api_insights() -> str:
        bottle.response.content_type = "application/json"
        device = bottle.request.query.getunicode("device") or default_device
        try:
            return answers.learned(device)
        except UserError as err:
            bottle.response.status = 400
            return json.dumps({"error": str(err)})

    @app.get(f"{PAGE}/api/front")
    def api_front() -> str:
        bottle.response.content_type = "application/json"
        query = {k: bottle.request.query.getunicode(k) for k in ("device", "x", "y", "z")}
        try:
            return answers.front({k: v for k, v in query.items() if v})
        except UserError as err:
            bottle.response.status = 400
            return json.dumps({"error": str(err)})

    return app


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def get_environ(self) -> dict[str, Any]:
        """The WSGI environ, and how many Host headers came (wsgiref joins them with commas)."""
        environ = super().get_environ()
        environ[HOST_COUNT] = len(self.headers.get_all("Host") or [])
        return environ


def allowed_devices(meta: dict[str, Any]) -> list[str]:
    """Device profiles a request may name: the registered ones and those the study stores."""
    from archsearch.cost.devices import device_names

    stored = [d for d in meta.get("devices", []) if isinstance(d, str) and "/" not in d]
    return sorted(set(device_names()) | set(stored))


LOCAL_NAMES = ("127.0.0.1", "localhost", "::1")


def allowed_hosts(host: str) -> set[str]:
    """Host header names that reach this server: loopback, and the address it listens on (with
    this machine's names when it listens on every interface)."""
    import socket

    names = {*LOCAL_NAMES, host.lower()}
    if host in ("0.0.0.0", "::", ""):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return names


_HOST = re.compile(r"(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?")
HOST_COUNT = "archsearch.host_headers"  # environ key: how many Host headers the request had


def host_name(header: str) -> str | None:
    """The host a Host header names (RFC 9110: host and optional port), lower case; None
    when it is not one: userinfo (`user@host`, `host:port@other`), a list (two headers
    joined by a comma), a port that is not a number up to 65535, or anything else."""
    m = _HOST.fullmatch(header.strip().lower())
    if m is None or (m["port"] is not None and int(m["port"]) > 65535):
        return None
    return m["ip6"] or m["name"]


def read_only_and_local(app, hosts: set[str]):
    """The WSGI app behind three checks: one Host header, parsed as a host and port (400
    otherwise), naming an allowed host (403 otherwise), and the method GET or HEAD (405
    otherwise)."""

    def guarded(environ: dict[str, Any], start_response):
        name = host_name(environ.get("HTTP_HOST", ""))
        if environ.get(HOST_COUNT, 1) > 1 or (name is None and environ.get("HTTP_HOST")):
            start_response("400 Bad Request", [("Content-Type", "text/plain")])
            return [b"one Host header, naming a host and port, is required\n"]
        if name not in hosts:
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"this dashboard answers only requests to this machine's own names\n"]
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b"the archsearch dashboard is read-only\n"]
        return app(environ, start_response)

    return guarded


def serve(app, host: str, port: int):
    """A threaded WSGI server (wsgiref) bound to host:port (0: a free port), read-only and
    answering only requests addressed to this machine (`read_only_and_local`)."""
    app = read_only_and_local(app, allowed_hosts(host))
    try:
        return make_server(host, port, app, server_class=_Server, handler_class=_QuietHandler)
    except OSError as err:
        raise UserError(
            f"cannot listen on {host}:{port}: {err.strerror or err}", key="port"
        ) from None
