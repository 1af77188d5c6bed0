"""Long commands report progress on stderr: one line per step with an ETA when stderr is not a
terminal, and stdout stays the same one JSON document with `format=json`."""

from __future__ import annotations

import io
import json
import math
import re
import subprocess
import sys

import pytest
from conftest import EXE

from archsearch.cli.progress import StepProgress, step_line

LINE = re.compile(
    r"^\d\d:\d\d:\d\d prune mcsd: (\d+)/(\d+) assignments built \(\d+%\); "
    r"\S+ (ms|s|min \d\d s) elapsed, (ETA \S+ (ms|s)|ETA \d+ min \d\d s|done)$"
)


@pytest.mark.slow
def test_prune_with_stderr_redirected_prints_a_line_per_step_and_json_on_stdout(tmp_path):
    err = tmp_path / "stderr.log"
    with err.open("w") as stderr:
        proc = subprocess.run(
            [EXE, "prune", "search_space=mcsd", "format=json"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
    assert proc.returncode == 0
    data = json.loads(proc.stdout)  # nothing but the JSON document
    assert {"assignments", "survivors", "candidates", "pruned_by_constraint"} <= set(data)
    lines = err.read_text().splitlines()
    matches = [LINE.match(line) for line in lines]
    assert all(matches), lines
    done = [int(m.group(1)) for m in matches]
    total = data["assignments"]
    assert {int(m.group(2)) for m in matches} == {total}
    every = math.ceil(total / 20)
    assert done == [*range(every, total, every), total]  # one line per twentieth, then the end
    assert all(m.group(4).startswith("ETA") for m in matches[:-1])
    assert matches[-1].group(4) == "done"


def test_step_lines_estimate_the_rest_from_the_pace_so_far():
    assert step_line("calibrate", 1, 4, "steps", 10.0).endswith("(25%); 10 s elapsed, ETA 30 s")
    assert step_line("x", 0, 4, "steps", 1.0).endswith("ETA unknown")
    stream = io.StringIO()
    with StepProgress("profile", stream=stream) as progress:
        assert not progress.live  # a StringIO is not a terminal
        for k in range(1, 4):
            progress(k, 3, "architectures predicted")
    lines = stream.getvalue().splitlines()
    assert [line.split(": ", 1)[1].split(";")[0] for line in lines] == [
        f"{k}/3 architectures predicted ({k / 3:.0%})" for k in range(1, 4)
    ]


def test_with_format_json_stdout_is_the_document_even_when_another_thread_prints(
    monkeypatch, capsys
):
    # what Ray's driver does: its log thread relays "(raylet) node marked dead" to stdout while
    # the command runs; the JSON document must still be all stdout holds
    import threading

    from archsearch.cli import main, space_cmd

    real_open = space_cmd.open_space

    def open_space_while_a_thread_prints(**kw):
        t = threading.Thread(target=print, args=("(raylet) node 3f2a marked dead",))
        t.start()
        t.join()
        print("a library's own print")
        return real_open(**kw)

    monkeypatch.setattr(space_cmd, "open_space", open_space_while_a_thread_prints)
    assert main(["space", "sample", "search_space=tiny", "n=2", "format=json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["candidates"]) == 2, out
    assert "(raylet) node 3f2a marked dead" in err and "a library's own print" in err
    # and without format=json nothing is moved: the table and the prints share stdout
    assert main(["space", "sample", "search_space=tiny", "n=2"]) == 0
    assert "(raylet) node 3f2a marked dead" in capsys.readouterr().out


@pytest.mark.slow
def test_the_program_exits_with_the_commands_code_leaving_the_heap_to_the_os(tmp_path):
    """`archsearch` (the console script) and `python -m archsearch.cli` run `entry`: the
    command's output is all written, its exit code is the program's, and the heap is frozen
    before the interpreter's last collection (which took 2-3 s after a sweep)."""
    probe = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen at exit:', gc.get_freeze_count() > 0, "
        "file=sys.stderr))\n"
        "sys.argv = ['archsearch', *sys.argv[1:]]\n"
        "from archsearch.cli import entry\n"
        "entry()\n"
    )
    run = lambda *cmd: subprocess.run(  # noqa: E731
        cmd, capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    ok = run(sys.executable, "-c", probe, "space", "sample", "search_space=tiny", "format=json")
    assert ok.returncode == 0 and "frozen at exit: True" in ok.stderr, ok.stderr
    assert len(json.loads(ok.stdout)["candidates"]) == 20  # the default n
    bad = run(sys.executable, "-c", probe, "space", "sample", "search_space=tiny", "n=-1")
    assert bad.returncode == 2 and bad.stderr.startswith("archsearch: error: n: must be positive")
    for cmd in ([EXE], [sys.executable, "-m", "archsearch.cli"]):
        out = run(*cmd, "space", "sample", "search_space=tiny", "n=2", "format=json")
        assert out.returncode == 0 and len(json.loads(out.stdout)["candidates"]) == 2
        assert run(*cmd, "space", "sample", "search_space=nope").returncode == 2
