"""CPT throughput for sizing a GPU run: what ``benchmarks/bench_cpt.py`` measured on named GPUs, and how fast a card
that was never measured is expected to be.

The figures live in one data file, ``harness/throughput.json``: each measured row names the GPU kind, the model
(shape and parameter count N), the tokens per second of ``run_cpt`` as ``harness run`` calls it, the date, the
torch version and the benchmark command that produced it (``bench_cpt.py --record`` adds or updates a row); beside
them, the dense bf16 peaks of the cards a plan can be sized for. The arithmetic is the model-FLOPs utilization's:

    MFU = 6 N tokens/s / peak        so        tokens/s = MFU x peak / (6 N)

A plan on a measured card at the measured model's N uses the measured tokens/s as it is; at another N (another
source model or vocabulary, a factorized embedding) the same MFU, i.e. tokens/s scaled by N_measured / N; on a card
never measured, the MFU measured on the reference card at this card's peak. :class:`Rate` says which, in words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError

DATA = Path(__file__).with_name("throughput.json")

# torch.cuda.get_device_name() -> kind: the first pattern contained in the name wins (the specific ones first)
_NAMES = [("H100 PCIE", "h100-pcie"), ("H100", "h100"), ("H200", "h200"), ("A100", "a100"), ("L40S", "l40s"),
          ("L4", "l4"), ("A10", "a10"), ("4090", "rtx4090")]


def load(path: Path | None = None) -> dict[str, Any]:
    """The data file: ``{"peaks_tflops_bf16": {kind: TFLOP/s}, "measured": [row, ...]}``."""
    return json.loads((path or DATA).read_text())


def kind_of(device_name: str) -> str | None:
    """The GPU kind of a device name as torch reports it (``NVIDIA H100 80GB HBM3`` -> ``h100``); None if unknown."""
    upper = device_name.upper()
    return next((kind for pattern, kind in _NAMES if pattern in upper), None)


def peak_flops(kind: str, data: dict[str, Any] | None = None) -> float | None:
    """The card's dense bf16 peak in FLOP/s; None for a card not in the table."""
    tf = (data or load())["peaks_tflops_bf16"].get(kind)
    return None if tf is None else float(tf) * 1e12


def kinds(data: dict[str, Any] | None = None) -> list[str]:
    """Every GPU kind a plan can be sized for: those with a peak and those measured."""
    data = data or load()
    return sorted(set(data["peaks_tflops_bf16"]) | {r["gpu"] for r in data["measured"]})


