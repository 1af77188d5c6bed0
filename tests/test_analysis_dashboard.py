"""`archsearch dashboard` in a real browser: the command serves a stored study on a free port;
headless Chromium (Debian's, driven by Playwright; never a downloaded browser) loads the
archsearch page and optuna-dashboard's own pages, the Pareto plots render with the expected
number of points, switching device redraws the right front, screenshots are saved, and
everything started here is stopped."""

from __future__ import annotations

import json
import select
import signal
import subprocess
from pathlib import Path

import pytest
from conftest import EXE
from playwright.sync_api import sync_playwright
from studies import OBJECTIVES, make_study

from archsearch.analysis.pareto import analyse, choose_axes
from archsearch.study import load

CHROMIUM = "/usr/bin/chromium"  # Debian's package (.ci/run installs it)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# rendered points (SVG) of each visible trace of a plotly graph, by trace name
RENDERED = """(id) => {
  const g = document.getElementById(id);
  const data = g._fullData.filter((t) => t.visible === true);
  const dom = [...g.querySelectorAll('.scatterlayer .trace')];
  return data.map((t, i) => [t.name, dom[i].querySelectorAll('.point').length]);
}"""


def expected(db_dir: Path, device: str) -> dict:
    data = load(str(db_dir))
    axes, _ = choose_axes(data, device, None, None, None)
    p = analyse(data, device, axes)
    placed = sum(1 for v in p.other_values if (v == v).sum() >= 1)  # one unknown axis: the band
    return {
        "front": [r.number for r, _ in p.front],
        "trained": len(p.trained),
        "others": placed,
        "complete": sum(1 for r in data.records if r.state == "COMPLETE"),
    }


def start_dashboard(study: Path) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen(
        [EXE, "dashboard", f"study={study}", "port=0", "format=json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=study,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        raise AssertionError(f"the dashboard did not start: {proc.stderr.read()}")
    return proc, json.loads(line)


@pytest.mark.slow
def test_dashboard_pages_render_the_fronts_in_chromium(tmp_path):
    make_study(tmp_path / "study.db")
    rpi5, jetson = expected(tmp_path, "rpi5"), expected(tmp_path, "jetson_orin_nx")
    assert rpi5["front"] and rpi5["others"] >= 3  # infeasible, stopped early, failed trials
    proc, urls = start_dashboard(tmp_path)
    try:
        assert urls["archsearch"].startswith("http://127.0.0.1:")  # loopback unless asked
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                errors: list[str] = []
                page.on("pageerror", lambda e: errors.append(str(e)))

                # our page: the front on the sweep's device, coloured by mixer family
                page.goto(urls["archsearch"])
                page.wait_for_selector('#front[data-ready="1"]', timeout=60_000)
                counts = dict(page.evaluate(RENDERED, "front"))
                assert counts.pop("Pareto front") == len(rpi5["front"])
                other = {
                    k: counts.pop(k)
                    for k in list(counts)
                    if "(" in k or k.startswith(("stopped", "failed"))
                }
                assert sum(other.values()) == rpi5["others"]
                assert sum(counts.values()) == rpi5["trained"]  # one trace per mixer family
                shown = page.get_attribute("#front", "data-front-trials")
                assert shown == ",".join(map(str, rpi5["front"]))
                assert page.locator("#table tr").count() == len(rpi5["front"]) + 1
                page.screenshot(path=str(tmp_path / "archsearch_rpi5.png"), full_page=True)

                # another device: the front is recomputed from that device's stored costs
                page.select_option("#device", "jetson_orin_nx")
                page.click("#controls button")
                want = ",".join(map(str, jetson["front"]))
                page.wait_for_function(
                    "(want) => { const f = document.getElementById('front');"
                    " return f.dataset.ready === '1' && f.dataset.frontTrials === want; }",
                    arg=want,
                    timeout=60_000,
                )
                assert dict(page.evaluate(RENDERED, "front"))["Pareto front"] == len(
                    jetson["front"]
                )
                assert "jetson_orin_nx" in page.inner_text("#front")

                # what the study learned on that device, on request
                page.click("#learn")
                page.wait_for_selector('#insights[data-ready="1"]', timeout=120_000)
                learned = page.inner_text("#insights")
                assert "What the analysis stands on" in learned
                assert "decode_ms@jetson_orin_nx" in learned

                # colour by attention share instead of family
                page.get_by_text("colour: attention share").click()
                page.wait_for_function(
                    "() => document.getElementById('front')._fullData"
                    ".some((t) => t.name === 'attention share' && t.visible === true)"
                )
                counts = dict(page.evaluate(RENDERED, "front"))
                assert counts["attention share"] == jetson["trained"]
                page.screenshot(path=str(tmp_path / "archsearch_share.png"), full_page=True)

                # a bad axis is reported on the page, not as a broken plot
                page.fill("#x", "latency")
                page.click("#controls button")
                page.wait_for_selector(
                    '#front[data-ready="error"]', state="attached", timeout=60_000
                )
                assert "unknown metric 'latency'" in page.inner_text("#status")

                # optuna-dashboard itself: its Pareto view with our objective names
                page.goto(urls["optuna_dashboard"])
                page.wait_for_function(
                    "() => { const g = document.getElementById('graph-pareto-front');"
                    " return g && g.querySelectorAll('.scatterlayer .point').length > 0; }",
                    timeout=60_000,
                )
                points = page.evaluate(
                    "() => document.querySelectorAll('#graph-pareto-front .scatterlayer .point')"
                    ".length"
                )
                assert points == rpi5["complete"]  # its view plots every COMPLETE trial
                assert OBJECTIVES[1] in page.inner_text("body")
                page.screenshot(path=str(tmp_path / "optuna_dashboard.png"), full_page=True)

                # ... and its trial list shows our trial attributes
                page.goto(urls["optuna_dashboard"] + "/trials")
                page.wait_for_selector("text=User Attributes", timeout=60_000)
                text = page.inner_text("body")
                assert "arch_hash" in text and "device_costs" in text and "status" in text
                assert not errors, errors
            finally:
                browser.close()
        for name in ("archsearch_rpi5", "archsearch_share", "optuna_dashboard"):
            assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0


def test_answers_are_reused_until_a_trial_is_added(tmp_path, monkeypatch):
    """The page reads a study once per change: the same question is answered from memory, a
    new or ended trial makes the next answer read the study again and include it."""
    from archsearch.analysis import dashboard
    from archsearch.study import Status, StudyMeta, StudyWriter, open_storage

    made = make_study(tmp_path / "study.db", n=10)
    reads = []
    real_load = dashboard.load
    monkeypatch.setattr(dashboard, "load", lambda *a: reads.append(a) or real_load(*a))
    answers = dashboard.Answers(made["url"], made["name"], None)
    first = answers.front({})
    assert answers.front({}) == first and len(reads) == 1
    other = answers.front({"device": "jetson_orin_nx"})
    assert other != first and len(reads) == 1
    data = real_load(made["url"])
    trials_before = json.loads(first)["info"]["caption"].split(" trials")[0]
    writer, _ = StudyWriter.create_or_open(
        open_storage(made["url"]), made["name"], StudyMeta.from_study(data.study)
    )
    writer.add_finished(Status.FAILED, "a new trial")
    again = answers.front({})
    assert len(reads) == 2
    assert json.loads(again)["info"]["caption"].split(" trials")[0] == str(int(trials_before) + 1)
