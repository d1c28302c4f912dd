"""Benchmark HyperOFA's hypernetwork training on the CPU.

Two parts, each printed as a table:

1. **Paper sizes** (``--presets``, default HN-R-100 and HN-X-100; add HN-X-400 etc. by name): training throughput in
   pairs per second for a few length-bucketed batches of ``--paper-batch`` pairs (64; the paper's 256 needs several
   GB of activations on a CPU) after one warm-up batch, with the paper's model (BiLSTM,
   ColexNet+ input 200, dropout 0.4, Adam), on sets whose lengths follow ``--median-set`` / ``--sigma-set``
   (log-normal, clipped to 1..256). The paper trained these on two A100s; on a CPU they only show how far out of
   reach they are.
2. **Default sizing for the bible world** (the ``cpu`` preset that ``preset="auto"`` picks outside the glot500
   world): a full training run -- the hypernetwork and the shuffled-target control, early stopping as configured --
   on a planted problem of the bible world's size: ``--pairs`` training tokens (of a ~30k-token source vocabulary)
   with matched sets drawn from ``--words`` 200-d word vectors, targets ``GELU(mean(W[set]) A1) A2 + noise`` in
   ``--dim`` coordinates. Reports wall time, epochs, throughput, and the validation cosine of the network and of
   the control.

    OMP_NUM_THREADS=1 python benchmarks/bench_hypernetwork.py              # 1 thread (the machine is shared)
    python benchmarks/bench_hypernetwork.py --threads 2 --presets HN-R-100,HN-X-100,HN-X-400 --batches 2

3. **A real world** (``--world bible``, off by default; the world must be built): HyperOFA as the main job
   initializes it (the profile's method parameters, ``--source``, ``--dim``), with the hypernetwork's learning curve
   printed epoch by epoch (training loss, validation loss, validation cosine, learning rate), its training time, and
   reference predictors on the same validation tokens, which show how much of a source token's row its matched word
   vectors can predict at all: the mean training row, OFA's convex combination (the 10 training tokens whose mean
   word vectors are nearest, softmax(cos / 0.1)), and a ridge regression from the mean word vector; then the mean
   norm of the predicted target rows next to that of the source rows.

    OMP_NUM_THREADS=1 python benchmarks/bench_hypernetwork.py --presets '' --sizing '' --world bible

Timings depend on the thread count (``--threads``, default 1) and on other load on the machine: wall-clock seconds
(``*_s``) are printed next to the process's CPU seconds (``*_cpu_s``), which is what an unloaded machine would take
with one thread.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from methods.hypernetwork import (
    PRESETS,
    SetData,
    TrainConfig,
    bucket_batches,
    build_hypernetwork,
    hyperofa_loss,
    parameter_count,
    train_hypernetwork,
)
from methods.hypernetwork_data import split_pairs


def set_lengths(n: int, median: float, sigma: float, max_set: int, rng: np.random.Generator) -> np.ndarray:
    return np.clip(np.round(rng.lognormal(math.log(median), sigma, n)), 1, max_set).astype(np.int64)


def planted_problem(n_pairs: int, n_words: int, word_dim: int, dim: int, *, median: float, sigma: float,
                    max_set: int, noise: float, seed: int) -> tuple[torch.Tensor, list[np.ndarray], torch.Tensor]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n_words, word_dim)).astype(np.float32)
    lengths = set_lengths(n_pairs, median, sigma, max_set, rng)
    # frequent words are shared by many sets (Zipf-like), as subwords of common words are
    p = 1.0 / np.arange(1, n_words + 1) ** 0.8
    p /= p.sum()
    sets = [np.unique(rng.choice(n_words, size=int(n), p=p)) for n in lengths]
    a1 = rng.standard_normal((word_dim, 2 * dim)) / math.sqrt(word_dim)
    a2 = rng.standard_normal((2 * dim, dim)) / math.sqrt(2 * dim)
    means = np.stack([vectors[s].mean(0) for s in sets])
    h = torch.nn.functional.gelu(torch.from_numpy(means @ a1 * 3)).numpy()
    y = h @ a2
    y = y / y.std() + noise * rng.standard_normal(y.shape)
    y = y / math.sqrt(30_000)  # the scale of F_s = U[:, :d'] for a ~30k vocabulary
    return torch.from_numpy(vectors), sets, torch.from_numpy(y.astype(np.float32))


def bench_preset(name: str, batches: int, args: argparse.Namespace) -> dict[str, float | str]:
    pr = PRESETS[name]
    cfg = pr.config(input_dim=200, output_dim=int(pr.output_dim or 100))
    rng = np.random.default_rng(0)
    bs = args.paper_batch
    n = bs * 40 * (batches + 1)
    vectors = torch.from_numpy(rng.standard_normal((5000, 200)).astype(np.float32))
    sets = [rng.choice(5000, size=int(k), replace=False)
            for k in set_lengths(n, args.median_set, args.sigma_set, 256, rng)]
    targets = torch.from_numpy(rng.standard_normal((n, cfg.output_dim)).astype(np.float32))
    data = SetData(vectors, sets, targets, torch.device("cpu"))
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_hypernetwork(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    lengths = np.fromiter((len(s) for s in sets), np.int64, len(sets))
    order = bucket_batches(lengths, bs, 40, rng, drop_last=True)  # random batches of similar lengths
    model.train()
    times, cpu = [], []
    for i, b in enumerate(order[: batches + 1]):
        t0, c0 = time.perf_counter(), time.process_time()
        x, lens = data.batch([sets[j] for j in b])
        loss, _, _ = hyperofa_loss(model(x, lens), data.targets[torch.from_numpy(b)], lam=0.1, temperature=0.5)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i > 0:  # the first batch warms up
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    per_batch = float(np.mean(times))
    per_batch_cpu = float(np.mean(cpu))
    epoch_pairs = {"mono": 22_000, "multi": 103_000}.get(pr.source_kind or "", 0)
    return {"preset": name, "params_M": parameter_count(model) / 1e6, "s_per_batch": per_batch,
            "cpu_s_per_batch": per_batch_cpu, "pairs_per_s": bs / per_batch,
            "pairs_per_cpu_s": bs / per_batch_cpu, "epoch_cpu_h": epoch_pairs / (bs / per_batch_cpu) / 3600,
            "paper_epochs": pr.converged_epoch or 0}


def bench_default(args: argparse.Namespace) -> dict[str, float | str]:
    pr = PRESETS[args.sizing]
    if args.max_set:
        pr = replace(pr, max_set=args.max_set)
    vectors, sets, targets = planted_problem(args.pairs, args.words, 200, args.dim, median=args.median_set,
                                             sigma=args.sigma_set, max_set=pr.max_set, noise=args.noise, seed=1)
    cfg = pr.config(input_dim=200, output_dim=args.dim)
    tcfg = TrainConfig(max_epochs=pr.max_epochs, patience=pr.patience, batch_size=pr.batch_size, lr=pr.lr,
                       temperature=0.5)
    if args.epochs:
        tcfg = replace(tcfg, max_epochs=args.epochs)
    split = split_pairs(len(sets), (0.97, 0.025, 0.005), 32, np.random.default_rng(2))
    t0, c0 = time.perf_counter(), time.process_time()
    _, main = train_hypernetwork(cfg, tcfg, vectors, sets, targets, split, seed=3)
    t_main, c_main = time.perf_counter() - t0, time.process_time() - c0
    shuffled = targets.clone()
    tr = torch.from_numpy(split[0])
    shuffled[tr] = targets[tr[torch.from_numpy(np.random.default_rng(4).permutation(len(tr)))]]
    t1, c1 = time.perf_counter(), time.process_time()
    _, control = train_hypernetwork(cfg, tcfg, vectors, sets, shuffled, split, seed=3)
    t_control, c_control = time.perf_counter() - t1, time.process_time() - c1
    lengths = np.array([len(s) for s in sets])
    with torch.random.fork_rng():
        n_params = parameter_count(build_hypernetwork(cfg))
    return {"preset": pr.name, "max_set": pr.max_set, "layers x hidden": f"{cfg.layers}x{cfg.hidden}",
            "params_M": n_params / 1e6, "pairs": len(split[0]),
            "mean_set": float(lengths.mean()), "epochs": main.epochs_run, "best_epoch": main.best_epoch,
            "train_s": t_main, "train_cpu_s": c_main, "control_s": t_control,
            "control_cpu_s": c_control, "pairs_per_s": main.pairs_per_second,
            "val_cos": main.val_cosine, "control_val_cos": control.val_cosine}


def bench_world(args: argparse.Namespace) -> None:
    """HyperOFA on a built world, the hypernetwork's training data recorded on the way (see the module docstring)."""
    import tempfile

    from torch.nn import functional as F

    import methods.hyperofa as hyperofa
    from harness.core.profiles import profile
    from harness.initialize import initialize_model
    from harness.worlds import get_world

    world = get_world(args.world)
    source = args.source or world.manifest.get("default_source") or world.sources[0]
    params = {**profile(args.profile).get("method_params", {}).get("hyperofa", {}), "cache": False,
              "control": False}
    seen: dict[str, object] = {}
    real = hyperofa.train_hypernetwork

    def spy(cfg, tcfg, vectors, sets, targets, split, **kw):  # records the pairs, then trains as usual
        t0, c0 = time.perf_counter(), time.process_time()
        model, outcome = real(cfg, tcfg, vectors, sets, targets, split, **kw)
        seen.update(cfg=cfg, tcfg=tcfg, vectors=vectors, sets=sets, targets=targets, split=split, outcome=outcome,
                    wall=time.perf_counter() - t0, cpu=time.process_time() - c0)
        return model, outcome

    hyperofa.train_hypernetwork = spy
    try:
        with tempfile.TemporaryDirectory() as out:
            report = initialize_model(world, source, "hyperofa", dim=args.world_dim, seed=args.seed, params=params,
                                      out_dir=Path(out))
    finally:
        hyperofa.train_hypernetwork = real
    st = report["method_stats"]
    o = seen["outcome"]
    cfg, tcfg = seen["cfg"], seen["tcfg"]
    curve = {k: dict((int(e), v) for e, v in o.curves[k]) for k in ("train_loss", "val_loss", "val_cosine", "lr")}
    rows = [{"epoch": str(e), "train_loss": f"{curve['train_loss'][e]:.4f}", "val_loss": f"{curve['val_loss'][e]:.4f}",
             "val_cosine": f"{curve['val_cosine'][e]:.4f}", "lr": f"{curve['lr'][e]:.2e}",
             "kept": "*" if e == o.best_epoch else ""} for e in sorted(curve["val_loss"])]
    table(f"{args.world}/{source}, dim {args.world_dim or 'full'}: HyperOFA's hypernetwork ({cfg.layers}x{cfg.hidden}, "
          f"lr {tcfg.lr}, batch {tcfg.batch_size}, patience {tcfg.patience}, at most {tcfg.max_epochs} epochs; "
          f"{st['train_pairs']} training / {st['val_pairs']} validation pairs)", rows)
    print(f"stopped at epoch {o.epochs_run} (best {o.best_epoch}), early: {o.stopped_early}; training "
          f"{seen['wall']:.1f} s wall, {seen['cpu']:.1f} s CPU")

    vectors, sets, y = seen["vectors"], seen["sets"], seen["targets"]
    tr, va, _ = (torch.from_numpy(np.asarray(a)) for a in seen["split"])

    def mean_vectors(idx: torch.Tensor) -> torch.Tensor:
        return torch.stack([vectors[torch.from_numpy(np.asarray(sets[int(i)]))].mean(0) for i in idx])

    y_tr, y_va = y[tr], y[va]
    x_tr, x_va = mean_vectors(tr), mean_vectors(va)
    sims = F.normalize(x_va, dim=1) @ F.normalize(x_tr, dim=1).T
    top, nbr = sims.topk(min(10, len(tr)), dim=1)
    ofa = (torch.softmax(top / 0.1, dim=1)[..., None] * y_tr[nbr]).sum(1)
    a = torch.cat([x_tr, torch.ones(len(x_tr), 1)], 1)
    w = torch.linalg.solve(a.T @ a + 10.0 * torch.eye(a.shape[1]), a.T @ y_tr)
    ridge = torch.cat([x_va, torch.ones(len(x_va), 1)], 1) @ w

    def cos(pred: torch.Tensor) -> float:
        return float(F.cosine_similarity(pred, y_va, dim=1).mean())

    table("validation cosine of reference predictors on the same validation tokens", [
        {"predictor": "mean training row", "val_cos": f"{cos(y_tr.mean(0, keepdim=True).expand_as(y_va)):.4f}"},
        {"predictor": "OFA convex combination (top-10, cos/0.1)", "val_cos": f"{cos(ofa):.4f}"},
        {"predictor": "ridge on the mean word vector", "val_cos": f"{cos(ridge):.4f}"},
        {"predictor": "the hypernetwork (kept checkpoint)", "val_cos": f"{o.val_cosine:.4f}"},
    ])
    print(f"mean row norm: predicted target rows {st['predicted_row_norm']:.3f}, source rows {st['source_row_norm']:.3f}")


