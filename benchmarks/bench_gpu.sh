#!/usr/bin/env bash
# The harness's GPU checks in one command, one table (benchmarks/bench_gpu.py says what each part does); each part
# prints its rows and cells as they finish and is stopped at its share of the budget:
#   bash benchmarks/bench_gpu.sh                         # on the GPU, full sizes, fits 8 minutes on one H100
#   bash benchmarks/bench_gpu.sh --quick                 # on the GPU, fits 4 minutes
#   bash benchmarks/bench_gpu.sh --device cpu --small    # the same checks at small sizes on a CPU, emulating a GPU
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && PY=.venv/bin/python
exec "$PY" benchmarks/bench_gpu.py "$@"
