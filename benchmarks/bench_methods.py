"""Initialization time and peak memory of FOCUS, WECHSEL and Tik-to-Tok (ours), beside the authors' packages.

For each world (``synthetic``, ``bible`` when it is already built (it is never built here), and ``real-pair``:
all-MiniLM-L6-v2 and a SentencePiece tokenizer trained on the French Bible, the parity tests' pair, see
``tests/parity/realpair.py``; FOCUS and WECHSEL only) and each method,
the method runs twice through the same code path ``initialize_model`` uses: a *cold* run with an empty method
cache (fastText training included) and a *warm* run that finds its fastText models in the cache (the cost of the
initialization proper). Beside them, when ``deepfocus`` / ``wechsel`` are importable, their implementations run on
the same inputs (the fastText model files our cold run trained, the world's dictionaries, the same tokenizers and
source matrix), which is comparable with our warm run.

Peak memory is the process's peak RSS while the step runs and its rise over the RSS before it
(:class:`harness.initialize.PeakMemory`).

    OMP_NUM_THREADS=1 python benchmarks/bench_methods.py                        # small fastText settings
    OMP_NUM_THREADS=1 python benchmarks/bench_methods.py --settings cpu         # what `harness run` uses (cpu)
    OMP_NUM_THREADS=1 python benchmarks/bench_methods.py --settings paper       # the papers' fastText settings
    OMP_NUM_THREADS=1 python benchmarks/bench_methods.py --worlds real-pair     # a real pair (downloads ~160 MB once)

On ``real-pair`` WECHSEL's English vectors are trained first on the King James text (counted in the cold run) and
given as ``source_vectors``: the pair's world holds French text only.

The default fastText settings are small (dim 32-64, few epochs, 200k buckets) so that the table comes quickly;
``--settings cpu`` takes the ``cpu`` profile's method parameters, ``--settings paper`` every method's defaults
(FOCUS dim 300 / 2M buckets is a 2.4 GB model).

Step by step (``--steps``, real pair only): with the fastText models given (trained once, cached in ``--cache``),
the two sides run ``--repeats`` times each on the same inputs, in turn (harness, reference, harness, ...), and
the fastest run of each counts; each step's time is measured by
wrapping the functions that do it on both sides (the harness's in ``methods.focus`` / ``methods.wechsel``, the
reference's in ``deepfocus.focus`` / ``wechsel``), the rest of each call is "other". The table gives step, harness
s, reference s and the ratio, and says how many CPUs the machine has and whether other processes were busy (times
on a shared machine vary; compare ratios measured side by side)::

    OMP_NUM_THREADS=1 .venv-parity/bin/python benchmarks/bench_methods.py --steps --cache /tmp/bench-cache

Measured 2026-11-25 on a 2-CPU machine shared with other jobs, fastest of 3 in turn, one torch thread (harness s /
reference s), at a load average of about 5 (and of about 8 in brackets):

* FOCUS vs ``deepfocus`` 1.0.1: overlap 0.08 / 0.76, load fastText model 0.24 / 0.16, token vectors 0.07 / 0.41,
  similarities + sparsemax + combination 0.18 / 1.59, fallback rows (harness only: the Gaussian's float64
  statistics of E_s) 0.33, total 0.95 / 3.26, 3.4x (1.25 / 4.35, 3.5x).
* WECHSEL vs ``wechsel`` 0.0.4: load fastText models 0.24 / 0.18, token vectors 0.21 / 0.27, alignment 0.06 / 0.18,
  neighbours + softmax + combination 0.91 / 4.97 (float32 screening by faiss, float64 ranking of the candidates;
  the reference: sklearn's float64 cosine, ``np.argpartition`` per row, a Python loop), fallback rows (harness
  only) 0.25, total 1.79 / 5.66, 3.2x (3.20 / 16.14, 5.0x).

Loading a fastText model is the same library call on both sides; the fallback step is the harness's own.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import gc
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.initialize import PeakMemory  # noqa: E402
from methods.fasttext_util import full_model_file  # noqa: E402

SMALL = {
    "focus": {"dim": 48, "epochs": 5, "bucket": 200_000},
    "wechsel": {"dim": 48, "epochs": 10, "bucket": 200_000, "minn": 3, "maxn": 5, "min_count": 2},
    "tiktotok": {"dim": 64, "epochs": 5, "bucket": 200_000},
}


def load_inputs(world: Any) -> dict[str, Any]:
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    src = world.source_dir(world.default_source)
    st = AutoTokenizer.from_pretrained(src)
    tt = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    e_s = AutoModelForMaskedLM.from_pretrained(src).get_input_embeddings().weight.detach()[:len(st)].float().clone()
    return {"st": st, "tt": tt, "e_s": e_s}


REAL_PAIR_METHODS = ("focus", "wechsel")


def load_real_pair() -> tuple[Any, dict[str, Any]]:
    from tests.parity.realpair import build_real_pair

    pair = build_real_pair(Path(tempfile.mkdtemp(prefix="bench-real-pair-")))
    return pair.world, {"st": pair.source_tokenizer, "tt": pair.target_tokenizer, "e_s": pair.source_matrix,
                        "pivot_text": pair.pivot_text}


def pivot_vectors(inputs: dict[str, Any], params: dict[str, Any], cache: Path, seed: int) -> tuple[str, float]:
    """WECHSEL's source-language vectors for a world without pivot text (the real pair), with our recipe."""
    from harness.core.registry import METHODS

    cls = METHODS.get("wechsel")
    p = {**cls.defaults, **params}
    t0 = time.perf_counter()
    cm = cls.train_word_vectors(cache, inputs["pivot_text"], cls().fasttext_settings(p, seed, int(p["dim"])), None)
    return str(cm.path), time.perf_counter() - t0


