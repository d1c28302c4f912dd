"""The single entry point from (world, source, method, dim, seed, params) to an initialized model folder.

The runner and ``harness init`` call :func:`initialize_model`; evaluation and CPT read models back with
:func:`load_model` and write checkpoints with :func:`save_model` (both handle factorized models).

What :func:`initialize_model` writes into ``out_dir``::

    config.json, model.safetensors      the target model (masked or causal LM; + factorization.json if factorized)
    tokenizer.json, tokenizer_config.json ...   the target tokenizer
    provenance.npy                      int8 per target id: 0 copied, 1 method, 2 random fallback, 3 UNK
    init_report.json                    counts (adding up to |V_t|), overlap rule and stats, params, dim, seed,
                                        seconds, peak memory, world hash, method, surgery details
    artifacts/                          whatever the method chose to keep (its ``ctx.workdir``)

Inside the product cache (``<harness home>/products``, where the runner builds its init products) the folder is
*compact*: ``model.safetensors`` holds only the tensors the initialization changed (the token embeddings, the
remapped output bias, a factorized model's coordinates), and ``body.json`` names the source model's weight files
(with their sha256) that hold the rest, bit for bit. :func:`load_model` puts the two together (same tensors as
the full folder); ``harness init --out DIR`` outside the cache writes a full folder that any HF loader reads.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import platform
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.errors import ConfigError, HarnessError
from harness.core.paths import harness_home
from harness.core.record import INIT_REPORT
from harness.core.registry import dim_refusal, untied_refusal
from harness.core.surgery import assemble_model, save_model
from harness.core.surgery import load_model as load_full_model
from methods import own_cost
from methods.base import InitContext, InitResult, Provenance

log = logging.getLogger(__name__)

__all__ = ["initialize_model", "load_model", "save_model", "progress_from_rich", "SURGERY_PARAMS", "BODY_FILE"]

BODY_FILE = "body.json"
BODY_FORMAT = "harness-source-body-1"

# keys of ``params`` that configure the surgery rather than the method (taken out before the method sees them)
SURGERY_PARAMS = ("bias", "untied_output")


class PeakMemory:
    """Peak resident memory of this process while the block runs (sampled every ``interval`` s), and on a CUDA
    ``device`` the peak memory allocated on that device (``cuda:N``'s, not ``cuda:0``'s). A CPU ``device`` never
    touches CUDA (asking would start a CUDA context in a CPU cell on a GPU host); ``device=None`` measures the
    current CUDA device when there is one (the benchmarks' use). ``peak_rss_mb`` is the highest RSS seen;
    ``extra_rss_mb`` its rise over the RSS at entry (what the block itself needed)."""

    def __init__(self, interval: float = 0.02, device: str | None = None):
        self.interval = interval
        self.device = device
        self.start_rss = self.peak_rss = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.cuda_peak_mb: float | None = None

    @staticmethod
    def _rss() -> int:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak_rss = max(self.peak_rss, self._rss())

    def __enter__(self) -> PeakMemory:
        self.start_rss = self.peak_rss = self._rss()
        if self._cuda() is not None:
            torch.cuda.reset_peak_memory_stats(self._cuda())
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak_rss = max(self.peak_rss, self._rss())
        if self._cuda() is not None:
            self.cuda_peak_mb = torch.cuda.max_memory_allocated(self._cuda()) / 2**20

    def _cuda(self) -> torch.device | None:
        """The CUDA device measured, or None."""
        if self.device is None:
            return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else None
        dev = torch.device(self.device)
        if dev.type != "cuda":
            return None
        return dev if dev.index is not None else torch.device("cuda", torch.cuda.current_device())

    def as_dict(self) -> dict[str, float | None]:
        return {"peak_rss_mb": round(self.peak_rss / 2**20, 1),
                "extra_rss_mb": round((self.peak_rss - self.start_rss) / 2**20, 1),
                "cuda_peak_mb": None if self.cuda_peak_mb is None else round(self.cuda_peak_mb, 1)}


def progress_from_rich(progress: Any) -> Callable[[str, int], Callable[[int], None]]:
    """Adapt a running ``rich.progress.Progress`` to the ``progress`` callback of :func:`initialize_model`
    (``progress(label, total)`` returns ``advance(n)``); each label gets its own bar, removed when complete."""

    def start(label: str, total: int) -> Callable[[int], None]:
        task = progress.add_task(f"  {label}", total=max(int(total), 1))

        def advance(n: int) -> None:
            if task not in progress.task_ids:
                return
            progress.advance(task, n)
            if progress._tasks[task].finished:
                progress.remove_task(task)

        return advance

    return start


def row_norm_ratio(result: InitResult, source_matrix: torch.Tensor) -> float | None:
    """The largest L2 norm of the target rows the method did not copy (computed, drawn or UNK rows) over the
    largest norm of the source rows it started from, in the same space (the factorized coordinates where it
    factorized); None where every row was copied or the source rows are all zero."""
    new = torch.as_tensor(result.provenance != int(Provenance.COPIED))
    if not bool(new.any()):
        return None
    top = float(source_matrix.float().norm(dim=1).max())
    if not top > 0:
        return None
    return round(float(result.matrix.float()[new].norm(dim=1).max()) / top, 6)


def _check_result(result: InitResult, n_t: int, width: int, method: str) -> None:
    m = result.matrix
    if tuple(m.shape) != (n_t, width):
        raise HarnessError(f"method {method!r} returned a {tuple(m.shape)} matrix; expected ({n_t}, {width})")
    if not torch.isfinite(m).all():
        raise HarnessError(f"method {method!r} returned non-finite values")
    if result.provenance.shape != (n_t,):
        raise HarnessError(f"method {method!r} returned provenance of shape {result.provenance.shape}")
    known = {p.value for p in Provenance}
    if not set(np.unique(result.provenance).tolist()) <= known:
        raise HarnessError(f"method {method!r} returned unknown provenance values")
    # an all-zero row is allowed only as the copy of an all-zero source row (e.g. a <pad> row)
    zero = (m == 0).all(dim=1) & torch.from_numpy(result.provenance != Provenance.COPIED)
    if bool(zero.any()):
        raise HarnessError(f"method {method!r} left {int(zero.sum())} all-zero rows (first ids "
                           f"{torch.nonzero(zero).flatten()[:5].tolist()}); every target row must be initialized")


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


def _home_relative(path: Path) -> str:
    """``home:<relative path>`` for a path inside the harness home (so a moved home keeps working), else absolute."""
    path = Path(path).resolve()
    try:
        return "home:" + str(path.relative_to(harness_home()))
    except ValueError:
        return str(path)


def _from_reference(ref: str) -> Path:
    return harness_home() / ref[5:] if ref.startswith("home:") else Path(ref)


def in_product_cache(out_dir: Path) -> bool:
    """Whether ``out_dir`` lies in the harness home's product cache (where init products are kept compact)."""
    try:
        Path(out_dir).resolve().relative_to(harness_home() / "products")
        return True
    except ValueError:
        return False


def compact_model_folder(out_dir: Path, source_dir: Path) -> dict[str, Any] | None:
    """Rewrite ``out_dir/model.safetensors`` without the tensors that are bit-identical to the source model's
    (same name, dtype, shape and values), and write ``body.json`` naming the source files that hold them. Returns
    the body description, or None when nothing was shared (or either side is not a single safetensors file)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    out_dir, source_dir = Path(out_dir), Path(source_dir)
    own = sorted(out_dir.glob("model*.safetensors"))
    src_files = sorted(source_dir.glob("model*.safetensors"))
    if len(own) != 1 or not src_files:
        return None
    state = load_file(str(own[0]))
    with safe_open(str(own[0]), framework="pt") as f:
        metadata = f.metadata()
    shared: dict[str, str] = {}
    for sf in src_files:
        src = load_file(str(sf))
        for k, v in state.items():
            t = src.get(k)
            if k not in shared and t is not None and t.dtype == v.dtype and t.shape == v.shape and torch.equal(t, v):
                shared[k] = sf.name
    if not shared:
        return None
    tmp = own[0].with_name(".compact-" + own[0].name)
    save_file({k: v for k, v in state.items() if k not in shared}, str(tmp), metadata=metadata)
    os.replace(tmp, own[0])
    body = {"format": BODY_FORMAT, "source_dir": _home_relative(source_dir),
            "files": {name: _sha256(source_dir / name) for name in sorted(set(shared.values()))},
            "tensors": dict(sorted(shared.items()))}
    (out_dir / BODY_FILE).write_text(json.dumps(body, indent=1))
    return body


def load_model(path: Path, device: str = "cpu") -> torch.nn.Module:
    """Load a model folder written by :func:`save_model` (or ``save_pretrained``), or a compact init product
    (``body.json``: the tensors it does not hold come from the source model's files it names)."""
    path = Path(path)
    body_file = path / BODY_FILE
    if not body_file.is_file():
        return load_full_model(path, device=device)
    from safetensors.torch import load_file
    from transformers import AutoConfig

    from harness.core import objective
    from harness.core.surgery import _factorization_of, _install_factorized

    body = json.loads(body_file.read_text())
    if body.get("format") != BODY_FORMAT:
        raise HarnessError(f"{body_file}: not in the {BODY_FORMAT} format")
    src_dir = _from_reference(body["source_dir"])
    for name, sha in body["files"].items():
        f = src_dir / name
        if not f.is_file() or _sha256(f) != sha:
            raise HarnessError(f"{path}: the source weights it refers to ({f}) are missing or changed; remove the "
                               f"product (harness cache prune --kind init) and run again to rebuild it")
    state: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("model*.safetensors")):
        state.update(load_file(str(f)))
    wanted: dict[str, list[str]] = {}
    for k, name in body["tensors"].items():
        wanted.setdefault(name, []).append(k)
    for name, keys in wanted.items():
        src = load_file(str(src_dir / name))
        state.update({k: src[k] for k in keys})
    config = AutoConfig.from_pretrained(path)
    info = _factorization_of(path, config)
    model = objective.from_config(config)
    if info is not None:
        _install_factorized(model, int(info["vocab_size"]), int(info["dim"]), info.get("padding_idx"))
    missing, unexpected = model.load_state_dict(state, strict=False)
    params = dict(model.named_parameters(remove_duplicate=False))
    loaded = {id(params[k]) for k in state if k in params}
    buffers = dict(model.named_buffers())
    really_missing = [k for k in missing if (k not in params or id(params[k]) not in loaded) and k not in buffers]
    if really_missing or unexpected:
        raise HarnessError(f"compact model at {path} does not match its config: missing {really_missing[:5]}, "
                           f"unexpected {list(unexpected)[:5]}")
    return model.to(device).eval()


def untied_policy(surgery_opts: dict[str, Any], tables: Any, dim: int | None, hidden: int) -> str | None:
    """How the output table is initialized (:mod:`harness.core.surgery`'s ``untied_output``), written into
    ``surgery_opts``; None when there is no untied output table to initialize (tied, or factorized: the
    factorized head is tied to the factors)."""
    from harness.core.surgery import DEFAULT_UNTIED

    if tables.tied or (dim is not None and int(dim) < hidden):
        return None
    surgery_opts.setdefault("untied_output", DEFAULT_UNTIED)
    return str(surgery_opts["untied_output"])


def _source_model(src_dir: Path) -> torch.nn.Module:
    """:func:`load_backbone` as a method's ``ctx.source_model()``: loading the world's model is not its own cost."""
    with own_cost.not_own(own_cost.SOURCE_MODEL):
        return load_backbone(src_dir)


def load_backbone(src_dir: Path) -> torch.nn.Module:
    """The source model's backbone (``AutoModel``: an encoder or a decoder without its head), for a method that
    runs the model (``InitContext.source_model``); the global RNG is left as it was (heads it lacks are drawn)."""
    from transformers import AutoModel

    with torch.random.fork_rng(devices=[]):
        return AutoModel.from_pretrained(src_dir).float().eval()


RESOURCE_NEEDS = {"word_vectors": "word vectors", "target_text": "target-language text",
                  "dictionary": "bilingual dictionaries", "cpt_text": "CPT text"}


def method_costs(cls: Any, profile: str | None) -> dict[str, Any]:
    """What a method needs (the world's resources it requires and what else it declares in ``needs``: a helper
    model, the source model itself) and the GPU-hours ``harness plan`` estimates for one initialization; logged
    with each cell in its init report, shown on the board's cost table (:mod:`leaderboard.costs`)."""
    needs = [RESOURCE_NEEDS.get(r, r) for r in sorted(getattr(cls, "requires", ()))]
    needs += [str(n) for n in getattr(cls, "needs", ())]
    ask = getattr(cls, "cost_estimate", None)
    return {"needs": needs, "gpu_hours_plan": float(ask(profile or "paper")) if ask is not None else None}


def cpu_plan_minutes(world: Any, source: str, method: str, ledger: own_cost.Ledger) -> float | None:
    """The core-minutes ``harness plan`` prices this initialization at on a CPU (:class:`harness.throughput.
    CpuCost` at the world's declared shape, on this cell's threads): the first cell of its family where it built
    what later cells reuse, and the shared products it built (the helper model); None for a world the plan
    cannot price."""
    from harness.throughput import cpu_cost, shared_products

    built = {e["product"] for e in ledger.shared if e["built"]}
    try:
        cost = cpu_cost(str(getattr(world, "name", "")), source)
        seconds = cost.init(method, bool(built)) + sum(cost.shared(p) for p in shared_products(method)
                                                       if p in built)
    except (HarnessError, KeyError, OSError, ValueError):
        return None
    return round(seconds * torch.get_num_threads() / 60, 4)


def _call_method(cls: Any, ctx: InitContext, method: str, n_t: int, output_table: torch.Tensor | None
                 ) -> tuple[InitResult, InitResult | None, float, own_cost.Ledger]:
    """The method's call on the input table and, given ``output_table`` (an untied output table to recompute), again
    on it (same seed, same mapping; its artifacts beside the input table's), each result checked; with the seconds
    of the calls and their ledger of what in them was not the method's own work (:mod:`methods.own_cost`)."""
    width = ctx.source_matrix.shape[1]
    with own_cost.ledger() as ledger:
        t_method = time.perf_counter()
        result = cls().initialize(ctx)
        _check_result(result, n_t, width, method)
        output_result = None
        if output_table is not None:
            out_work = ctx.workdir / "output-table"
            out_work.mkdir(exist_ok=True)
            output_result = cls().initialize(dataclasses.replace(ctx, source_matrix=output_table, workdir=out_work,
                                                                  table="output"))
            if not any(out_work.iterdir()):
                out_work.rmdir()
            _check_result(output_result, n_t, width, method)
        return result, output_result, time.perf_counter() - t_method, ledger


def initialize_model(world: Any, source: str, method: str, *, dim: int | None, seed: int, params: dict,
                     out_dir: Path, device: str = "cpu",
                     progress: Callable[[str, int], Callable[[int], None]] | None = None,
                     log_metric: Callable[[str, float, int], None] | None = None,
                     mapping_cache_dir: Path | None = None, compact: bool | None = None,
                     profile: str | None = None) -> dict[str, Any]:
    """Initialize the target model of ``world`` from ``source`` with ``method``; write it to ``out_dir``.

    ``dim``: the factorized dimension d' (None, or d' >= the hidden size, means full dimension). ``params``: the
    method's hyperparameters, plus the surgery's ``bias`` ("remap" | "zero" | "index") and ``untied_output``
    ("method" | "zero"), see :mod:`harness.core.surgery`. ``progress``: ``progress(label, total) -> advance(n)`` for
    the method's long loops (:func:`progress_from_rich` adapts a rich ``Progress``); ``log_metric(name, value,
    step)`` for curves a method records. ``compact``: keep only the changed tensors and a reference to the source
    body (:func:`compact_model_folder`); None: compact inside the product cache, full elsewhere. ``profile``: the
    run profile, which the method sees as ``ctx.profile`` (its settings for the profile come in ``params``, put
    there by the caller from the method's ``profile_defaults``). Returns the report also written to
    ``init_report.json``.
    """
    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    req = _request(world, source, method, dim, seed, params, device, profile)
    with PeakMemory(device=str(device)) as mem:
        src = _load_source(req)
        fact, source_matrix = _factorized_source(src.rows, dim)
        workdir = out_dir / "artifacts"
        ctx = _init_context(req, src, source_matrix, fact, workdir, mapping_cache_dir, progress, log_metric)
        output_table = src.tables.token_rows(src.tables.output) if src.untied == "recompute" else None
        result, output_result, method_seconds, ledger = _call_method(req.cls, ctx, method, src.n_t, output_table)
        surgery = _assemble(src, result, output_result, fact, req.surgery_opts)
        _write_model_folder(src, result, out_dir, workdir, compact)
    counts = _checked_counts(result, src.n_t)
    report = _report(req, src, ctx, fact, source_matrix, result, surgery, counts,
                     t0=t0, method_seconds=method_seconds, ledger=ledger, mem=mem)
    report = json.loads(json.dumps(report, default=str))  # JSON-safe (numpy scalars, paths) for every consumer
    (out_dir / INIT_REPORT).write_text(json.dumps(report, indent=1, ensure_ascii=False))
    log.info("initialized %s/%s (dim %s, seed %s): %s in %.1fs", source, method, dim, seed, counts,
             report["seconds"])
    return report


@dataclasses.dataclass
class _Request:
    """What :func:`initialize_model` was asked: ``method`` (its registered class) on ``source`` of ``world``, with
    the method's ``params`` and the surgery's options (``surgery_opts``, taken out of the params given)."""

    world: Any
    source: str
    method: str
    cls: Any
    dim: int | None
    seed: int
    params: dict
    surgery_opts: dict[str, Any]
    device: str
    profile: str | None


def _request(world: Any, source: str, method: str, dim: int | None, seed: int, params: dict | None, device: str,
             profile: str | None) -> _Request:
    """The request, once the world has every resource the method requires and the method takes ``dim`` (checked
    before any work)."""
    from harness.core.registry import METHODS

    params = dict(params or {})
    surgery_opts = {k: params.pop(k) for k in SURGERY_PARAMS if k in params}
    cls = METHODS.get(method)
    who = f"method {method!r}"
    for kind in sorted(getattr(cls, "requires", frozenset())):
        world.require(kind, who)  # before any work
    refusal = dim_refusal(method, cls, dim)
    if refusal:
        raise ConfigError(refusal)
    return _Request(world=world, source=source, method=method, cls=cls, dim=dim, seed=seed, params=params,
                    surgery_opts=surgery_opts, device=device, profile=profile)


@dataclasses.dataclass
class _Source:
    """The source side, loaded: the model (which the surgery turns into the target model), both tokenizers, the
    model's embedding tables, their input rows (one per source token) and the untied output table's policy;
    ``n_s`` and ``n_t``: the source and target vocabularies' sizes."""

    dir: Path
    tokenizer: Any
    target_tokenizer: Any
    model: torch.nn.Module
    tables: Any
    rows: torch.Tensor
    untied: str | None
    n_s: int
    n_t: int

    @property
    def hidden(self) -> int:
        return self.rows.shape[1]


def _load_source(req: _Request) -> _Source:
    """The source model and tokenizers and the target tokenizer; the untied output table's policy, refused where
    the method cannot initialize such a table."""
    from transformers import AutoTokenizer

    from harness.core import objective

    src_dir = req.world.source_dir(req.source)
    tgt_dir = req.world.target_tokenizer_dir
    source_tokenizer = AutoTokenizer.from_pretrained(src_dir)
    target_tokenizer = AutoTokenizer.from_pretrained(tgt_dir)
    model = objective.load_pretrained(src_dir)
    n_s = len(source_tokenizer)
    try:
        tables = objective.tables(model, n_s)
    except ConfigError as exc:
        raise HarnessError(f"source {req.source!r}: {exc}") from exc
    e_s = tables.token_rows(tables.input)  # rows beyond the tokenizer (padding rows) belong to no token
    untied = untied_policy(req.surgery_opts, tables, req.dim, e_s.shape[1])
    if refusal := untied_refusal(req.method, req.cls, untied):
        raise ConfigError(refusal)
    return _Source(dir=src_dir, tokenizer=source_tokenizer, target_tokenizer=target_tokenizer, model=model,
                   tables=tables, rows=e_s, untied=untied, n_s=n_s, n_t=len(target_tokenizer))


def _factorized_source(rows: torch.Tensor, dim: int | None) -> tuple[Any, torch.Tensor]:
    """The factorization of the source rows at ``dim`` (None at full dimension), and the matrix the method starts
    from: its coordinates, or the rows themselves."""
    from methods.factorize import factorize

    if dim is not None and int(dim) < rows.shape[1]:
        fact = factorize(rows, int(dim))
        return fact, fact.coords
    return None, rows


def _init_context(req: _Request, src: _Source, source_matrix: torch.Tensor, fact: Any, workdir: Path,
                  mapping_cache_dir: Path | None, progress: Callable[[str, int], Callable[[int], None]] | None,
                  log_metric: Callable[[str, float, int], None] | None) -> InitContext:
    """What the method sees (``workdir``, created here, is where it keeps its artifacts)."""
    from methods.overlap import mapping_cache

    cache_dir = Path(mapping_cache_dir) if mapping_cache_dir is not None else harness_home() / "cache" / "mappings"
    workdir.mkdir(parents=True, exist_ok=True)
    return InitContext(
        source_matrix=source_matrix, source_tokenizer=src.tokenizer, target_tokenizer=src.target_tokenizer,
        mapping_for=mapping_cache(src.tokenizer, src.target_tokenizer, cache_dir), world=req.world,
        seed=int(req.seed), device=req.device, profile=req.profile, factorized=fact is not None, params=req.params,
        workdir=workdir, cache_dir=harness_home() / "cache" / "methods" / getattr(req.cls, "cache_name", req.method),
        progress=progress, log_metric=log_metric, source_model=lambda: _source_model(src.dir),
    )


def _assemble(src: _Source, result: InitResult, output_result: InitResult | None, fact: Any,
              surgery_opts: dict[str, Any]) -> dict[str, Any]:
    """The surgery (:func:`harness.core.surgery.assemble_model`) on the source model with the method's rows, and
    what it did."""
    from harness.core import objective

    surgery = assemble_model(src.model, src.tokenizer, src.target_tokenizer, result.matrix.float(), result.copy,
                             primitive=None if fact is None else fact.primitive,
                             output_matrix=None if output_result is None else output_result.matrix.float(),
                             **surgery_opts)
    surgery["objective"] = objective.objective_of_model(src.model)
    if output_result is not None:
        surgery["output_counts"] = output_result.counts()
    return surgery


def _write_model_folder(src: _Source, result: InitResult, out_dir: Path, workdir: Path, compact: bool | None) -> None:
    """The target model and tokenizer (compact, or full), the provenance of its rows; the artifacts folder only
    where the method kept something."""
    save_model(src.model, out_dir, tokenizer=src.target_tokenizer)
    if compact if compact is not None else in_product_cache(out_dir):
        compact_model_folder(out_dir, Path(src.dir))
    np.save(out_dir / "provenance.npy", result.provenance.astype(np.int8), allow_pickle=False)
    if not any(workdir.iterdir()):
        workdir.rmdir()


def _checked_counts(result: InitResult, n_t: int) -> dict[str, int]:
    """The provenance counts, which must add up to the target vocabulary's size."""
    counts = result.counts()
    if sum(counts.values()) != n_t:
        raise HarnessError(f"provenance counts {counts} do not add up to |V_t| = {n_t}")
    return counts


def _report(req: _Request, src: _Source, ctx: InitContext, fact: Any, source_matrix: torch.Tensor,
            result: InitResult, surgery: dict[str, Any], counts: dict[str, int], *, t0: float,
            method_seconds: float, ledger: own_cost.Ledger, mem: PeakMemory) -> dict[str, Any]:
    """The init report: what was asked, what the method did from ``source_matrix`` (counts, overlap, its
    statistics), its cost (``t0``: when the call started) and the surgery."""
    from harness.tokstats import tokenizer_stats

    rule = getattr(req.cls, "overlap_rule", None)
    # the overlap the method actually used (its own options, e.g. FOCUS's overlap=casefold), else the rule's default
    overlap = (result.stats or {}).get("overlap") or (ctx.mapping_for(rule).stats if rule else {})
    report: dict[str, Any] = {
        "method": req.method,
        "source": req.source,
        "world": getattr(req.world, "name", None),
        "world_hash": req.world.hash,
        "seed": int(req.seed),
        "dim": None if fact is None else int(req.dim),
        "dim_requested": req.dim,
        "hidden_size": int(src.hidden),
        "params": req.params,
        "surgery_params": req.surgery_opts,
        "overlap_rule": rule,
        "overlap": {k: v for k, v in overlap.items() if k != "unk"},
        "counts": counts,
        "target_vocab_size": src.n_t,
        "source_vocab_size": src.n_s,
        # the method's own time: its call, less waiting for shared products and loading the source model
        # (methods.own_cost); the whole of this function (loading, surgery, writing): call_seconds
        "seconds": round(ledger.own(method_seconds), 6),
        "method_seconds": round(method_seconds, 3),
        "call_seconds": round(time.perf_counter() - t0, 3),
        "own_cost": ledger.as_dict(),
        "memory": mem.as_dict(),
        "costs": {**method_costs(req.cls, req.profile), **({"core_minutes_plan": cpu_plan_minutes(
            req.world, req.source, req.method, ledger)} if str(req.device).startswith("cpu") else {})},
        # the method's statistics, and the largest norm of the rows it did not copy over the source rows' largest
        # (init/row_norm_ratio: far above 1, rows far outside the source's; the leaderboard marks such a row)
        "method_stats": {**(result.stats or {}), "row_norm_ratio": row_norm_ratio(result, source_matrix)},
        "artifacts": {k: str(v) for k, v in result.artifacts.items()},
        "surgery": surgery,
        "device": req.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    report["tokenizer_stats"] = tokenizer_stats(req.world, src.tokenizer, src.target_tokenizer, result.provenance)
    if fact is not None:
        report["factorization"] = {"dim": fact.dim, "discarded_energy": fact.discarded_energy,
                                   "kept_energy_share": fact.kept_energy_share}
    return report
