"""The documentation cannot drift from the code: the site builds strictly (no warning, no broken
link or anchor, no page outside the navigation; its reference generated from the code), every
`archsearch` command on every page and in the README names real keys, every YAML block parses,
each tutorial runs end to end as written (its shell blocks in order, its YAML files written
where it says), and `archsearch <command> --help` ends with its page's address.

A tutorial runs in its own temp dir as a bash script, verbatim, with three test-only
substitutions: `archsearch` is a shell function that appends small settings to the real command
(`CHEAP`: a few trials of a few thousand tokens, so a tutorial takes a minute, not an hour);
`archsearch dashboard` is started, asked for its pages and stopped; and the cluster tutorial's
site-specific values (`export DATA=...`, `DB`, `HEAD`) are this test's own private PostgreSQL
server, Ray cluster and shards, its `ray start` lines start that private cluster.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pgserver import free_port, private_postgres

from archsearch import DOCS_URL, yamlio
from archsearch.cli import COMMANDS, main
from archsearch.cli.config import compose, to_schema

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BIN = Path(sys.executable).parent
PAGES = sorted(p for p in DOCS.rglob("*.md") if "includes" not in p.parts)
TUTORIALS = ["first-sweep", "own-space", "cluster"]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)

# appended to each command a tutorial runs: the same command, a smaller job
CHEAP = {
    "sweep": "trials=2 budget=tokens:16K train.eval_batches=2",
    "confirm": "factor=2 n=1",
    "train": "budget=tokens:16K",
    "calibrate": "budget=quick repeats=1",
    "profile": "lengths=[16,32] batches=[1] repeats=1",
}
# the cluster tutorial on one machine: CPU trials of a few steps on a 2-node private cluster
CLUSTER_CHEAP = {
    "sweep": "trials=1 concurrency=1 gpus_per_trial=0 cpus_per_trial=1 budget=steps:2 "
    "train.seq_len=64 train.batch_size=2 train.eval_batches=1 train.precision=fp32 "
    "train.eval_at=[1.0] early_stopping=none",
}


def fenced(path: Path) -> list[tuple[str, str]]:
    """The fenced code blocks of a page, in order: (language, text)."""
    return FENCE.findall(path.read_text())


def commands(text: str) -> list[str]:
    """The command lines of a shell block: continuations joined, comments dropped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.append(line)
    return out


