#!/usr/bin/env bash
# gpuscout device check: estimates against measurements on one GPU, in under 8 minutes on an H200.
#
# On the GPU machine, from the repository root (no network needed):
#     scripts/device_check.sh [--only probe,sdxl] [--deadline-s 450]   # extra args go to the validator
# It installs the wheels carried in .whl/ (if any) into /tmp/site, puts src/ on PYTHONPATH (gpuscout
# need not be installed), runs benchmarks/validate_on_gpu.py on the GPU and writes
# validation-<date>-<gpu>.md (+ .json, .log) into $OUT (or ./validation-out).
#
# Here, with PyPI access, fetch the wheels the H200 image lacks (pydantic and its parts, diffusers):
#     scripts/device_check.sh --fetch-wheels        # into .whl/ (or $WHEEL_DIR); ~9 MB
# .whl/ must be git-ignored (echo /.whl/ >> .git/info/exclude) and named in the device run's carry.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
WHEEL_DIR=${WHEEL_DIR:-.whl}
# Same versions as the development venv; pure-Python except pydantic_core (cp312, x86-64: the H200's Python).
WHEELS=(pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        typing_extensions==4.16.0 diffusers==0.42.1)

if [[ "${1:-}" == "--fetch-wheels" ]]; then
    exec "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEEL_DIR" "${WHEELS[@]}"
fi

if compgen -G "$WHEEL_DIR/*.whl" > /dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$WHEEL_DIR"/*.whl || { echo "device_check: installing the carried wheels failed" >&2; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
OUT_DIR=${OUT:-$PWD/validation-out}
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
# The validator keeps its benches inside --deadline-s (450 s); timeout is the backstop at 470 s.
timeout 470 "$PY" benchmarks/validate_on_gpu.py --out "$OUT_DIR" --device cuda "$@"