def measurement(kind: str | None = None, data: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The latest row measured on ``kind`` (None: the latest row of any kind, the plans' default); None if none."""
    rows = [r for r in (data or load())["measured"] if kind is None or r["gpu"] == kind]
    return max(rows, key=lambda r: r["date"]) if rows else None


def mfu(row: dict[str, Any], data: dict[str, Any] | None = None) -> float | None:
    """A measured row's model-FLOPs utilization (6 N tokens/s / its card's peak); None where its peak is unknown."""
    peak = peak_flops(row["gpu"], data)
    return 6 * row["params"] * row["tokens_per_s"] / peak if peak else None


@dataclass(frozen=True)
class Rate:
    """The CPT tokens per second a plan assumes on ``gpu`` for a model of ``params`` parameters, and why."""

    gpu: str
    tokens_per_s: float
    params: int
    measured: bool  # measured on this kind of card (else derived from its peak)
    basis: str
    reference_params: int  # N of the measured model the rate is derived from

    def hours(self, steps: int, effective_batch: int, block_size: int) -> float:
        """GPU-hours of ``steps`` optimizer steps of ``effective_batch`` x ``block_size`` tokens on one card."""
        return steps * effective_batch * block_size / self.tokens_per_s / 3600


def cpt_rate(gpu: str | None = None, params: int | None = None, data: dict[str, Any] | None = None) -> Rate:
    """The rate of ``gpu`` (default: the kind of the latest measurement) for a model of ``params`` parameters
    (default: the measured model's)."""
    data = data or load()
    ref = measurement(None, data)
    if ref is None:
        raise ConfigError(f"{DATA} holds no measured throughput: run `python benchmarks/bench_cpt.py --device cuda "
                          f"--record` on a GPU")
    gpu = (gpu or ref["gpu"]).lower()
    if gpu not in kinds(data):
        raise ConfigError(f"unknown GPU kind {gpu!r} for the plan's sizing; known: {', '.join(kinds(data))} "
                          f"(peaks and measurements in {DATA})")
    own = measurement(gpu, data)
    row = own or ref
    n = int(params or row["params"])
    at = (f"{row['tokens_per_s']:,.0f} tokens/s of {row['path']} on {row['gpu']} ({row['card']}), {row['model']}, "
          f"{row['params'] / 1e6:,.1f}M parameters, torch {row['torch']}, {row['date']}: `{row['command']}`")
    scale = row["params"] / n
    if own is not None:
        return Rate(gpu, row["tokens_per_s"] * scale, n, True,
                    f"measured: {at} (another N at the same MFU: tokens/s x {row['params']:,} / N)", int(row["params"]))
    peak, ref_peak = peak_flops(gpu, data), peak_flops(row["gpu"], data)
    if peak is None or ref_peak is None:
        raise ConfigError(f"GPU kind {gpu!r} has no measurement and no bf16 peak in {DATA}; add its peak "
                          f"(peaks_tflops_bf16) or measure it with `benchmarks/bench_cpt.py --record`")
    ref_mfu = 6 * row["params"] * row["tokens_per_s"] / ref_peak
    return Rate(gpu, row["tokens_per_s"] * scale * peak / ref_peak, n, False,
                f"never measured on {gpu}: its dense bf16 peak {peak / 1e12:,.1f} TFLOP/s at the MFU "
                f"{100 * ref_mfu:.1f} % of {at} (tokens/s = MFU x peak / 6 N)", int(row["params"]))


def mlm_parameters(config: Any, vocab_size: int, dim: int | None = None) -> int:
    """The parameters of ``config``'s masked-LM model with a vocabulary of ``vocab_size`` (the tied embedding
    counted once), and with the embedding factorized to ``dim`` (``vocab x dim`` coordinates and a ``dim x hidden``
    primitive in place of ``vocab x hidden``; the output bias stays). Counted on the meta device: nothing is
    allocated."""
    import copy

    import torch
    from transformers import AutoModelForMaskedLM

    cfg = copy.deepcopy(config)
    cfg.vocab_size = int(vocab_size)
    with torch.device("meta"):
        model = AutoModelForMaskedLM.from_config(cfg)
    n = sum(p.numel() for p in model.parameters())
    hidden = int(cfg.hidden_size)
    if dim is not None and dim < hidden:
        n += vocab_size * dim + dim * hidden - vocab_size * hidden
    return int(n)


def record(row: dict[str, Any], path: Path | None = None) -> Path:
    """Add ``row`` to the data file, replacing a row of the same GPU kind, path and model."""
    path = path or DATA
    data = load(path)
    key = (row["gpu"], row["path"], row["model"])
    data["measured"] = [r for r in data["measured"] if (r["gpu"], r["path"], r["model"]) != key] + [row]
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def model_parameters(world: Any, source: str, dim: int | None, data: dict[str, Any] | None = None
                     ) -> tuple[int, str]:
    """N of a cell's model and where it comes from: counted from the source model's ``config.json`` with the
    target tokenizer's vocabulary when the world is built here; else the measured reference model's (the papers'
    XLM-R base shape with the Glot500-m vocabulary), its embedding factorized to ``dim`` where one is given."""
    src = world.source_dir(source) if world is not None else None
    tok = getattr(world, "target_tokenizer_dir", None) if world is not None else None
    if src is not None and (Path(src) / "config.json").is_file() and tok is not None and Path(tok).is_dir():
        from transformers import AutoConfig, AutoTokenizer

        vocab = len(AutoTokenizer.from_pretrained(tok))
        return mlm_parameters(AutoConfig.from_pretrained(src), vocab, dim), f"{source} with {vocab:,} tokens"
    ref = measurement(None, data)
    if ref is None:
        raise ConfigError(f"{DATA} holds no measured throughput")
    n, vocab, hidden = int(ref["params"]), int(ref["vocab_size"]), int(ref["hidden_size"])
    if dim is not None and dim < hidden:
        n += vocab * dim + dim * hidden - vocab * hidden
    return n, "the measured model's shape: the world is not built here"


# -- a CPU run: seconds of this code, measured, scaled by the world's declared model shape ----------------------
# Each stage of a cell costs a + b x work: ``a`` the stage's seconds on the synthetic world, where the model's work
# is nil (process, Trainer, fastText and logging overheads), and ``a + b`` the seconds the same stage took on the
# reference model (the bible world's main job); ``work`` is the ratio of the model's FLOPs to the reference's
# (token_flops: the tasks' and CPT's passes) or of its embedding (V x h: initialization, loading and writing a
# model). Both figures are in the data file's ``cpu`` section with the command that measured them.
def cpu_figures(data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``cpu`` section of the data file: ``reference`` (the seconds of each stage of a cell of the bible
    world's main job, and that model's shape) and ``fixed`` (the same stages on the synthetic world)."""
    return (data or load())["cpu"]


SHAPE_KEYS = ("hidden_size", "num_layers", "intermediate_size", "target_vocab")


def declared_manifest(world_name: str) -> dict[str, Any]:
    """The manifest a world's builder declares -- its ``describe()`` or ``declare()``, never the built files, so
    that a plan says the same before and after the build; empty where it declares nothing."""
    from harness.worlds import WORLDS
    from harness.worlds.base import builder_sketch

    sketch = builder_sketch(WORLDS.get(world_name), ("describe", "declare"))
    return sketch.manifest if sketch is not None else {}


def declared_source(world_name: str, source: str | None = None) -> dict[str, Any]:
    """What a world's builder declares of ``source`` (default: its default source): its entry in
    :func:`declared_manifest`; empty where it declares nothing."""
    manifest = declared_manifest(world_name)
    src = source or manifest.get("default_source") or next(iter(manifest.get("sources") or {}), None)
    return dict((manifest.get("sources") or {}).get(src) or {})


def reference_for(objective: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``cpu`` figures whose reference model has ``objective``: a decoder's cells are scaled from the decoder
    the data file measured (``reference_clm``: next-token CPT and the held-out causal-LM loss on every position,
    a gated feed-forward block), an encoder's from the masked-LM encoder (``reference``); where the file measured
    no decoder, the encoder's."""
    figures = cpu_figures(data)
    if objective == "clm" and "reference_clm" in figures:
        return {**figures, "reference": figures["reference_clm"], "reference_mlm": figures["reference"],
                "reference_objective": "clm"}
    return {**figures, "reference_objective": "mlm"}


def declared_objective(entry: dict[str, Any]) -> str:
    """The objective of a source's declared entry (:func:`declared_source`): ``mlm`` where it declares none."""
    return str(entry.get("objective") or "mlm")


def declared_shape(world_name: str, source: str | None = None, data: dict[str, Any] | None = None,
                   entry: dict[str, Any] | None = None) -> tuple[dict[str, int], str]:
    """The model shape a world's builder declares for ``source`` (default: its default source) -- what its
    ``describe()`` or ``declare()`` says, never the built files, so that a plan says the same before and after the
    build -- completed with the reference model's shape where it declares less; and in words where it comes from.
    ``entry``: the source's declared entry, where the caller has read it."""
    entry = declared_source(world_name, source) if entry is None else entry
    ref = reference_for(declared_objective(entry), data)["reference"]
    declared = {k: v for k, v in entry.items() if k in SHAPE_KEYS and isinstance(v, int)}
    shape = {k: int(declared.get(k, ref["shape"][k])) for k in SHAPE_KEYS}
    taken = [k for k in SHAPE_KEYS if k not in declared]
    why = (f"declared by world {world_name!r}: {', '.join(k for k in SHAPE_KEYS if k in declared) or 'nothing'}"
           + (f"; {', '.join(taken)} of the reference model ({ref['model']})" if taken else ""))
    return shape, why


def token_flops(shape: dict[str, int], head: bool) -> float:
    """Forward FLOPs per token of an encoder of ``shape``: each layer's four attention projections (4 h^2) and
    its feed-forward block (2 h i), two FLOPs a multiply-add; with ``head`` the MLM head's projection onto the
    vocabulary (h V) too, which continued pre-training computes and the tasks do not."""
    h, n_layers, ffn, vocab = (shape[k] for k in SHAPE_KEYS)
    return 2.0 * (n_layers * (4 * h * h + 2 * h * ffn) + (h * vocab if head else 0))


@dataclass(frozen=True)
class CpuCost:
    """Seconds of each stage of a cell on one thread of the measured CPU, for a model of ``shape``."""

    shape: dict[str, int]
    shape_from: str
    figures: dict[str, Any]

    def _ratio(self, what: str) -> float:
        ref = {k: int(self.figures["reference"]["shape"][k]) for k in SHAPE_KEYS}
        if what == "embedding":
            return self.shape["target_vocab"] * self.shape["hidden_size"] / (ref["target_vocab"] * ref["hidden_size"])
        return token_flops(self.shape, what == "cpt") / token_flops(ref, what == "cpt")

    def _encoder(self) -> CpuCost:
        """This model's cost scaled from the encoder reference (a decoder's stage its own reference did not time)."""
        return CpuCost(self.shape, self.shape_from, {**self.figures, "reference": self.figures["reference_mlm"]})

    def _stage(self, fixed: float, reference: float, ratio: float) -> float:
        return float(fixed) + max(0.0, float(reference) - float(fixed)) * ratio

    def cell(self) -> float:
        """What every cell pays whatever it computes: loading and writing its model, the held-out loss, logging."""
        f = self.figures
        return self._stage(f["fixed"]["cell"], f["reference"]["seconds"]["cell"], self._ratio("embedding"))

    def init(self, method: str, first: bool) -> float:
        """One initialization's own time (the method's call, :mod:`methods.own_cost`): the first cell of a method's
        product family trains what its later cells reuse (fastText models, word sets); a method whose later seeds
        redo work of their own (HyperOFA trains a hypernetwork per seed) has its figure for them (``init_later``);
        the others' work scales with the embedding (V x h). A product that several methods share is priced apart
        (:meth:`shared`)."""
        fx, ref = self.figures["fixed"], self.figures["reference"]["seconds"]
        table = "init_first" if first else "init_later"
        if method not in ref.get(table, {}) and method in self.figures.get("reference_mlm", {}).get(
                "seconds", {}).get(table, {}):  # a decoder's figure the decoder reference did not time
            return self._encoder().init(method, first)
        # a method the reference model timed: its figure; one only the synthetic world timed: that figure, scaled
        # towards the reference's other initializations
        return self._stage(fx.get(table, {}).get(method, fx["init_other"]),
                           ref.get(table, {}).get(method, ref["init_other"]), self._ratio("embedding"))

    def shared(self, product: str) -> float:
        """Building a product that several methods read (the helper model of OMP, CLP and CLP+): paid once, by
        the cell that builds it (``shared`` figures; 0 for a product they do not hold)."""
        fx, ref = self.figures["fixed"].get("shared", {}), self.figures["reference"]["seconds"].get("shared", {})
        if product not in ref and product in self.figures.get("reference_mlm", {}).get("seconds", {}).get(
                "shared", {}):
            return self._encoder().shared(product)
        if product not in ref:
            return float(fx.get(product, 0.0))
        return self._stage(fx.get(product, 0.0), ref[product], self._ratio("embedding"))


    def task(self, task: str) -> float:
        """One evaluation of ``task`` (a task the figures do not hold is taken as the one ``tasks_as`` names)."""
        fx, ref = self.figures["fixed"], self.figures["reference"]["seconds"]
        name = task if task in ref["task"] else self.figures["tasks_as"].get(task, "ner")
        if name not in ref["task"] and "reference_mlm" in self.figures:
            # a task the decoder reference did not time: the encoder reference's figure at this shape, times
            # what the decoder's timed tasks took over the encoder reference's figures for them at this shape
            enc = self._encoder()
            timed = [t for t in ref["task"] if t in self.figures["reference_mlm"]["seconds"]["task"]]
            mine = sum(self._stage(fx["task"][t], ref["task"][t], self._ratio("tasks")) for t in timed)
            theirs = sum(enc.task(t) for t in timed)
            return enc.task(name) * (mine / theirs if theirs > 0 else 1.0)
        return self._stage(fx["task"][name], ref["task"][name], self._ratio("tasks"))

    def cpt(self, steps: int, effective_batch: int, block_size: int) -> float:
        """``steps`` CPT steps of ``effective_batch`` x ``block_size`` tokens (no step: nothing)."""
        if steps <= 0:
            return 0.0
        fx, ref = self.figures["fixed"], self.figures["reference"]
        per_step = (float(ref["seconds"]["cpt"]) - float(fx["cpt"])) / int(ref["cpt_steps"])
        tokens = effective_batch * block_size / float(ref["cpt_tokens_per_step"])
        return float(fx["cpt"]) + steps * max(0.0, per_step) * tokens * self._ratio("cpt")


def shared_products(method: str, cpu: dict[str, Any] | None = None) -> list[str]:
    """The products shared across methods that ``method`` reads (the ``cpu`` section's ``shared_by``)."""
    users = (cpu if cpu is not None else cpu_figures()).get("shared_by", {})
    return sorted(p for p, methods in users.items() if method in methods)


def cpu_cost(world_name: str, source: str | None = None, data: dict[str, Any] | None = None) -> CpuCost:
    """What a cell of ``source`` costs on a CPU, scaled from the reference model of its objective
    (:func:`reference_for`)."""
    entry = declared_source(world_name, source)
    shape, why = declared_shape(world_name, source, data, entry)
    return CpuCost(shape, why, reference_for(declared_objective(entry), data))
