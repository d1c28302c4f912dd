"""The transplant measure on a derived world's bits-per-byte boards (``clm``, ``mlm-bpb``): the references beside
the rows, and the *BPB retained* board.

A derived world's runs log, once per world, source and task settings, the bits per byte of the same held-out
sentences for two references (:mod:`harness.transplant`): the source model with its own tokenizer (the *ceiling*)
and the donor with the target tokenizer (where the world has one). On a ``bpb`` board they are reference rows (like
the uniform guess's row: they take no rank and enter no test), each language's interval over its sentences.

*BPB retained* is the ceiling's bpb over a row's bpb, per language and seed (1.0: the transplanted model compresses
the text as well as the source did with its own tokenizer; below 1.0 it lost some). Its board holds every row that
has a ceiling; each language's interval resamples the row's seeds and, inside each, the sentences (paired: the
ceiling's and the row's bits of the same sentences are drawn together); the average's interval resamples the
languages and the seeds (:func:`leaderboard.stats.diff_interval`, against zero). The ``bpb`` board shows each
row's average BPB retained as a column.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from leaderboard.collect import ReferenceRun
from leaderboard.model import METRIC_NOTES, REFERENCE, RETAINED, Board, Entry, Row, finish_board
from leaderboard.stats import ItemSample, SeedSample, bootstrap_ci, diff_interval, stable_seed

ROLE_LABELS = {"ceiling": "ceiling: {source} with its own tokenizer",
               "donor": "donor with the target tokenizer ({source}'s world {world})"}
PROTOCOL_NOTE = "protocol (transplant measure)"  # the note that names what the ceiling is, on both boards
MATCHED = ("protocol", "max_sentences", "data")  # the task settings a reference and a row must share


def _matches(ref: ReferenceRun, run: Any, cell: Any) -> bool:
    doc = next(iter(ref.docs.get("ceiling", {}).values()), None) or next(
        (d for per in ref.docs.values() for d in per.values()), {})
    hp = doc.get("hyperparameters", {})
    if (ref.world, ref.source, ref.profile) != (run.world, run.source, run.profile):
        return False
    if any(k in run.protocol and str(hp.get(k)) != run.protocol[k] for k in MATCHED):
        return False
    precision = cell.params.get("eval_precision") if cell is not None else None
    return not (precision and ref.precision and precision != ref.precision)


def run_reference(data: Any, run: Any) -> ReferenceRun | None:
    """The references a task run is measured against (its world, source, profile and task settings); None."""
    cell = data.parent(run)
    return next((ref for ref in getattr(data, "references", []) if ref.task == run.task and _matches(ref, run, cell)),
                None)


def board_references(data: Any, groups: dict[Any, list[Any]]) -> list[ReferenceRun]:
    """The references of a board's rows, each once."""
    out: list[ReferenceRun] = []
    for runs in groups.values():
        for run in runs:
            if (ref := run_reference(data, run)) is not None and all(ref is not o for o in out):
                out.append(ref)
    return out


def _label(ref: ReferenceRun, role: str) -> str:
    return ROLE_LABELS.get(role, role + " ({source})").format(source=ref.source, world=ref.world)


def _item(doc: dict[str, Any], metric: str) -> ItemSample | None:
    it = doc.get("items", {}).get(metric)
    return ItemSample.from_dict(it) if isinstance(it, dict) and it.get("num") else None


def reference_rows(refs: list[ReferenceRun], metric: str, bld: Any, key: tuple) -> list[Row]:
    """The rows of the references on a board of ``metric``: each role's value per language, its interval over the
    sentences (one value: no seeds)."""
    rows = []
    for ref in refs:
        for role in [r for r in ("ceiling", "donor") if r in ref.docs]:
            entries = {}
            for lang, doc in sorted(ref.docs[role].items()):
                v = doc.get("scores", {}).get(metric)
                if v is None:
                    continue
                it = _item(doc, metric)
                ci = bootstrap_ci([SeedSample(float(v), [(1.0, it)] if it else [])], resamples=bld.bootstrap,
                                  level=bld.level, seed=bld.bootstrap_seed, key=(*key, role, ref.source, lang))
                entries[lang] = Entry([float(v)], [], ci)
            if entries:
                rows.append(Row(_label(ref, role), entries, kind=REFERENCE))
    return rows


