"""`archsearch pareto` and `archsearch export` on a stored study (written with Optuna in the
sweep's schema by `tests/studies.py`): the front against brute force, any device
and any axes re-computed from the stored costs, the files, the export round trip into
`archsearch train` and transformers, and the bad-input contract."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from conftest import EXE
from studies import OBJECTIVES, make_study

from archsearch.arch import ArchConfig
from archsearch.cli import main
from archsearch.latency import metric_value
from archsearch.metrics import MetricSpec


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    info = make_study(run_dir / "study.db")
    return run_dir, info


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def trials(run_dir: Path) -> list:
    st = optuna.load_study(study_name="tiny", storage=f"sqlite:///{run_dir / 'study.db'}")
    return st.get_trials(deepcopy=False)


def brute_front(points: dict[int, tuple[float, ...]]) -> set[int]:
    """Trials no other trial dominates (all axes minimised)."""
    out = set()
    for i, p in points.items():
        if not any(
            all(a <= b for a, b in zip(q, p)) and any(a < b for a, b in zip(q, p))
            for j, q in points.items()
            if j != i
        ):
            out.add(i)
    return out


def trained_unique(run_dir: Path) -> list:
    seen, out = set(), []
    for t in trials(run_dir):
        if t.user_attrs["status"] == "trained" and t.user_attrs["arch_hash"] not in seen:
            seen.add(t.user_attrs["arch_hash"])
            out.append(t)
    return out


@pytest.mark.slow
def test_pareto_front_files_and_reports(study, capsys, tmp_path):
    run_dir, info = study
    code, out, err = run(["pareto", f"study={run_dir}", "format=json"], capsys)
    assert code == 0, err
    res = json.loads(out)
    # the front: brute force over the fully trained trials' stored objective values
    trained = trained_unique(run_dir)
    expect = brute_front({t.number: tuple(t.values) for t in trained})
    assert {row["trial"] for row in res["front"]} == expect
    assert res["fully_trained"] == len(trained) == len(info["by_status"]["trained"])
    assert res["statuses"]["duplicate"] == 1 and res["statuses"]["infeasible"] >= 1
    # axes: latency on x, loss on y, the sweep's device; the front sorted by latency
    assert [a["label"] for a in res["axes"]] == [OBJECTIVES[1], OBJECTIVES[0]]
    lat = [row[OBJECTIVES[1]] for row in res["front"]]
    assert lat == sorted(lat)
    # hypervolume: the stated reference point bounds every trial, the history ends at it
    ref = res["reference_point"]
    assert all(t.values[1] < ref[0] and t.values[0] < ref[1] for t in trained)
    hist = [hv for _, hv in res["hypervolume_history"]]
    assert hist == sorted(hist) and hist[-1] == pytest.approx(res["hypervolume"])
    files = {k: Path(v) for k, v in res["files"].items()}
    assert files["png"].parent == run_dir / "pareto" / "rpi5"
    for key in ("png", "hypervolume_png"):
        assert files[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = files["html"].read_text()
    assert "Pareto front" in page and 'src="plotly.min.js"' in page
    assert (files["html"].parent / "plotly.min.js").stat().st_size > 1_000_000  # offline
    # the reports list every front trial's full configuration, which loads back
    md = files["report_md"].read_text()
    blocks = md.split("```yaml\n")[1:]
    assert len(blocks) == len(expect)
    by_number = {t.number: t for t in trained}
    for row, block in zip(res["front"], blocks):
        arch = ArchConfig.from_dict(yaml.safe_load(block.split("```")[0]))
        assert arch.arch_hash == by_number[row["trial"]].user_attrs["arch_hash"]
        assert f"trial={row['trial']}" in md
    html = files["report_html"].read_text()
    assert html.count("<h3>Trial ") == len(expect) and "Plotly.newPlot" in html
    assert json.loads(files["json"].read_text())["front"] == res["front"]
    # the table form prints the same front
    code, out, _ = run(["pareto", f"study={run_dir}", "plots=false"], capsys)
    assert code == 0 and "Pareto front of tiny on rpi5" in out
    assert all(f"\u2502 {n} " in out for n in expect)


def test_another_device_and_other_axes_are_recomputed_from_the_stored_costs(
    study, capsys, tmp_path
):
    run_dir, _ = study
    code, out, err = run(
        ["pareto", f"study={run_dir}", "device=jetson_orin_nx", "format=json", "plots=false"],
        capsys,
    )
    assert code == 0, err
    res = json.loads(out)
    label = "decode_ms[jetson_orin_nx,context=1024,precision=fp16]"
    stored = {
        t.number: json.loads(t.user_attrs["device_costs"])["jetson_orin_nx"][label]
        for t in trained_unique(run_dir)
    }
    losses = {t.number: t.values[0] for t in trained_unique(run_dir)}
    assert {r["trial"] for r in res["front"]} == brute_front(
        {n: (stored[n], losses[n]) for n in stored}
    )
    assert all(r[label] == stored[r["trial"]] for r in res["front"])

    # a device profile the sweep never priced (a file, known by its name): the cost model on
    # the stored arch
    profile = yaml.safe_load(
        (Path(__file__).parents[1] / "conf" / "device" / "rpi5.yaml").read_text()
    )
    profile["memory_bandwidth"] = float(profile["memory_bandwidth"]) * 4
    del profile["name"]  # rpi5's: one name never means two profiles (refused)
    dev = tmp_path / "fast_pi.yaml"
    dev.write_text(yaml.safe_dump(profile))
    code, out, err = run(
        [
            "pareto",
            f"study={run_dir}",
            f"device={dev}",
            "x=decode_ms@context:4096",
            "y=val_loss",
            "format=json",
            "plots=false",
        ],
        capsys,
    )
    assert code == 0, err
    res = json.loads(out)
    label = res["axes"][0]["label"]
    assert label == "decode_ms[fast_pi,context=4096,precision=fp16]"
    archs = {
        t.number: ArchConfig.from_dict(json.loads(t.user_attrs["arch"])) for t in trials(run_dir)
    }
    spec = MetricSpec("decode_ms", (("device", str(dev)), ("context", 4096), ("precision", "fp16")))
    for row in res["front"]:
        assert row[label] == pytest.approx(metric_value(archs[row["trial"]], spec))

    # loss against KV-cache bytes, a third axis, and a stated reference point
    code, out, err = run(
        [
            "pareto",
            f"study={run_dir}",
            "x=cache_bytes",
            "y=val_loss",
            "z=active_params",
            "reference=[1e7,10,1e8]",
            f"out={tmp_path / 'three'}",
            "format=json",
        ],
        capsys,
    )
    assert code == 0, err
    res = json.loads(out)
    assert [a["label"] for a in res["axes"]] == [
        "cache_bytes[context=1024,bits=16,batch=1]",
        "val_loss",
        "active_params",
    ]
    assert res["reference_point"] == [1e7, 10, 1e8]
    assert "scatter3d" in (tmp_path / "three" / "front.html").read_text()
    pts = {
        t.number: (
            json.loads(t.user_attrs["costs"])["cache_bytes[context=1024,bits=16,batch=1]"],
            t.values[0],
            t.user_attrs["active_params"],
        )
        for t in trained_unique(run_dir)
    }
    assert {r["trial"] for r in res["front"]} == brute_front(pts)


def test_sweep_epilogue_writes_the_plots_of_the_sweeps_device(study, capsys):
    from archsearch.cli.sweep_cmd import print_summary

    run_dir, info = study
    summary = {
        "study_name": "tiny",
        "storage": info["url"],
        "run_dir": str(run_dir),
        "device": "rpi5",
        "counts": {"trained": 9},
        "trained_in_study": 9,
        "wall_s": 1.0,
    }
    print_summary(summary, fmt="json")
    res = json.loads(capsys.readouterr().out)
    assert {Path(p).name for p in res["files"].values()} >= {"front.png", "report.md", "front.html"}
    assert all(Path(p).is_file() for p in res["files"].values())
    assert res["front"] and res["dashboard"] == f"archsearch dashboard study={run_dir}"


@pytest.mark.slow
def test_export_round_trips_into_archsearch_train(study, capsys, tmp_path):
    run_dir, info = study
    number = info["by_status"]["trained"][0]
    code, out, err = run(
        [
            "export",
            f"study={run_dir / 'study.db'}",
            f"trial={number}",
            f"out={tmp_path}",
            "format=json",
        ],
        capsys,
    )
    assert code == 0, err
    res = json.loads(out)
    stored = next(t for t in trials(run_dir) if t.number == number)
    preset = Path(res["preset"])
    assert preset == tmp_path / f"tiny_trial{number}.yaml"
    arch = ArchConfig.from_yaml(preset)
    assert arch.arch_hash == stored.user_attrs["arch_hash"] == res["arch_hash"]
    assert f"val_loss = {stored.values[0]:.6g}" in preset.read_text()
    # ready for a full training run: `archsearch train arch=<that file>` trains it
    train = subprocess.run(
        [
            EXE,
            "train",
            f"arch={preset}",
            "budget=steps:2",
            f"run_dir={tmp_path / 'train'}",
            "format=json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert train.returncode == 0, train.stderr
    trained = json.loads(train.stdout)
    assert trained["status"] == "completed"
    assert trained["arch_hash"] == arch.arch_hash and trained["arch_name"] == preset.stem
    # the table form names the files and marks what does not map
    code, out, _ = run(["export", f"study={run_dir}", f"trial={number}", f"out={tmp_path}"], capsys)
    assert code == 0 and str(preset) in out


def tiny(**kw) -> ArchConfig:
    base = {
        "vocab_size": 256,
        "d_model": 64,
        "n_layers": 2,
        "ffn": {"kind": "swiglu", "d_ffn": 128},
    }
    base.update(kw)
    return ArchConfig.from_dict(base)


@pytest.mark.slow
def test_hf_config_matches_the_model_for_llama_mla_mistral_and_mixtral():
    import torch
    import transformers

    from archsearch.analysis.export import hf_config
    from archsearch.models import build_model

    cases = {
        "llama": tiny(attention={"kind": "gqa", "n_heads": 4, "n_kv_heads": 2, "rope_theta": 5e5}),
        "deepseek_v2": tiny(attention={"kind": "mla", "n_heads": 4, "kv_rank": 32, "rope_dim": 8}),
        "mistral": tiny(
            max_seq_len=128,
            attention={"kind": "mqa", "n_heads": 4, "window": 32},
            ffn={"kind": "geglu", "d_ffn": 96},
        ),
        "mixtral": tiny(
            attention={"kind": "gqa", "n_heads": 4, "n_kv_heads": 2},
            moe={"n_experts": 4, "top_k": 2, "d_expert": 32},
        ),
    }
    for kind, arch in cases.items():
        hf = hf_config(arch)
        assert hf.model_type == kind
        assert hf.exact == (kind != "mixtral")  # mixtral renormalises the top-k gates
        cfg = {k: v for k, v in hf.to_json().items() if not k.startswith("archsearch")}
        config = transformers.AutoConfig.for_model(**cfg)
        model = transformers.AutoModelForCausalLM.from_config(config)
        ours = build_model(arch)
        assert sum(p.numel() for p in model.parameters()) == ours.num_params(), kind
    # llama: with the same weights, the same function
    arch = cases["llama"]
    cfg = {k: v for k, v in hf_config(arch).to_json().items() if not k.startswith("archsearch")}
    hf_model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**cfg)
    )
    ours = build_model(arch).eval()
    with torch.no_grad():
        ours.wte.weight.copy_(hf_model.model.embed_tokens.weight)
        ours.norm_f.weight.copy_(hf_model.model.norm.weight)
        for block, layer in zip(ours.blocks, hf_model.model.layers):
            at = layer.self_attn
            block.mixer.qkv.weight.copy_(
                torch.cat([at.q_proj.weight, at.k_proj.weight, at.v_proj.weight])
            )
            block.mixer.o_proj.weight.copy_(at.o_proj.weight)
            block.ffn.gate.weight.copy_(layer.mlp.gate_proj.weight)
            block.ffn.up.weight.copy_(layer.mlp.up_proj.weight)
            block.ffn.down.weight.copy_(layer.mlp.down_proj.weight)
            block.norm1.weight.copy_(layer.input_layernorm.weight)
            block.norm2.weight.copy_(layer.post_attention_layernorm.weight)
        idx = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(0))
        a, _ = ours(idx)
        b = hf_model.eval()(input_ids=idx, use_cache=False).logits
    assert (a - b).abs().max().item() < 1e-4


def test_hf_config_marks_what_does_not_map():
    from archsearch.analysis.export import hf_config

    mcsd = hf_config(tiny(layers={"mixer": "mcsd"}, mcsd={"n_channels": 4}))
    assert mcsd.config is None and "MCSD" in mcsd.unmapped[0][1]
    hybrid = hf_config(
        tiny(
            n_layers=4,
            layers={"pattern": "LLLN"},
            attention={"kind": "gqa", "n_heads": 4},
            linear={"family": "deltanet", "n_heads": 2},
        )
    )
    assert hybrid.model_type == "delta_net" and not hybrid.exact
    assert hybrid.config["attn"]["layers"] == [3] and hybrid.config["num_heads"] == 2
    assert hybrid.to_json()["archsearch_unmapped"]["linear"]
    relu2 = hf_config(tiny(attention={"kind": "gqa", "n_heads": 4}, ffn={"kind": "relu2"}))
    assert relu2.model_type == "llama" and "ffn.kind" in dict(relu2.unmapped)
    mamba = hf_config(tiny(layers={"mixer": "linear"}, linear={"family": "mamba2"}))
    assert mamba.model_type == "mamba2" and "ffn" in dict(mamba.unmapped)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    (d / "notes.txt").write_text("hello")
    con = sqlite3.connect(d / "other.db")
    con.execute("create table things (x int)")
    con.commit()
    con.close()
    (d / "empty_dir").mkdir()
    two = f"sqlite:///{d / 'two.db'}"
    optuna.create_study(study_name="a", storage=two, directions=["minimize", "minimize"])
    optuna.create_study(study_name="b", storage=two, directions=["minimize", "minimize"])
    optuna.create_study(study_name="e", storage=f"sqlite:///{d / 'empty.db'}")
    return d


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["pareto"], "study: name the study"),
        (["pareto", "study={d}/missing"], "neither a run directory"),
        (["pareto", "study={d}/notes.txt"], "not an SQLite database"),
        (["pareto", "study={d}/other.db"], "not an Optuna study"),
        (["pareto", "study={d}/empty_dir"], "holds no study.db"),
        (["pareto", "study={d}/two.db"], "several studies (a, b)"),
        (["pareto", "study={d}/two.db", "study_name=c"], "no study 'c'"),
        (["pareto", "study={d}/empty.db"], "no fully trained feasible trial"),
        (["pareto", "study={run}", "device=mars"], "unknown device 'mars'"),
        (["pareto", "study={run}", "x=latency"], "x: unknown metric 'latency'"),
        (["pareto", "study={run}", "y=decode_ms@ctx:3"], "takes no argument 'ctx'"),
        (["pareto", "study={run}", "z=params"], "needs x= and y="),
        (["pareto", "study={run}", "x=decode_ms[context=4096]"], "mismatched input '['"),
        (["pareto", "study={run}", "reference=[1.0]"], "one value per axis"),
        (["pareto", "study={run}", "y=probe_acc@recall"], "no fully trained trial has a value"),
        (["pareto", "study=postgresql+psycopg2://u@127.0.0.1:1/x"], "cannot open the study"),
        (["export", "study={run}"], "trial: name the trial"),
        (["export", "study={run}", "trial=999"], "has no trial 999"),
        (["dashboard", "study={d}/empty.db", "port=0"], "no fully trained feasible trial"),
        (["dashboard", "study={run}", "port=70000"], "port"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_changes_nothing(argv, fragment, study, bad_files, capsys):
    run_dir, _ = study
    argv = [a.format(d=bad_files, run=run_dir) for a in argv]
    before = (bad_files / "other.db").read_bytes()
    code, out, err = run(argv, capsys)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("archsearch: error: ") and fragment in err, err
    assert (bad_files / "other.db").read_bytes() == before  # never turned into an Optuna db
    assert not (bad_files / "pareto").exists()


def test_the_help_lists_the_analysis_commands(capsys):
    code, out, _ = run(["--help"], capsys)
    assert all(name in out for name in ("pareto", "export", "dashboard", "profile"))
    code, out, _ = run(["pareto", "--help"], capsys)
    assert code == 0 and "study:" in out and "x=decode_ms@context:4096" in out


def test_the_front_staircase_follows_the_direction_of_x():
    from types import SimpleNamespace

    from archsearch.analysis.front import Axis
    from archsearch.analysis.plots import staircase

    pts = np.array([[3.0, 1.0], [1.0, 2.0]])
    for direction, where in (("minimize", "post"), ("maximize", "pre")):
        p = SimpleNamespace(axes=[Axis("x", direction), Axis("y", "minimize")])
        stairs, got = staircase(p, pts)
        assert got == where and stairs[:, 0].tolist() == [1.0, 3.0]