# ---- the site -------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_builds_strictly_with_its_generated_reference(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    res = subprocess.run(
        [str(BIN / "mkdocs"), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    assert "WARNING" not in res.stderr, res.stderr[-4000:]
    site = tmp_path / "site"
    for name in COMMANDS:
        page = (site / "reference" / "commands" / name / "index.html").read_text()
        # every key of the command is on its page
        for key in ("format",):
            assert f"<code>{key}</code>" in page, name
    sweep = (site / "reference" / "commands" / "sweep" / "index.html").read_text()
    assert "<code>storage.url</code>" in sweep and "<code>latency.runtime</code>" in sweep
    api = (site / "reference" / "api" / "space" / "index.html").read_text()
    assert 'id="archsearch.space.load_space"' in api
    # the benchmark figures are read from the results
    bench = (site / "benchmarks" / "index.html").read_text()
    assert "benchmarks/results/latency_accuracy.json" in bench


def test_mkdocs_site_url_is_the_address_help_prints():
    config = (ROOT / "mkdocs.yml").read_text()
    assert f"site_url: {DOCS_URL} " in config


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_ends_with_the_commands_page(name, capsys):
    assert main([name, "--help"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"docs: {DOCS_URL}reference/commands/{name}/"
    assert f"reference/commands/{name}.md" in (ROOT / "mkdocs.yml").read_text()


# ---- every command and YAML block on every page -----------------------------------------------


def _archsearch_lines() -> list[tuple[str, str]]:
    out = []
    for path in [ROOT / "README.md", *PAGES]:
        for lang, text in fenced(path):
            if lang not in ("bash", "sh", ""):
                continue
            for line in commands(text):
                for part in re.split(r"\s*(?:&&|\|\||;)\s*", line):
                    part = re.split(r"\s+(?:>|\|)\s", part)[0]  # its output redirected or piped
                    if part.startswith("archsearch "):
                        out.append((str(path.relative_to(ROOT)), part))
    return out


ARCHSEARCH_LINES = _archsearch_lines()


def test_the_docs_show_many_commands():
    assert len(ARCHSEARCH_LINES) > 40
    shown = {shlex.split(line)[1] for _, line in ARCHSEARCH_LINES}
    assert shown == set(COMMANDS)


@pytest.mark.parametrize(("page", "line"), ARCHSEARCH_LINES)
def test_every_archsearch_command_in_the_docs_names_real_keys(page, line):
    """Each command composes against its typed schema: the command, the subcommand and every
    key exist and every value has the key's type (files it names need not exist here)."""
    args = shlex.split(re.sub(r"\$\{?(\w+)\}?", r"\1", line))[1:]
    cmd = COMMANDS[args[0]]
    rest = args[1:]
    if cmd.subcommands:
        assert rest and rest[0] in cmd.subcommands, line
        rest = rest[1:]
    if cmd.positional and rest and "=" not in rest[0]:
        rest = [f"{cmd.positional}={rest[0]}", *rest[1:]]
    assert all("=" in a for a in rest), line
    to_schema(cmd.config, compose(cmd.config, rest))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_every_yaml_block_parses(page):
    for lang, text in fenced(page):
        if lang == "yaml":
            yamlio.loads(text, source=str(page))


def test_the_python_api_example_runs(capsys):
    blocks = [t for lang, t in fenced(DOCS / "reference" / "api" / "index.md") if lang == "python"]
    assert len(blocks) == 1
    exec(compile(blocks[0], "docs/reference/api/index.md", "exec"), {})
    assert capsys.readouterr().out.count(" ms\n") == 3


# ---- the README ------------------------------------------------------------------------------

# the README's tour commands cheap enough to run here, whose printed output it quotes
QUOTED = ("archsearch space show", "archsearch prune")


def test_the_readme_is_a_landing_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    blocks = [text for lang, text in fenced(ROOT / "README.md") if lang == "bash"]
    assert blocks[0].split("#")[0].split() == ["make", "run"]
    assert [c.split()[0:2] for c in commands(blocks[0])] == [["make", "run"], ["make", "test"]]
    image = re.search(r"!\[[^]]*\]\(([^)]+)\)", readme).group(1)
    assert (ROOT / image).is_file()
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def _quoted_outputs() -> list[tuple[str, str]]:
    """(command, the output the README prints under it) for the tour's cheap commands."""
    blocks = fenced(ROOT / "README.md")
    out = []
    for (lang, text), (next_lang, shown) in itertools.pairwise(blocks):
        if lang == "bash" and next_lang == "text":
            line = commands(text)[0]
            if line.startswith(QUOTED):
                out.append((line, shown))
    return out


@pytest.mark.slow
@pytest.mark.parametrize(("line", "shown"), _quoted_outputs())
def test_the_readme_tour_quotes_what_the_commands_print(line, shown, capsys):
    """Every line the README shows under `space show` and `prune` is in what they print now:
    its plain lines (durations aside), and every cell of its table rows."""
    assert main(shlex.split(line)[1:]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    for text in shown.splitlines():
        if text.strip() in ("", "...") or "/" in text:
            continue
        parts = text.split("│") if "│" in text else [re.sub(r"\(\d[\d.]* m?s\)", "", text)]
        for part in parts:
            assert " ".join(part.split()) in printed, (line, part)


# ---- the tutorials, end to end ----------------------------------------------------------------

SHIM = r"""
set -euo pipefail
declare -A CHEAP=({cheap})
archsearch() {{
  local name=$1
  if [ "$name" = dashboard ]; then
    command archsearch "$@" port=0 > dashboard.out 2>&1 &
    local pid=$!
    "{python}" "{checker}" dashboard.out || {{ kill $pid; cat dashboard.out; return 1; }}
    kill $pid; wait $pid || true
    return 0
  fi
  command archsearch "$@" ${{CHEAP[$name]:-}}
}}
"""

DASHBOARD_CHECK = r"""
import re, sys, time, urllib.request
deadline = time.time() + 120
while time.time() < deadline:
    text = open(sys.argv[1]).read()
    found = re.search(r"http://127\.0\.0\.1:\d+/\S*", text)
    if found:
        base = found.group(0).split("/", 3)
        root = "/".join(base[:3])
        for page in ("/archsearch", "/dashboard"):
            with urllib.request.urlopen(root + page, timeout=30) as r:
                assert r.status == 200, page
        sys.exit(0)
    time.sleep(0.5)
sys.exit("the dashboard printed no address")
"""

RAY_SHIM = r"""
ray() {{
  [ "$1" = start ] || {{ command ray "$@"; return; }}
  shift
  local args=() head=0
  for a in "$@"; do
    case "$a" in
      --head) head=1; args+=("$a");;
      --port=*) args+=("--port=${{HEAD##*:}}");;
      *) args+=("$a");;
    esac
  done
  [ $head = 1 ] && args+=("--temp-dir={ray_tmp}" "--include-dashboard=false")
  setsid "{bin}/ray" start --block --disable-usage-stats --num-cpus=1 "${{args[@]}}" \
    > /dev/null 2>&1 &
  echo $! >> "{pids}"
  local nodes=$(( $(wc -l < "{pids}") ))
  "{python}" -c "
import ray, sys, time
for _ in range(120):
    try:
        ray.init(address='$HEAD', logging_level='ERROR')
        if len([n for n in ray.nodes() if n['Alive']]) >= $nodes: sys.exit(0)
        ray.shutdown()
    except Exception:
        pass
    time.sleep(1)
sys.exit('the Ray node did not join')
"
}}
"""


def _script(tutorial: str, workdir: Path, cheap: dict[str, str], prelude: str = "") -> Path:
    """The tutorial as one bash script: its YAML files written, its shell blocks in order."""
    checker = workdir / "check_dashboard.py"
    checker.write_text(DASHBOARD_CHECK)
    table = " ".join(f"[{k}]={shlex.quote(v)}" for k, v in cheap.items())
    parts = [SHIM.format(cheap=table, python=sys.executable, checker=checker), prelude]
    for lang, text in fenced(DOCS / "tutorials" / f"{tutorial}.md"):
        first = text.splitlines()[0] if text else ""
        if lang == "yaml" and re.fullmatch(r"# [\w.-]+\.yaml", first):
            (workdir / first[2:]).write_text(text)
        elif lang == "bash":
            parts.append(text)
    script = workdir / "tutorial.sh"
    script.write_text("\n".join(parts))
    return script


def _venv(workdir: Path) -> None:
    """`.venv` in the tutorial's folder is this test's environment, as `make setup` makes it."""
    if (Path(sys.prefix) / "bin" / "activate").is_file():
        (workdir / ".venv").symlink_to(sys.prefix)
    else:
        (workdir / ".venv" / "bin").mkdir(parents=True)
        (workdir / ".venv" / "bin" / "activate").write_text(f'export PATH="{BIN}:$PATH"\n')


def _run(script: Path, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _env(workdir: Path) -> dict[str, str]:
    return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.mark.slow
@pytest.mark.parametrize("tutorial", ["first-sweep", "own-space"])
def test_a_tutorial_runs_end_to_end(tutorial, tmp_path):
    _venv(tmp_path)
    res = _run(_script(tutorial, tmp_path, CHEAP), _env(tmp_path), timeout=900)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    runs = tmp_path / "runs"
    fronts = list(runs.glob("*/pareto/**/front.png"))
    assert fronts, sorted(str(p) for p in runs.rglob("*"))[:50]
    if tutorial == "own-space":  # the front on three devices, one with axes of its own
        devices = {p.relative_to(runs / "my_space" / "pareto").parts[0] for p in fronts}
        assert devices == {"jetson_orin_nx", "snapdragon_8gen3", "rpi5"}


def _shards(folder: Path) -> None:
    """Stand-in GPT-2 token shards, as nanoGPT's prepare.py writes them (uint16)."""
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 200_000), ("val", 20_000)):
        rng.integers(0, 50257, n, dtype=np.uint16).tofile(folder / f"{split}.bin")


@pytest.mark.slow
def test_the_cluster_tutorial_runs_on_a_private_cluster_and_database(tmp_path):
    _venv(tmp_path)
    _shards(tmp_path / "owt")
    ray_tmp = Path(f"/tmp/as-doc-{os.getpid()}-{free_port()}")
    pids = tmp_path / "ray.pids"
    pids.touch()
    with private_postgres() as url:
        host_port = url.split("@", 1)[1].split("/", 1)[0]
        sites = {
            "DATA": str(tmp_path / "owt"),
            "DB": url.rsplit("/", 1)[0] + "/archsearch",
            "HEAD": f"127.0.0.1:{free_port()}",
        }
        prelude = RAY_SHIM.format(ray_tmp=ray_tmp, bin=BIN, pids=pids, python=sys.executable)
        script = _script("cluster", tmp_path, CLUSTER_CHEAP, prelude)
        text = script.read_text()
        for name, value in sites.items():
            text, n = re.subn(rf"^export {name}=.*$", f"export {name}={value}", text, flags=re.M)
            assert n == 1, name
        script.write_text(text)
        env = {
            **_env(tmp_path),
            "HOME": str(tmp_path),
            "PGHOST": host_port.split(":")[0],
            "PGPORT": host_port.split(":")[1],
            "PGUSER": "postgres",
            "PATH": f"{_pg_bin_dir()}:{os.environ['PATH']}",
        }
        try:
            res = _run(script, env, timeout=900)
        finally:
            for pid in pids.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(int(pid), signal.SIGKILL)
            subprocess.run(["rm", "-rf", str(ray_tmp)], check=False)
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    assert "Pareto front of edge_125m" in res.stdout
    assert (tmp_path / "owt" / "meta.json").is_file()


def _pg_bin_dir() -> str:
    import shutil

    found = shutil.which("createdb")
    if found:
        return str(Path(found).parent)
    return str(sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1])