def ratio_ci(seeds: list[tuple[float, ItemSample | None]], ceiling: ItemSample | None, *, resamples: int,
             level: float, seed: int, key: object) -> tuple[float, float] | None:
    """The interval of the mean over seeds of the ceiling's bpb over a seed's: the seeds drawn with replacement,
    then inside each drawn seed its sentences (the same sentences for the ceiling and the seed; a seed without
    per-sentence statistics, or with other sentences, contributes its ratio unchanged)."""
    k = len(seeds)
    paired = [it is not None and ceiling is not None and len(it) == len(ceiling) for _, it in seeds]
    if resamples <= 0 or k == 0 or (k == 1 and not paired[0]):
        return None
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, stable_seed("retained", key)])
    drawn = rng.integers(0, k, size=(resamples, k))
    values = np.empty((resamples, k))
    for s, (value, it) in enumerate(seeds):
        pos = np.nonzero(drawn == s)
        m = len(pos[0])
        if not m:
            continue
        if not paired[s]:
            values[pos] = value
            continue
        idx = rng.integers(0, len(it), size=(m, len(it)))
        own = it.num[idx].sum(axis=1) / np.maximum(it.den[idx].sum(axis=1), 1e-12)
        ref = ceiling.num[idx].sum(axis=1) / np.maximum(ceiling.den[idx].sum(axis=1), 1e-12)
        values[pos] = ref / np.maximum(own, 1e-12)
    reps = values.mean(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _row_step(bld: Any, board: Board, run: Any) -> int | None:
    """The step a row's run shows on ``board`` (as :meth:`leaderboard.tables._Builder.row` picks it)."""
    return board.step if board.kind == "step" or board.step is not None else bld.data.final_step(run)


def _retained_entry(bld: Any, board: Board, runs: list[Any], lang: str, label: str) -> Entry | None:
    """One row x language of the retained board: the ceiling's bpb over each seed's, with its interval."""
    vals, seeds, samples = [], [], []
    ceiling_items: ItemSample | None = None
    for run in runs:
        ref = run_reference(bld.data, run)
        st = _row_step(bld, board, run)
        doc = ref.docs.get("ceiling", {}).get(lang) if ref is not None else None
        v = bld.value(run, "bpb", lang, st)
        if doc is None or v is None or not v:
            continue
        ceiling_items = _item(doc, "bpb")
        it = bld.data.items(run, st).get("bpb", {}).get(lang) if bld.bootstrap > 0 else None
        ratio = float(doc["scores"]["bpb"]) / v
        vals.append(ratio)
        seeds.append(run.seed)
        samples.append((ratio, ItemSample.from_dict(it) if it and it.get("num") else None))
    if not vals:
        return None
    ci = ratio_ci(samples, ceiling_items, resamples=bld.bootstrap, level=bld.level, seed=bld.bootstrap_seed,
                  key=(board.task, board.profile, board.kind, board.step, label, lang))
    return Entry(vals, seeds, ci)


def _donor_row(refs: list[ReferenceRun], bld: Any, key: tuple) -> list[Row]:
    """The donor's BPB retained (the ceiling's bpb over the donor's), a reference row."""
    rows = []
    for ref in refs:
        if "donor" not in ref.docs:
            continue
        entries = {}
        for lang, doc in sorted(ref.docs["donor"].items()):
            top = ref.docs.get("ceiling", {}).get(lang)
            v = doc.get("scores", {}).get("bpb")
            if top is None or not v:
                continue
            ratio = float(top["scores"]["bpb"]) / float(v)
            ci = ratio_ci([(ratio, _item(doc, "bpb"))], _item(top, "bpb"), resamples=bld.bootstrap,
                          level=bld.level, seed=bld.bootstrap_seed, key=(*key, "donor", ref.source, lang))
            entries[lang] = Entry([ratio], [], ci)
        if entries:
            rows.append(Row(_label(ref, "donor"), entries, kind=REFERENCE))
    return rows


def retained_board(bld: Any, board: Board, groups: dict[Any, list[Any]], labels: dict[Any, str]) -> Board | None:
    """The BPB-retained board beside a ``bpb`` board whose rows have a ceiling (None otherwise); each row's average
    BPB retained set as a column of ``board``."""
    if board.metric != "bpb" or board.kind == "delta" or not (refs := board_references(bld.data, groups)):
        return None
    rows = []
    shown = {r.label for r in board.rows}
    for vkey, runs in groups.items():
        label = labels[vkey]
        runs = [r for r in runs if label in shown and (board.budget is None or bld.data.final_step(r) == board.budget)]
        entries = {lang: e for lang in board.languages if (e := _retained_entry(bld, board, runs, lang, label))}
        if entries:
            rows.append(Row(label, entries, "ours", vkey, sorted({s for e in entries.values() for s in e.seeds}),
                            steps=board.row(label).steps, blowup=board.row(label).blowup))
    if not rows:
        return None
    rb = Board(board.experiment, board.task, RETAINED, board.profile, True, board.kind, board.step, [], rows,
               final_steps=board.final_steps, precision=board.precision, sources=board.sources, budget=board.budget,
               cpt_steps=board.cpt_steps)
    rb.paper_rows = _donor_row(refs, bld, (board.task, board.profile, board.kind, board.step))
    finish_board(rb)
    for r in rb.rows + rb.paper_rows:
        per = {lang: e.values for lang, e in r.entries.items()}
        if r.avg is not None and bld.bootstrap > 0:
            d = diff_interval(per, {lang: [0.0] for lang in per}, resamples=bld.bootstrap, level=bld.level,
                              seed=bld.bootstrap_seed, key=(board.task, board.profile, board.kind, board.step,
                                                            RETAINED, r.label))
            r.avg_ci = (d.lo, d.hi) if d is not None else None
        target = next((o for o in board.rows + board.paper_rows if o.label == r.label), None)
        if target is not None and r.avg is not None:
            target.init[RETAINED] = r.avg
    for p in board.paper_rows:
        if p.kind == REFERENCE and p.label.startswith("ceiling"):
            p.init[RETAINED] = 1.0
    rb.notes = retained_notes(rb, refs)
    board.notes.extend(n for n in rb.notes if n.startswith(PROTOCOL_NOTE) and n not in board.notes)
    return rb


def retained_notes(rb: Board, refs: list[ReferenceRun]) -> list[str]:
    """What the board measures (the protocol: what the ceiling is) and each row's average with its interval."""
    notes = [METRIC_NOTES[RETAINED]]  # then one protocol note a reference, then the averages' intervals
    for ref in refs:
        doc = next(iter(ref.docs.get("ceiling", {}).values()), {})
        hp = doc.get("hyperparameters", {})
        donor = ("; the donor row: the same ceiling over the donor's bpb with the target tokenizer"
                 if "donor" in ref.docs else "; the world has no donor of this objective")
        notes.append(f"{PROTOCOL_NOTE}: the ceiling is {ref.source} with its own tokenizer, scored by "
                     f"{ref.task}'s {hp.get('protocol', '?')} on the same held-out sentences ({hp.get('data', '?')}, "
                     f"max_sentences {hp.get('max_sentences', '?')}, each cut at the model's max_length in tokens of "
                     f"its own tokenizer: {hp.get('max_length', '?')}; bytes of the text scored), computed once for "
                     f"world {ref.world}{donor}")
    parts = [f"{r.label} {r.avg:.3f}" + (f" [{r.avg_ci[0]:.3f}, {r.avg_ci[1]:.3f}]" if r.avg_ci else "")
             + (f" sd {sd:.3f} over languages" if (sd := _sd([e.mean for e in r.entries.values()])) is not None
                else "") for r in rb.rows + rb.paper_rows if r.avg is not None]
    if parts:
        notes.append("average BPB retained with its interval over languages and seeds: " + "; ".join(parts))
    return notes


def _sd(values: list[float]) -> float | None:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None
