#!/usr/bin/env bash
# Packs what `gpu_check.sh` needs that a GPU machine's image may lack into one archive,
# .whl/site.tar.xz (about 42 MB), for a machine that cannot reach a package index: the
# project's runtime dependencies that are not in the CUDA image described by the device tool
# (Ray, Optuna, Hydra and theirs; torch, numpy, pandas, scipy, ... are there) at the versions
# of this checkout's .venv, and flash-linear-attention's kernels (fla-core). Built for CPython
# 3.12 on x86-64 Linux (PY_VERSION to change it). Ray's Java jars and its RLlib, Serve and LLM
# libraries are left out: a sweep imports none of them, and Ray's wheel with them (79 MB) is
# larger than what the device tool carries.
#
#     benchmarks/gpu_site.sh        # then carry .whl; gpu_check.sh unpacks it where it finds it
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
PY_VERSION=${PY_VERSION:-3.12}
FLA_CORE=${FLA_CORE:-0.6.0}
NEED=(alembic antlr4-python3-runtime bottle cffi colorlog fvcore greenlet hydra-core iopath
      jsonschema jsonschema-specifications mako moocore omegaconf optuna optuna-dashboard plotly
      pycparser ray referencing rpds-py sqlalchemy tensorboardx termcolor yacs)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pins=("fla-core==$FLA_CORE")
for name in "${NEED[@]}"; do
    pins+=("$name==$("$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
done
platforms=()
for tag in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_27 manylinux_2_28 \
           manylinux_2_31 manylinux_2_34; do
    platforms+=(--platform "${tag}_x86_64")
done
for pin in "${pins[@]}"; do  # a wheel for the target, else (pure-Python sdists) one built here
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" \
        --implementation cp "${platforms[@]}" -d "$work/wheels" "$pin" 2>/dev/null \
        || "$PY" -m pip wheel -q --no-deps -w "$work/wheels" "$pin"
done
"$PY" -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version "$PY_VERSION" \
    --implementation cp "${platforms[@]}" --target "$work/site" "$work"/wheels/*.whl
rm -rf "$work"/site/ray/{jars,rllib,serve,llm} "$work/site/bin"
mkdir -p .whl
tar -C "$work/site" -cf - . | xz -T2 -6 >.whl/site.tar.xz
echo "$(du -h .whl/site.tar.xz | cut -f1) .whl/site.tar.xz: ${#pins[@]} packages for CPython $PY_VERSION"