def ours(world: Any, inputs: dict[str, Any], method: str, params: dict[str, Any], cache: Path, seed: int
         ) -> tuple[Any, dict[str, float]]:
    from harness.core.registry import METHODS
    from methods.base import InitContext
    from methods.overlap import mapping_cache

    ctx = InitContext(source_matrix=inputs["e_s"], source_tokenizer=inputs["st"], target_tokenizer=inputs["tt"],
                      mapping_for=mapping_cache(inputs["st"], inputs["tt"], None), world=world, seed=seed,
                      params=dict(params), cache_dir=cache)
    gc.collect()
    with PeakMemory(interval=0.01) as mem:
        t0 = time.perf_counter()
        result = METHODS.get(method)().initialize(ctx)
        seconds = time.perf_counter() - t0
    return result, {"seconds": seconds, **mem.as_dict()}


def theirs_focus(inputs: dict[str, Any], result: Any) -> dict[str, float] | None:
    try:
        from deepfocus import FOCUS
    except ImportError:
        return None
    gc.collect()
    with PeakMemory(interval=0.01) as mem:
        t0 = time.perf_counter()
        FOCUS(target_tokenizer=inputs["tt"], source_tokenizer=inputs["st"], source_embeddings=inputs["e_s"].clone(),
              fasttext_model_path=str(full_model_file(result.stats["fasttext"]["path"], Path(tempfile.gettempdir()))),
              exact_match_all=True, match_symbols=True,
              fuzzy_match_all=False, verbosity="silent", processes=1)
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, **mem.as_dict()}


def theirs_wechsel(world: Any, inputs: dict[str, Any], result: Any) -> dict[str, float] | None:
    try:
        import fasttext  # noqa: F401 - the reference needs it installed
        from wechsel import WECHSEL

        from methods import fasttext_util as ft  # reads the cache's compact models too
    except ImportError:
        return None
    from methods.multilang import dictionary_for

    s = result.stats
    gc.collect()
    with PeakMemory(interval=0.01) as mem:
        t0 = time.perf_counter()
        for lang, info in s["languages"].items():
            if not s["per_language"].get(lang, {}).get("tokens"):
                continue  # no target token belongs to it
            src = ft.load_model(s["source_vectors"]["path"])
            if lang == s["source_language"]:
                w = WECHSEL(src, ft.load_model(s["source_vectors"]["path"]), align_strategy=None)
            elif "vectors" in info:
                path, _ = dictionary_for(world, s["source_language"], lang)
                w = WECHSEL(src, ft.load_model(info["vectors"]["path"]), bilingual_dictionary=str(path))
            else:
                continue
            w.apply(inputs["st"], inputs["tt"], inputs["e_s"].numpy().copy())
        seconds = time.perf_counter() - t0
    return {"seconds": seconds, **mem.as_dict()}


