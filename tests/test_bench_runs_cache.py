"""benchmarks/runs_cache.py: the training runs a benchmark keeps in a JSONL file, trained in
spawned workers and appended as each ends."""

from __future__ import annotations

import pytest
from benchmark_scripts import load

runs_cache = load("runs_cache")


def test_no_file_holds_no_runs(tmp_path):
    assert runs_cache.load(tmp_path / "none.jsonl") == []


@pytest.mark.slow
def test_each_run_is_appended_as_it_ends_and_read_back(tmp_path, capsys):
    """Runs already in the file stay; each new run (here `dict` of a job, in a spawned worker)
    is appended and counted on its line."""
    cache = tmp_path / "deep" / "runs.jsonl"
    cache.parent.mkdir()
    cache.write_text('{"job": 0}\n\n')
    jobs = [[("job", i)] for i in (1, 2, 3)]
    runs_cache.train_missing(
        jobs, dict, cache, workers=2, cached=1, tasks_per_worker=1, line=lambda r: f"job {r['job']}"
    )
    assert sorted(r["job"] for r in runs_cache.load(cache)) == [0, 1, 2, 3]
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "3 runs to train (1 cached)"
    counts, runs = zip(*(line.split(" ", 1) for line in printed[1:]))
    assert sorted(counts) == ["1/3", "2/3", "3/3"] and sorted(runs) == ["job 1", "job 2", "job 3"]


def test_a_runs_line_ends_with_its_validation_loss_and_wall_time():
    run = {"result": {"metrics": {"val_loss": 1.23456}, "wall_s": 12.4}}
    assert runs_cache.outcome(run) == "val_loss 1.2346 in 12 s"
    assert runs_cache.outcome({"result": {"metrics": {}, "wall_s": 3}}) == "val_loss nan in 3 s"