def table(title: str, rows: list[dict[str, float | str]]) -> None:
    if not rows:
        return
    cols = list(rows[0])
    fmt = [max(len(c), *(len(_f(r[c])) for r in rows)) for c in cols]
    print(f"\n{title}")
    print("  ".join(c.rjust(w) for c, w in zip(cols, fmt, strict=True)))
    for r in rows:
        print("  ".join(_f(r[c]).rjust(w) for c, w in zip(cols, fmt, strict=True)))


def _f(v: float | str) -> str:
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 100 else f"{v:.0f}"
    return str(v)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--presets", default="HN-R-100,HN-X-100", help="paper presets to time ('' to skip)")
    ap.add_argument("--batches", type=int, default=3, help="timed batches per paper preset")
    ap.add_argument("--paper-batch", type=int, default=64,
                    help="batch of the paper-preset timing (the paper's 256 needs several GB of activations)")
    ap.add_argument("--sizing", default="cpu", help="the preset of the default-sizing run ('' to skip)")
    ap.add_argument("--pairs", type=int, default=10_000, help="training tokens of the bible-size problem")
    ap.add_argument("--words", type=int, default=20_000)
    ap.add_argument("--dim", type=int, default=100, help="D' of the bible-size problem")
    ap.add_argument("--median-set", type=float, default=4.0)
    ap.add_argument("--sigma-set", type=float, default=1.3)
    ap.add_argument("--noise", type=float, default=1.0, help="planted noise (relative to the signal's std)")
    ap.add_argument("--epochs", type=int, default=0, help="override the preset's max epochs")
    ap.add_argument("--max-set", type=int, default=0, help="override the preset's maximum set size")
    ap.add_argument("--world", default="", help="also run HyperOFA on this built world ('' to skip)")
    ap.add_argument("--source", default="", help="the world's source model (default: its default)")
    ap.add_argument("--world-dim", type=int, default=None, help="factorized dim on the world (default: full)")
    ap.add_argument("--profile", default="cpu", help="whose HyperOFA method parameters to use")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")
    if args.sizing:
        table(f"default sizing '{args.sizing}' on a planted bible-size problem ({args.pairs} pairs, "
              f"{args.words} words x 200, D'={args.dim}): network and shuffled-target control",
              [bench_default(args)])
    if args.world:
        bench_world(args)
    if args.presets:
        rows = [bench_preset(n.strip(), args.batches, args) for n in args.presets.split(",") if n.strip()]
        table(f"paper presets: training throughput, batch {args.paper_batch}, {args.batches} timed batches "
              f"(epoch_cpu_h: CPU hours per epoch of the paper's 22K / 103K pairs)", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