# -- step by step ----------------------------------------------------------------------------------------------
# (step label, module, attribute): the functions that make each step, on each side
OUR_STEPS = {
    "focus": [
        ("load fastText model", "methods.focus", "load_model"),
        ("load fastText model", "methods.focus", "cached_model"),
        ("overlap", None, "mapping_for"),
        ("token vectors", "methods.focus", "word_vectors"),
        ("token vectors", "methods.focus", "in_vocabulary"),
        ("similarities + sparsemax + combination", "methods.focus", "focus_combine"),
        ("fallback rows", "methods.focus", "gaussian_start"),
        ("per-language report (harness only)", "methods.focus", "language_token_counts"),
        ("per-language report (harness only)", "methods.focus", "assign_languages"),
        ("per-language report (harness only)", "methods.focus", "per_language_counts"),
    ],
    "wechsel": [
        ("load fastText models", "methods.wechsel", "load_model"),
        ("load fastText models", "methods.wechsel", "cached_model"),
        ("overlap", None, "mapping_for"),
        ("alignment (dictionary, Procrustes)", "methods.wechsel", "read_dictionary"),
        ("alignment (dictionary, Procrustes)", "methods.wechsel", "alignment_pairs"),
        ("alignment (dictionary, Procrustes)", "methods.wechsel", "procrustes"),
        ("token vectors", "methods.wechsel", "decoded_tokens"),
        ("token vectors", "methods.wechsel", "word_vectors"),
        ("neighbours + softmax + combination", "methods.wechsel", "knn_softmax"),
        ("fallback rows", "methods.wechsel", "gaussian_start"),
        ("token counts, languages (harness only)", "methods.wechsel", "language_token_counts"),
        ("token counts, languages (harness only)", "methods.wechsel", "assign_languages"),
        ("token counts, languages (harness only)", "methods.wechsel", "per_language_counts"),
    ],
}
THEIR_STEPS = {
    "focus": [
        ("load fastText model", "deepfocus.focus", "load_target_token_embedding"),
        ("overlap", "deepfocus.focus", "get_overlapping_tokens"),
        ("token vectors", "deepfocus.focus", "is_very_rare_token"),
        ("similarities + sparsemax + combination", "deepfocus.focus", "focus_additional_token_initialization"),
    ],
    "wechsel": [
        ("load fastText models", "fasttext", "load_model"),
        ("alignment (dictionary, Procrustes)", "wechsel", "WECHSEL.__init__"),
        ("token vectors", "wechsel", "get_subword_embeddings_in_word_embedding_space"),
        ("neighbours + softmax + combination", "wechsel", "create_target_embeddings"),
    ],
}


