#!/usr/bin/env bash
# Make the OFA / HyperOFA reference fixtures (tests/fixtures/reference/ofa) with the authors' own code.
#
#   scripts/reference/make_ofa_fixtures.sh OFA_REPO HYPEROFA_REPO [WORLD] [-- extra ofa_reference.py arguments]
#
# OFA_REPO / HYPEROFA_REPO: git repositories (a clone or a bare mirror) of github.com/cisnlp/ofa and
# github.com/enesozeren/hyper-ofa; their HEAD is used and its commit recorded in meta.json. WORLD: the built bible
# world (default ~/.cache/harness/worlds/bible-v2).
#
# Everything the authors' code needs lives in a temporary folder that is deleted at the end: their files
# (git archive of HEAD) and pytorch-lightning (hyper-ofa's hypernetwork modules import it), installed there with
# --target. The interpreter is the parity environment's (.venv-parity: numpy, scikit-learn, gensim, transformers,
# torch; PYTHON overrides it), run from the temporary folder; ofa_reference.py imports nothing of this project.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
OFA_REPO=$(cd "$1" && pwd)
HOFA_REPO=$(cd "$2" && pwd)
shift 2
WORLD=${HARNESS_HOME:-$HOME/.cache/harness}/worlds/bible-v2
if [[ $# -gt 0 && "$1" != "--" ]]; then WORLD=$(cd "$1" && pwd); shift; fi
[[ "${1:-}" == "--" ]] && shift
PY=${PYTHON:-$root/.venv-parity/bin/python}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/ofa" "$tmp/hyper-ofa"
git -C "$OFA_REPO" archive HEAD | tar -x -C "$tmp/ofa"
git -C "$HOFA_REPO" archive HEAD | tar -x -C "$tmp/hyper-ofa"
"$PY" -m pip install -q --disable-pip-version-check --target "$tmp/libs" --no-deps \
    pytorch-lightning==2.6.6 lightning-utilities==0.15.3 torchmetrics==1.9.0
cd "$tmp"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH="$tmp/libs" HF_HUB_OFFLINE=1 "$PY" "$here/ofa_reference.py" \
    --ofa "$tmp/ofa" --hyperofa "$tmp/hyper-ofa" \
    --ofa-commit "$(git -C "$OFA_REPO" rev-parse HEAD)" --hyperofa-commit "$(git -C "$HOFA_REPO" rev-parse HEAD)" \
    --world "$WORLD" --out "$root/tests/fixtures/reference/ofa" "$@"
