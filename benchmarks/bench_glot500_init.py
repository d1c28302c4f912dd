"""OFA and HyperOFA at Glot500 scale, whole and step by step, on synthetic inputs of that size (CPU or GPU).

The setting is the papers' XLM-R -> Glot500-m extension: ``--scale 1.0`` is a target vocabulary of
|V_t| = 401,145 tokens, a source vocabulary of |V_s| = 250,002 tokens with a source matrix of |V_s| x ``--dim``
(768 = XLM-R's embeddings; a smaller d' stands for the factorized F_s, which the harness computes before a method
runs), and 3.6M ColexNet+-style word vectors of 200 dimensions keyed ``iso3:word``; ``--scale 0.01`` shrinks
every count (tokens, words, overlap, matched tokens) by the same factor. The inputs are drawn with seeded numpy
generators (their generation is timed apart, in the header), shaped as follows:

* **overlap**: a ``--copy-fraction`` of 0.62 of the target tokens copy a source row (~249k at scale 1: Glot500-m's
  vocabulary was made by adding ~151k pieces to XLM-R's 250k);
* **matched words**: 84,000 of the remaining target tokens have at least one matched word (scaled), the number
  OFA initializes for XLM-R; 42.5 % of the source tokens match a word (~106k: the 103K training pairs of the
  HyperOFA paper's XLM-R presets are 97 % of them), and so do 42.5 % of the copied target tokens; the others
  match none;
* **word sets**: a matched token matches a log-normal number of distinct words, median ``--median-words`` 10 and
  sigma ``--sigma-words`` 2.0, clipped to 1 .. |words| (80 % between 1 and ~130, mean ~74, a tail of common pieces
  matching tens of thousands), drawn uniformly from the words; each (token, word) edge comes from a random
  non-empty subset of the word's three surface variants (``w``, ``" " + w``, ``" " + W``), which OFA counts and
  HyperOFA deduplicates;
* **source rows**: for a source token with matched words, a fixed random nonlinear map of the direction of its mean
  word vector plus noise (so that HyperOFA's training has something to learn and stops early for a reason); the
  other rows Gaussian; all at std ~0.05.

The methods run as the harness runs them: ``OFAInit().initialize(ctx)`` and ``HyperOFAInit().initialize(ctx)``
(``methods/ofa.py``, ``methods/hyperofa.py``) on an :class:`~methods.base.InitContext` holding the synthetic
source matrix, the overlap mapping (which the harness computes once per pair, outside the method) and two
stand-in tokenizers; each step is timed by wrapping the module-level function that does it (the pattern of
``bench_methods.py --steps``): wall seconds, the process's CPU seconds (all threads; on a machine shared with
other jobs the wall time grows with their load, the CPU time far less), and peak memory
(:class:`harness.initialize.PeakMemory`: the rise of the process's RSS over its value when the step starts --
memory freed by earlier steps and kept by the allocator can make it smaller -- and the peak RSS; on CUDA the peak
allocated device memory). The row ``rest of initialize()`` is the time between the wrapped steps (OFA: parameters,
the wise-token selection, stats; HyperOFA: cutting sets to ``max_set``, re-indexing them to the words in use, the
split, the stats). Two things are given rather than measured: the word vectors are in memory (a real run
memory-maps the parsed ColexNet+ ``.npy`` after its first read), and the stand-in tokenizers return each surface
variant's precomputed token ids from ``encode_batch_fast`` (the ``tokenizers`` backend path of
:func:`methods.subwords.subword_word_edges`), so the tokenization itself of 3 x 3.6M strings is not in the
tables; handing out the id lists is (a real tokenizer hands them out too), and its seconds are shown in the
matching rows' detail. The HyperOFA run trains the ``--preset`` network (``cpu``: the harness's CPU preset,
1 x 64; ``paper``: HN-X-<dim>) without the shuffled-target control (``--control`` adds it, as the method's
default does).

``--hn-paper`` trains the paper-size hypernetwork (``--hn-preset``, default HN-X-100: the paper's XLM-R preset
for D' = 100, a 4-layer BiLSTM of hidden 800, 52.9M parameters; HN-R-100 is the 2 x 800 RoBERTa one) on the
synthetic source pairs of ``--hn-scale`` (default: ``--scale``) with the paper's training (batch 256, lr 1e-4,
sets cut to 256, temperature 0.25, patience 30, bf16 autocast on CUDA) through
:func:`methods.hypernetwork.train_hypernetwork`, until early stopping or ``--max-epochs``, and prints pairs/s
(training pairs per second of the training loop, the validation passes included) and the epochs it took. The
planted targets make the epoch count a property of this synthetic problem, not of ColexNet+. On a CPU, one
epoch of ``--hn-scale 0.01`` (~1,000 pairs, every set length) gives the throughput; ``--hn-batch 64`` keeps it in
memory there: a batch of 256-vector sets holds ~75 MB of BiLSTM activations per pair on a CPU (12.7 GB for
170 such pairs), ~19 GB at the paper's batch of 256.

    OMP_NUM_THREADS=1 python benchmarks/bench_glot500_init.py --scale 0.25            # both methods, 1 thread
    OMP_NUM_THREADS=1 python benchmarks/bench_glot500_init.py --scale 1.0 --steps ofa
    OMP_NUM_THREADS=1 python benchmarks/bench_glot500_init.py --steps '' --hn-paper --hn-scale 0.01 \
        --hn-batch 64 --max-epochs 1                                                # paper network, one epoch
    python benchmarks/bench_glot500_init.py --device cuda --scale 1.0 --hn-paper    # the whole thing on a GPU

``--json OUT`` writes the header, the rows and the paper-network row as JSON.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_hypernetwork import table  # noqa: E402
from glot500_inputs import (  # noqa: E402
    GENERATION_THREADS,
    WORD_DIM,
    StandInTokenizer,
    Synthetic,
    generate,
    planted_rows,
)

import methods.hyperofa as hyperofa  # noqa: E402
import methods.ofa as ofa  # noqa: E402
from harness.initialize import PeakMemory  # noqa: E402
from methods.base import InitContext  # noqa: E402
from methods.hypernetwork import PRESETS, TrainConfig, build_hypernetwork, parameter_count, train_hypernetwork
from methods.hypernetwork_data import split_pairs, truncate_set
from methods.wordvectors import WordVectors  # noqa: E402

# -- timing the steps ------------------------------------------------------------------------------------
Detail = Callable[[tuple, dict, Any], "str | tuple[str, dict[str, Any]]"]


class StepTimer:
    """Runs a function under :class:`PeakMemory`, timing it (CUDA synchronized), and keeps one row per call."""

    def __init__(self, device: str, on_row: Callable[[list[dict[str, Any]]], None] | None = None):
        self.cuda = torch.device(device).type == "cuda"
        self.rows: list[dict[str, Any]] = []
        self.on_row = on_row  # called with the rows after each one, as it finishes

    def _sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def measure(self, key: str, label: str, fn: Callable[..., Any], *args: Any, detail: Detail | None = None,
                **kwargs: Any) -> Any:
        self._sync()
        with PeakMemory(interval=0.01) as mem:
            t0, c0 = time.perf_counter(), time.process_time()
            out = fn(*args, **kwargs)
            self._sync()
            seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        extra: dict[str, Any] = {}
        text = ""
        if detail is not None:
            d = detail(args, kwargs, out)
            text, extra = (d, {}) if isinstance(d, str) else d
        m = mem.as_dict()
        self.rows.append({"id": key, "step": label, "seconds": seconds, "cpu_s": cpu, "rss_rise_mb": m["extra_rss_mb"],
                          "peak_rss_mb": m["peak_rss_mb"], "cuda_peak_mb": m["cuda_peak_mb"] if self.cuda else None,
                          "detail": text, **extra})
        if self.on_row is not None:
            self.on_row(self.rows)
        return out


@contextmanager
def spying(module: Any, steps: dict[str, list[tuple[str, str, Detail | None]]], timer: StepTimer,
           replace: dict[str, Any]) -> Iterator[None]:
    """Wrap ``module``'s functions named in ``steps`` (the n-th call takes the n-th ``(id, label, detail)``) and
    replace those in ``replace``; restore them all afterwards."""
    saved = {name: getattr(module, name) for name in (*steps, *replace)}

    def spy(real: Callable[..., Any], calls: list[tuple[str, str, Detail | None]]) -> Callable[..., Any]:
        count = [0]

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            key, label, detail = calls[min(count[0], len(calls) - 1)]
            count[0] += 1
            return timer.measure(key, label, real, *args, detail=detail, **kwargs)

        return wrapped

    try:
        for name, calls in steps.items():
            setattr(module, name, spy(saved[name], calls))
        for name, value in replace.items():
            setattr(module, name, value)
        yield
    finally:
        for name, real in saved.items():
            setattr(module, name, real)


def _matched(tok: StandInTokenizer, what: str) -> Detail:
    """Detail of a matching step (subword vectors or word sets): tokens matched, edges or pairs, and the seconds
    the stand-in tokenizer spent inside the step."""
    def detail(args: tuple, kwargs: dict, out: Any) -> tuple[str, dict[str, Any]]:
        if what == "edges":
            n_tokens, matched, n = len(out[1]), int((out[1] > 0).sum()), int(out[1].sum())
        else:
            n_tokens, matched, n = out.n_tokens, int((out.lengths > 0).sum()), len(out.words)
        stand_in = tok.backend_tokenizer.take()
        return (f"{matched:,} of {n_tokens:,} tokens matched, {n:,} {what} (of which stand-in tokenizer "
                f"{stand_in:.1f} s)", {"stand_in_tokenizer_s": stand_in})
    return detail


def _training(args: tuple, kwargs: dict, out: Any) -> tuple[str, dict[str, Any]]:
    cfg, o = args[0], out[1]
    return (f"{cfg.layers} x {cfg.hidden}, {len(args[5][0]):,} pairs, {o.epochs_run} epochs (best {o.best_epoch}, "
            f"early stop: {o.stopped_early}), {o.pairs_per_second:,.0f} pairs/s, val cos {o.val_cosine:.3f}",
            {"epochs": o.epochs_run, "best_epoch": o.best_epoch, "stopped_early": o.stopped_early,
             "pairs_per_s": o.pairs_per_second, "train_pairs": int(len(args[5][0]))})


def _rows(args: tuple, kwargs: dict, out: Any) -> str:
    return f"{len(args[2]):,} rows"


def _fallback(args: tuple, kwargs: dict, out: Any) -> str:
    return f"{args[1]:,} x {args[0].shape[1]}"


def _neighbours(args: tuple, kwargs: dict, out: Any) -> str:
    return f"{len(args[0]):,} target x {len(args[1]):,} source rows, k={kwargs.get('k')}"


def _copies(args: tuple, kwargs: dict, out: Any) -> str:
    return f"{len(args[2].copy):,} rows"


def _predict(args: tuple, kwargs: dict, out: Any) -> str:
    return f"{len(args[2]):,} target tokens"


def run_method(name: str, syn: Synthetic, args: argparse.Namespace,
               on_row: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """``name``'s ``initialize`` on the synthetic context, each step timed (``on_row`` told as each finishes); rows
    in the order the steps ran, then the rest and the whole."""
    timer = StepTimer(args.device, on_row)
    wv = syn.wv

    def given_vectors(*a: Any, **k: Any) -> WordVectors:
        return wv

    with tempfile.TemporaryDirectory() as tmp:
        marker = Path(tmp) / "synthetic-word-vectors.txt"
        marker.write_text(json.dumps(syn.info))

        class World:
            manifest: dict[str, Any] = {}

            @staticmethod
            def resource_files(kind: str) -> list[Path]:
                return [marker] if kind == "word_vectors" else []

        params: dict[str, Any] = {}
        if name == "hyperofa":
            params = {"preset": args.preset, "source_kind": "multi", "control": args.control, "cache": False}
            if args.max_epochs:
                params["epochs"] = args.max_epochs
        ctx = InitContext(source_matrix=syn.source_matrix, source_tokenizer=syn.source_tok,
                          target_tokenizer=syn.target_tok, mapping_for=lambda rule, **o: syn.mapping, world=World(),
                          seed=args.seed, device=args.device, profile=None, factorized=args.dim < 768, params=params)
        common = {"gaussian_start": [("fallback", "Gaussian fallback matrix (all |V_t| rows)", _fallback)],
                  "place": [("place", "place the computed rows", _rows)],
                  "copy_rows": [("copy", "copy the overlap rows", _copies)]}
        if name == "ofa":
            module: Any = ofa
            method: Any = ofa.OFAInit()
            steps = {"cached_subword_vectors": [
                ("source_subwords", "subword vectors, source", _matched(syn.source_tok, "edges")),
                ("target_subwords", "subword vectors, target", _matched(syn.target_tok, "edges"))],
                     "knn_softmax_combine": [("neighbours", "neighbour search + softmax combination", _neighbours)],
                     **common}
        else:
            module, method = hyperofa, hyperofa.HyperOFAInit()
            steps = {"cached_word_sets": [
                ("source_word_sets", "word sets, source", _matched(syn.source_tok, "pairs")),
                ("target_word_sets", "word sets, target", _matched(syn.target_tok, "pairs"))],
                     "_hash_tensor": [("hash", "source matrix hash (cache key)", None)],
                     "train_hypernetwork": [("train", "hypernetwork training to early stop", _training),
                                            ("control", "shuffled-target control training", _training)],
                     "predict": [("predict", "hypernetwork prediction", _predict)], **common}
        with spying(module, steps, timer, {"load_word_vectors": given_vectors}):
            result = timer.measure("total", f"whole initialize() ({name})", method.initialize, ctx)
    total = timer.rows.pop()
    cuda = [r["cuda_peak_mb"] for r in timer.rows if r["cuda_peak_mb"] is not None]
    total["cuda_peak_mb"] = max(cuda) if cuda else None  # the steps reset the CUDA peak; the whole is their max
    counts = result.counts()
    total["detail"] = ", ".join(f"{k} {v:,}" for k, v in counts.items() if v)
    rest = total["seconds"] - sum(r["seconds"] for r in timer.rows)
    rest_cpu = total["cpu_s"] - sum(r["cpu_s"] for r in timer.rows)
    timer.rows.append({"id": "rest", "step": "rest of initialize()", "seconds": rest, "cpu_s": rest_cpu,
                       "rss_rise_mb": None,
                       "peak_rss_mb": None, "cuda_peak_mb": None, "detail": "between the steps above"})
    timer.rows.append(total)
    del result
    gc.collect()
    return timer.rows


# -- the paper-size hypernetwork -------------------------------------------------------------------------
def hn_paper(syn: Synthetic, args: argparse.Namespace) -> dict[str, Any]:
    preset = PRESETS[args.hn_preset]
    out_dim = int(preset.output_dim or 100)
    rng = np.random.default_rng([args.seed, 0x4E])
    targets = torch.from_numpy(planted_rows(syn.source_means, out_dim, rng))
    tokens = np.flatnonzero(syn.source_sets.lengths > 0)
    sets = [truncate_set(syn.source_sets.get(int(i)), preset.max_set, "random", args.seed, int(i)) for i in tokens]
    split = split_pairs(len(sets), (0.97, 0.025, 0.005), 32, np.random.default_rng([args.seed, 31]))
    device = torch.device(args.device)
    amp = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "off"
    cfg = preset.config(input_dim=WORD_DIM, output_dim=out_dim)
    tcfg = TrainConfig(max_epochs=int(args.max_epochs or preset.max_epochs), patience=preset.patience,
                       batch_size=int(args.hn_batch or preset.batch_size), lr=preset.lr, temperature=0.25, amp=amp)
    with torch.random.fork_rng():
        n_params = parameter_count(build_hypernetwork(cfg))
    timer = StepTimer(args.device)
    timer.measure("hn_paper", f"{preset.name} training", train_hypernetwork, cfg, tcfg,
                  torch.from_numpy(np.asarray(syn.wv.vectors)), sets, targets, split, seed=args.seed,
                  device=device, detail=_training)
    row = timer.rows[0]
    lengths = np.fromiter((len(s) for s in sets), np.int64, len(sets))
    row.update({"preset": preset.name, "layers": cfg.layers, "hidden": cfg.hidden, "output_dim": out_dim,
                "params_M": round(n_params / 1e6, 1), "batch": tcfg.batch_size, "amp": amp,
                "max_epochs": tcfg.max_epochs, "patience": tcfg.patience, "scale": syn.scale,
                "mean_set": round(float(lengths.mean()), 1),
                "seconds_per_epoch": row["seconds"] / max(row["epochs"], 1)})
    return row


# -- output ----------------------------------------------------------------------------------------------
def machine(device: str) -> str:
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(torch.device(device))
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    table(title, [{"step": r["step"], "seconds": f"{r['seconds']:.2f}", "CPU s": f"{r['cpu_s']:.2f}",
                   "RSS rise MB": _mb(r["rss_rise_mb"]),
                   "peak RSS MB": _mb(r["peak_rss_mb"]), "CUDA peak MB": _mb(r["cuda_peak_mb"]),
                   "detail": r["detail"]} for r in rows])
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="1.0 = Glot500 (401,145 / 250,002 tokens, 3.6M words)")
    ap.add_argument("--dim", type=int, default=768, help="width of the source matrix (768 full, or a factorized d')")
    ap.add_argument("--device", default="cpu", help="cpu | cuda")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="torch threads, and the threads that draw the inputs (default: every core)")
    ap.add_argument("--steps", default="ofa,hyperofa", help="methods to run, comma-separated ('' for none)")
    ap.add_argument("--max-epochs", type=int, default=None, help="bound on the hypernetworks' epochs")
    ap.add_argument("--preset", default="cpu", help="HyperOFA's preset in the whole run (cpu | paper | a name)")
    ap.add_argument("--control", action="store_true", help="also train HyperOFA's shuffled-target control")
    ap.add_argument("--hn-paper", action="store_true", help="train the paper-size hypernetwork")
    ap.add_argument("--hn-preset", default="HN-X-100", help="the paper preset of --hn-paper")
    ap.add_argument("--hn-batch", type=int, default=None, help="batch of --hn-paper (default: the preset's, 256)")
    ap.add_argument("--hn-scale", type=float, default=None, help="scale of --hn-paper's pairs (default: --scale)")
    ap.add_argument("--median-words", type=float, default=10.0, help="median words per matched token")
    ap.add_argument("--sigma-words", type=float, default=2.0, help="log-normal sigma of words per matched token")
    ap.add_argument("--copy-fraction", type=float, default=0.62, help="target tokens that copy a source row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write everything as JSON to this file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    GENERATION_THREADS[0] = args.threads
    methods = [m.strip() for m in args.steps.split(",") if m.strip()]
    if unknown := set(methods) - {"ofa", "hyperofa"}:
        ap.error(f"unknown --steps {sorted(unknown)}")
    hn_scale = args.scale if args.hn_scale is None else args.hn_scale

    cache: dict[float, tuple[Synthetic, float]] = {}

    def inputs(scale: float) -> tuple[Synthetic, float]:
        if scale not in cache:
            cache.clear()
            gc.collect()
            t0 = time.perf_counter()
            syn = generate(scale, args.dim, seed=args.seed, median=args.median_words, sigma=args.sigma_words,
                           copy_fraction=args.copy_fraction)
            cache[scale] = (syn, time.perf_counter() - t0)
        return cache[scale]

    head = {"device": args.device, "machine": machine(args.device), "torch_threads": torch.get_num_threads(),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__,
            "python": platform.python_version()}
    print(f"{args.device} ({head['machine']}), torch {torch.__version__}, {head['torch_threads']} torch thread(s), "
          f"OMP_NUM_THREADS={head['OMP_NUM_THREADS']}")
    report: dict[str, Any] = {"header": head, "methods": {}, "hn_paper": None}

    def save() -> None:  # after every part, so that a run stopped later keeps what it measured
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    if methods:
        syn, gen_s = inputs(args.scale)
        report["header"].update(scale=args.scale, generation_seconds=round(gen_s, 2), **syn.info)
        i = syn.info
        print(f"scale {args.scale}: |V_t| {i['target_tokens']:,}, |V_s| {i['source_tokens']:,} x {i['dim']}, "
              f"{i['words']:,} words x {WORD_DIM}; copied {i['copied']:,}, wise {i['wise']:,}, source matched "
              f"{i['source_matched']:,}; words per matched source token {i['words_per_matched_source_token']}; "
              f"inputs generated in {gen_s:.1f} s on {args.threads} thread(s) (not in the tables)", flush=True)
        save()
    for name in methods:
        syn, _ = inputs(args.scale)

        def on_row(rows: list[dict[str, Any]], name: str = name) -> None:
            """Each step's line as it finishes, and the JSON kept up to date (a run stopped later keeps it)."""
            r = rows[-1]
            print(f"  {name}: {r['step']}: {r['seconds']:.2f} s (CPU {r['cpu_s']:.2f} s, peak RSS "
                  f"{_mb(r['peak_rss_mb'])} MB, CUDA peak {_mb(r['cuda_peak_mb'])} MB) {r['detail']}", flush=True)
            report["methods"][name] = list(rows)
            save()

        rows = run_method(name, syn, args, on_row)
        report["methods"][name] = rows
        save()
        print_rows(f"{'OFA' if name == 'ofa' else 'HyperOFA'} at scale {args.scale} on {args.device} "
                   f"({head['machine']}, {head['torch_threads']} thread(s))", rows)
    if args.hn_paper:
        syn, gen_s = inputs(hn_scale)
        row = hn_paper(syn, args)
        row["generation_seconds"] = round(gen_s, 2)
        report["hn_paper"] = row
        save()
        print_rows(f"paper-size hypernetwork {row['preset']} ({row['layers']} x {row['hidden']}, "
                   f"{row['params_M']}M parameters, batch {row['batch']}, amp {row['amp']}, patience "
                   f"{row['patience']}, at most {row['max_epochs']} epochs) on {row['train_pairs']:,} synthetic "
                   f"pairs (scale {hn_scale}, mean set {row['mean_set']}), {args.device} ({head['machine']}, "
                   f"{head['torch_threads']} thread(s))", [row])
        print(f"{row['pairs_per_s']:,.1f} pairs/s, {row['epochs']} epochs (best {row['best_epoch']}, stopped "
              f"early: {row['stopped_early']}), {row['seconds_per_epoch']:.1f} s per epoch")
    save()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