class StepClock:
    """Wrap functions so that the time spent in them adds up per step label (outermost call only)."""

    def __init__(self, spec: list[tuple[str, str | None, str]], holder: Any = None):
        import importlib

        self.totals: dict[str, float] = {}
        self.patches: list[tuple[Any, str, Any]] = []
        self.depth = 0
        for label, module, attr in spec:
            owner = holder if module is None else importlib.import_module(module)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            if not hasattr(owner, name):
                continue
            self.patches.append((owner, name, getattr(owner, name)))
            setattr(owner, name, self._wrap(label, getattr(owner, name)))

    def _wrap(self, label: str, fn: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            if self.depth:
                return fn(*a, **k)
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                self.depth -= 1
                self.totals[label] = self.totals.get(label, 0.0) + time.perf_counter() - t0
        return timed

    def restore(self) -> None:
        for owner, name, fn in reversed(self.patches):
            setattr(owner, name, fn)


def run_steps(fn: Any, spec: list[tuple[str, str | None, str]], holder: Any = None) -> dict[str, float]:
    """Per-step seconds of one call of ``fn`` (``"total"`` and ``"other"`` included)."""
    gc.collect()
    clock = StepClock(spec, holder)
    t0 = time.perf_counter()
    try:
        fn()
    finally:
        total = time.perf_counter() - t0
        clock.restore()
    steps = {**clock.totals, "total": total}
    steps["other"] = max(0.0, total - sum(clock.totals.values()))
    return steps


def interleaved(ours: Any, theirs: Any, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """``repeats`` rounds of (harness call, reference call), side by side so that both see the same load; the
    fastest call of each side counts."""
    best: list[dict[str, float] | None] = [None, None]
    for _ in range(repeats):
        for side, run in enumerate((ours, theirs)):
            steps = run()
            if best[side] is None or steps["total"] < best[side]["total"]:
                best[side] = steps
    return best[0] or {}, best[1] or {}


def machine_note() -> str:
    cpus = os.cpu_count()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    return (f"{cpus} CPUs, load average {load:.1f} at the start (a load near or above the CPU count means other "
            f"processes shared the machine: absolute times vary, the ratios were measured side by side)")


def step_table(cache: Path, methods: list[str], repeats: int) -> None:
    """FOCUS and WECHSEL on the real pair, with their fastText models given, step by step beside the reference."""
    from harness.core.registry import METHODS
    from methods import fasttext_util as ft  # reads the cache's compact models too
    from methods.base import InitContext
    from methods.multilang import dictionary_for
    from methods.overlap import mapping_cache

    world, inputs = load_real_pair()
    note = machine_note()
    st, tt, e_s = inputs["st"], inputs["tt"], inputs["e_s"]
    focus_params = {"dim": 100, "epochs": 3, "min_count": 10, "bucket": 200_000}
    wechsel_params = {"dim": 100, "epochs": 5, "min_count": 5, "bucket": 200_000, "threads": 10}
    tables = []
    for method in methods:
        params = focus_params if method == "focus" else wechsel_params
        if method == "wechsel":
            path, _ = pivot_vectors(inputs, params, cache, 0)
            params = {**params, "source_vectors": path}

        # every call computes its overlap afresh, as the reference does (holder.mapping_for is what the clock wraps)
        holder = SimpleNamespace(base=None)
        holder.mapping_for = lambda rule, holder=holder, **o: holder.base(rule, **o)

        def ctx(holder=holder, params=params):
            holder.base = mapping_cache(st, tt, None)
            return InitContext(source_matrix=e_s, source_tokenizer=st, target_tokenizer=tt,
                               mapping_for=lambda rule, **o: holder.mapping_for(rule, **o), world=world, seed=0,
                               params=dict(params), cache_dir=cache)

        first = METHODS.get(method)().initialize(ctx())  # trains (or finds) the fastText models

        def ours_once(method=method, ctx=ctx, holder=holder):
            return run_steps(lambda: METHODS.get(method)().initialize(ctx()), OUR_STEPS[method], holder)

        if method == "focus":
            from deepfocus import FOCUS

            model_path = str(full_model_file(first.stats["fasttext"]["path"], cache))

            def theirs_once(model_path=model_path):
                return run_steps(lambda: FOCUS(
                    target_tokenizer=tt, source_tokenizer=st, source_embeddings=e_s.clone(),
                    fasttext_model_path=model_path, exact_match_all=True, match_symbols=True,
                    fuzzy_match_all=False, verbosity="silent", processes=1), THEIR_STEPS["focus"])
        else:
            from wechsel import WECHSEL

            s = first.stats
            lang = next(la for la, info in s["languages"].items() if "vectors" in info)
            dict_path, _ = dictionary_for(world, s["source_language"], lang)

            def reference(s=s, lang=lang, dict_path=dict_path):
                w = WECHSEL(ft.load_model(s["source_vectors"]["path"]),
                            ft.load_model(s["languages"][lang]["vectors"]["path"]),
                            align_strategy="bilingual_dictionary", bilingual_dictionary=str(dict_path))
                return w.apply(st, tt, e_s.numpy().copy())

            def theirs_once(reference=reference):
                return run_steps(reference, THEIR_STEPS["wechsel"])

        ours, theirs = interleaved(ours_once, theirs_once, repeats)
        tables.append((method, ours, theirs))

    from rich.console import Console
    from rich.table import Table

    console = Console(width=160)
    for method, ours, theirs in tables:
        t = Table(title=f"{method} on the real pair ({len(tt)} target tokens), fastText models given, fastest of "
                        f"{repeats}: harness vs reference, same inputs")
        for col in ("step", "harness s", "reference s", "reference / harness"):
            t.add_column(col, justify="left" if col == "step" else "right")
        labels = [la for la in dict.fromkeys([*ours, *theirs]) if la not in ("total", "other")]
        for label in [*labels, "other", "total"]:
            a, b = ours.get(label), theirs.get(label)
            ratio = f"{b / a:.1f}x" if a and b else "-"
            t.add_row(label, f"{a:.2f}" if a is not None else "-", f"{b:.2f}" if b is not None else "-", ratio)
        console.print(t)
    console.print(f"machine: {note}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="synthetic,bible")
    ap.add_argument("--methods", default="focus,wechsel,tiktotok")
    ap.add_argument("--settings", choices=("small", "cpu", "paper"), default="small",
                    help="method parameters: small fastText models, the cpu profile's, or the defaults (paper)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", action="store_true",
                    help="real pair only: FOCUS and WECHSEL step by step beside deepfocus and wechsel")
    ap.add_argument("--cache", type=Path, default=None,
                    help="--steps: method cache to keep the fastText models in between runs (default: temporary)")
    ap.add_argument("--repeats", type=int, default=2, help="--steps: runs per side (the fastest counts)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    if args.steps:
        import methods  # noqa: F401  (registers the methods)

        cache = args.cache or Path(tempfile.mkdtemp(prefix="bench-steps-"))
        cache.mkdir(parents=True, exist_ok=True)
        step_table(cache, [m for m in args.methods.split(",") if m in REAL_PAIR_METHODS], args.repeats)
        return

    import methods  # noqa: F401  (registers the methods)
    from harness.worlds import get_world

    rows = []
    for name in args.worlds.split(","):
        if name == "real-pair":
            world, inputs = load_real_pair()
        else:
            try:
                world = get_world(name, build=name == "synthetic")
            except Exception as exc:  # noqa: BLE001 - an unbuilt world is skipped, not built
                print(f"[skip] world {name!r}: {exc}".splitlines()[0])
                continue
            inputs = load_inputs(world)
        for method in args.methods.split(","):
            if name == "real-pair" and method not in REAL_PAIR_METHODS:
                print(f"[skip] {method} on real-pair: the pair has French text and one dictionary only")
                continue
            if args.settings == "cpu":
                from harness.core.profiles import profile

                params = dict(profile("cpu").get("method_params", {}).get(method, {}))
            else:
                params = {} if args.settings == "paper" else SMALL.get(method, {})
            cache = Path(tempfile.mkdtemp(prefix=f"bench-{method}-"))
            try:
                pre = 0.0
                if name == "real-pair" and method == "wechsel":
                    path, pre = pivot_vectors(inputs, params, cache, args.seed)
                    params = {**params, "source_vectors": path}
                result, cold = ours(world, inputs, method, params, cache, args.seed)
                cold["seconds"] += pre
                _, warm = ours(world, inputs, method, params, cache, args.seed)
                ref = None
                if method == "focus":
                    ref = theirs_focus(inputs, result)
                elif method == "wechsel":
                    ref = theirs_wechsel(world, inputs, result)
                rows.append((name, method, len(inputs["tt"]), result.counts(), cold, warm, ref))
            finally:
                shutil.rmtree(cache, ignore_errors=True)

    from rich.console import Console
    from rich.table import Table

    t = Table(title="Initialization: ours (cold = with fastText training, warm = cached models) vs the authors' "
                    "packages (same model files)")
    for col in ("world", "method", "|V_t|", "copied/method/random/unk", "ours cold s", "ours warm s",
                "ours peak RSS MB", "theirs s", "theirs peak RSS MB", "theirs / ours warm"):
        t.add_column(col, justify="right" if col not in ("world", "method") else "left")
    for name, method, n_t, counts, cold, warm, ref in rows:
        c = "/".join(str(counts[k]) for k in ("copied", "method", "random", "unk"))
        t.add_row(name, method, str(n_t), c, f"{cold['seconds']:.2f}", f"{warm['seconds']:.2f}",
                  f"{max(cold['peak_rss_mb'], warm['peak_rss_mb']):.0f}",
                  f"{ref['seconds']:.2f}" if ref else "-", f"{ref['peak_rss_mb']:.0f}" if ref else "-",
                  f"{ref['seconds'] / warm['seconds']:.1f}x" if ref else "-")
    Console(width=200).print(t)


if __name__ == "__main__":
    main()
