#!/usr/bin/env bash
# Parity with the authors' code (tests/parity), in a virtual environment of its own, .venv-parity, created on first
# use and reused after. Each method against its reference, row by row, on the synthetic world and on a real pair
# (tests/parity/realpair.py: all-MiniLM-L6-v2 and the French Bible with a SentencePiece target trained on it, built
# from the bible world's registry packages in about a minute):
#   focus, wechsel   deepfocus 1.0.1, wechsel 0.0.4, run here (test_parity.py, test_realpair.py)
#   omp              mergekit 0.1.5's batch_omp, run here, in both donor spaces (test_omp_clp.py,
#                    test_realpair_omp_clp.py), with a world's donor model (test_donor_omp.py), and on the real
#                    transplant pair, SmolLM2-135M given Gemma 3's tokenizer with Gemma 3 the donor, from a built
#                    bible world under the harness home, skipped without one (test_transplant_omp.py, ~1 minute)
#   clp, clp+        llm-cva (not on PyPI): its rows kept in fixtures by clp_reference.py (same tests)
#   tiktotok         trans-tokenizers 0.1.4, run here (test_tiktotok_parity.py)
#   tokdist          the authors' token-distillation code: its outputs kept in fixtures by tokdist_reference.py
#                    (test_tokdist_parity.py; the real pair's training runs all-MiniLM-L6-v2 itself)
#
#   tests/parity/run.sh [pytest arguments]   create or reuse the environment, then run the parity tests
#   tests/parity/run.sh --lock               rebuild the environment from unpinned requirements and rewrite the lock,
#                                            constraints-parity.txt (then run the tests)
#
# deepfocus and wechsel declare the PyPI package `fasttext`, which has no wheels for current Pythons and often fails
# to build; the harness depends on fasttext-numpy2-wheel, which provides the same module `fasttext`. So the two
# reference packages are installed with --no-deps and their other requirements are named here (`pip check` reports
# the missing `fasttext` distribution; the module is there).
#
# Environment: PYTHON (interpreter for the venv, default python3), PARITY_VENV (default .venv-parity).
set -euo pipefail
cd "$(dirname "$0")/../.."

PY=${PYTHON:-python3}
VENV=${PARITY_VENV:-.venv-parity}
LOCK=constraints-parity.txt
TORCH="torch==2.13.0"  # first, pinned: a looser requirement pulls the CUDA build and gigabytes of wheels
REFERENCE=(deepfocus==1.0.1 wechsel==0.0.4 trans-tokenizers==0.1.4 mergekit==0.1.5)
# mergekit (LGPL-3.0; the oracle of `omp`, never copied): the test loads tokensurgeon/omp.py by file, which needs torch
# alone, so none of its requirements (peft, immutables, pydantic, ...) is installed for it
# trans-tokenizers (Tik-to-Tok's authors) imports langcodes and regex, which it does not declare
# their requirements without `fasttext` (deepfocus: entmax, fastdist, numba, print-on-steroids, ...; wechsel: gensim,
# nltk, scikit-learn, ...); torch, transformers, datasets, numpy, scipy come with the harness
REFERENCE_DEPS=(entmax fastdist numba print-on-steroids gensim nltk scikit-learn requests tqdm langcodes regex)
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)

lock=0
if [[ "${1:-}" == "--lock" ]]; then
    lock=1
    shift
fi

install() {  # $@: extra pip arguments (the lock as constraints, or nothing)
    "${PIP[@]}" install -q "$TORCH"
    "${PIP[@]}" install -q "$@" -e . pytest "${REFERENCE_DEPS[@]}"
    "${PIP[@]}" install -q "$@" --no-deps "${REFERENCE[@]}"
}

stamp_of() {
    cat "$LOCK" pyproject.toml "$0" | sha256sum | cut -d' ' -f1
}

if [[ $lock == 1 ]]; then
    rm -rf "$VENV"
    "$PY" -m venv "$VENV"
    install
    {
        echo "# Lock of the parity environment (tests/parity/run.sh): a pip freeze of a working environment."
        echo "# Regenerate: tests/parity/run.sh --lock   ($(date -u +%Y-%m-%d), $("$VENV/bin/python" --version))"
        echo "# deepfocus and wechsel are installed with --no-deps: their \`fasttext\` requirement is met by the module"
        echo "# of fasttext-numpy2-wheel (a harness dependency)."
        # torch without its local tag (+cpu): `torch==2.13.0` admits every build of that version
        "${PIP[@]}" freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*$/\1/'
    } > "$LOCK"
    stamp_of > "$VENV/.parity-stamp"
elif [[ ! -x "$VENV/bin/python" || "$(cat "$VENV/.parity-stamp" 2>/dev/null)" != "$(stamp_of)" ]]; then
    [[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
    install -c "$LOCK"
    stamp_of > "$VENV/.parity-stamp"
fi

export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# the reference packages compute WECHSEL's float32 alignment with numpy and scipy in this process: load their OpenBLAS
# with the kernels and the one thread that our alignment runs on (methods/pinned_blas.py), so that both sides round
# alike (another kernel set moves the float32 rotation in its fifth digit, and near-ties at the 10th neighbour with it)
export OPENBLAS_NUM_THREADS=1
case "$(uname -m)" in x86_64|amd64) export OPENBLAS_CORETYPE=Nehalem ;; esac
# ... and keep them: both sides run in this process, so the harness's own pin of the CPU kernels (OpenBLAS's AVX2
# set, harness/core/kernels.py) would move the reference's alignment off the kernels ours runs on
export HARNESS_CPU_KERNELS=native
# (the suite's addopts start two test processes with pytest-xdist, which this environment does not install)
exec "$VENV/bin/python" -m pytest -o addopts="" -p no:cacheprovider tests/parity -m parity "$@"
