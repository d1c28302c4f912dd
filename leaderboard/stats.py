"""Statistics of the leaderboard: ranks with ties, the hierarchical bootstrap, the paired Wilcoxon test.

Ranks
    Per language, rows are ranked 1 (best) .. n with the metric's direction; tied values share the average of the
    ranks they span (1, 2.5, 2.5, 4). A row's *mean rank* is the mean of its ranks over the languages that every
    ranked row has (MTEB's rule: a partial set would bias the mean). With complete data the mean rank orders rows
    exactly as a Borda count does (Borda points = n - rank).

Bootstrap confidence interval (per row and language)
    Two levels, as the data were produced: first the seeds of the row are resampled with replacement, then, inside
    each drawn seed, its test items (the ``items/{task}_step{N}.json`` artifact: per-item sufficient statistics, the
    metric is ``transform(sum(num) / sum(den))``) are resampled with replacement. A replicate is the mean over the
    drawn seeds; the interval is the percentile interval of ``resamples`` replicates (default 1000, 95 %). A seed
    without an items artifact contributes its logged value unchanged, so with one seed and no items there is no
    interval. The generator is seeded from an explicit seed and a stable hash of what is being resampled, so the
    same data and seed give the same interval in any order and in any process.
    For step deltas (final − step 0) both steps of a seed are resampled with the same item indices (paired).

Paired test between two rows
    Over the languages both rows have, the per-language values (means over seeds) are paired and
    ``scipy.stats.wilcoxon`` is applied to the differences: two-sided, ``zero_method="wilcox"`` (languages with equal
    values are dropped from the test and reported as ties), exact null distribution for small samples (scipy's
    ``method="auto"``). Wins / ties / losses count languages where the first row is better / equal / worse in the
    metric's direction. Across all pairs of a table, Holm's step-down adjustment controls the family-wise error.
    With few languages the test cannot reach small p-values (5 languages: p >= 0.0625); the counts still show the
    direction.

The verdict on a pair of rows
    :func:`pair_verdict`, the one function that decides whether two rows differ over their languages (the claims and
    ``harness compare`` both ask it): significant where the Wilcoxon test over the languages gives p < ``ALPHA`` and
    the two-level bootstrap interval of the average difference (:func:`diff_interval`) lies on one side of zero.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import statistics
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


# -- ranks ------------------------------------------------------------------------------------------------
def ranks_with_ties(values: Sequence[float], higher_is_better: bool) -> list[float]:
    """Rank 1 = best; ties (equal values) get the average of the ranks they span (``scipy.stats.rankdata``'s
    ``"average"``, computed here: importing scipy.stats costs a board that has nothing else to compute a second)."""
    keys = [-float(v) if higher_is_better else float(v) for v in values]
    order = sorted(range(len(keys)), key=keys.__getitem__)
    out = [0.0] * len(keys)
    start = 0
    while start < len(order):
        stop = start
        while stop + 1 < len(order) and keys[order[stop + 1]] == keys[order[start]]:
            stop += 1
        for i in order[start:stop + 1]:
            out[i] = (start + stop) / 2 + 1
        start = stop + 1
    return out


def mean_ranks(table: dict[str, dict[str, float]], languages: Sequence[str],
               higher_is_better: bool) -> dict[str, float | None]:
    """Mean rank of each row over ``languages`` (rows missing one of them get None and are not ranked)."""
    ranked = [r for r, vals in table.items() if languages and all(lang in vals for lang in languages)]
    out: dict[str, float | None] = {r: None for r in table}
    if not ranked:
        return out
    sums = dict.fromkeys(ranked, 0.0)
    for lang in languages:
        for r, rk in zip(ranked, ranks_with_ties([table[r][lang] for r in ranked], higher_is_better), strict=True):
            sums[r] += rk
    for r in ranked:
        out[r] = sums[r] / len(languages)
    return out


# -- bootstrap --------------------------------------------------------------------------------------------
@dataclass
class ItemSample:
    """Per-item sufficient statistics of one metric, language and step for one seed."""

    num: np.ndarray
    den: np.ndarray
    transform: str = "identity"

    @classmethod
    def from_dict(cls, d: dict) -> ItemSample:
        return cls(np.asarray(d["num"], dtype=float), np.asarray(d["den"], dtype=float),
                   d.get("transform", "identity"))

    def __len__(self) -> int:
        return len(self.num)

    def finish(self, num: np.ndarray, den: np.ndarray) -> np.ndarray:
        """The metric from summed statistics: ``transform(num / den)``, element-wise."""
        v = np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den != 0)
        return np.exp(np.minimum(v, 50.0)) if self.transform == "exp" else v

    def value(self) -> float:
        return float(self.finish(np.array([self.num.sum()]), np.array([self.den.sum()]))[0])


@dataclass
class SeedSample:
    """What one seed contributes: a linear combination of item statistics on shared item indices (one part for a
    score, two for a paired delta), or its logged value when it has no items."""

    value: float
    parts: list[tuple[float, ItemSample]] = field(default_factory=list)

    def resampled(self, rng: np.random.Generator, m: int, chunk: int = 256) -> np.ndarray:
        """``m`` bootstrap replicates of this seed's value (items drawn with replacement, all parts alike).

        Items are sums of per-item (num, den) columns, so a resample is fully described by how many times each
        *distinct* item row is drawn: when there are few distinct rows (0/1 accuracies, small entity counts) the
        counts are drawn from the multinomial distribution that resampling induces (the same distribution, in
        O(distinct) instead of O(items) per replicate); otherwise indices are drawn directly."""
        if not self.parts:
            return np.full(m, self.value)
        cols = np.column_stack([a for _, p in self.parts for a in (p.num, p.den)])
        n = len(cols)
        uniq, counts = np.unique(cols, axis=0, return_counts=True)
        if len(uniq) * 4 <= n:
            draws = rng.multinomial(n, counts / counts.sum(), size=m)
            sums = draws @ uniq
        else:
            by_col = np.ascontiguousarray(cols.T)
            sums = np.empty((m, cols.shape[1]))
            for i in range(0, m, chunk):
                k = min(chunk, m - i)
                idx = rng.integers(0, n, size=(k, n))
                for c in range(by_col.shape[0]):  # one contiguous gather per column (4x faster than on rows)
                    sums[i: i + k, c] = by_col[c][idx].sum(axis=1)
        return sum(c * p.finish(sums[:, 2 * j], sums[:, 2 * j + 1]) for j, (c, p) in enumerate(self.parts))


def stable_seed(*parts: object) -> int:
    """A 63-bit integer from the text of ``parts`` (never Python's salted ``hash``)."""
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:8], "big") >> 1


# the code that computes what the memo keeps: its syntax trees enter every key (code_version)
INTERVAL_CODE = ("_bootstrap_ci", "SeedSample.resampled", "ItemSample.finish", "ItemSample.value", "stable_seed",
                 "_wilcoxon")
_CODE_VERSION: list[str] = []


def code_version() -> str:
    """A digest of the code that computes the board's intervals and tests (the syntax trees of
    :data:`INTERVAL_CODE` in this module's source: a comment does not change it, any change to the computation
    does) and of the numpy and scipy that run it (their generators and tests), once a process. Read from the files
    (this module's source, scipy's ``version.py``): scipy.stats is not imported for it."""
    if not _CODE_VERSION:
        import ast
        import importlib.util

        tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
        nodes: dict[str, ast.AST] = {}
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                nodes[node.name] = node
            if isinstance(node, ast.ClassDef):
                nodes.update({f"{node.name}.{m.name}": m for m in node.body if isinstance(m, ast.FunctionDef)})
        h = hashlib.sha256()
        for name in INTERVAL_CODE:
            h.update(f"{name}\n{ast.dump(nodes[name])}\n".encode())
        h.update(f"numpy {np.__version__}\n".encode())
        spec = importlib.util.find_spec("scipy")
        try:
            h.update((Path(spec.origin).parent / "version.py").read_bytes() if spec and spec.origin else b"-")
        except OSError:
            h.update(b"scipy ?")
        _CODE_VERSION.append(h.hexdigest()[:16])
    return _CODE_VERSION[0]


class IntervalMemo:
    """Bootstrap intervals already computed, by a digest of everything that decides them (the samples' values and
    item statistics, the resamples, the level, the seed and the key of the stream, and the code that computes them,
    :func:`code_version`): a board whose runs did not change is printed again without resampling (a main job's
    board draws about 1,100 intervals, seconds of numpy); a change to the bootstrap computes them again. Kept in ``<HARNESS_HOME>/cache/boards/intervals.json`` (written whole, atomically; a lost write only
    costs a recomputation); the same inputs give the same interval, so the memo never moves a number."""

    CAP = 100_000  # entries kept (about 7 MB); beyond it, only those this process used

    def __init__(self, path: Path | None):
        self.path, self.new = path, 0
        self.used: set[str] = set()
        self.known: dict[str, list[float]] = {}
        if path is not None and path.is_file():
            try:
                self.known = {str(k): list(v) for k, v in json.loads(path.read_text()).items()}
            except (OSError, ValueError, AttributeError):
                self.known = {}

    @staticmethod
    def digest(samples: Sequence[SeedSample], resamples: int, level: float, seed: int, key: object) -> str:
        h = hashlib.sha256(repr((code_version(), int(resamples), float(level), int(seed), str(key),
                                 len(samples))).encode())
        for smp in samples:
            h.update(np.float64(smp.value).tobytes())
            for coef, part in smp.parts:
                h.update(f"|{float(coef)!r}|{part.transform}|{len(part.num)}|".encode())
                h.update(np.ascontiguousarray(part.num, dtype=np.float64).tobytes())
                h.update(np.ascontiguousarray(part.den, dtype=np.float64).tobytes())
        return h.hexdigest()[:32]

    def get_or_compute(self, digest: str, compute: Callable[[], tuple[float, float]]) -> tuple[float, float]:
        """The pair remembered under ``digest``, or ``compute()`` remembered under it."""
        self.used.add(digest)
        got = self.known.get(digest)
        if got is not None and len(got) == 2:
            return float(got[0]), float(got[1])
        value = compute()
        self.known[digest] = [value[0], value[1]]
        self.new += 1
        return value

    def save(self) -> None:
        if self.path is None or not self.new:
            return
        if len(self.known) > self.CAP:
            self.known = {k: v for k, v in self.known.items() if k in self.used}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(self.known))
            os.replace(tmp, self.path)
            self.new = 0
        except OSError:
            pass


_MEMO: IntervalMemo | None = None


@contextlib.contextmanager
def remembered_intervals(path: Path | None) -> Iterator[IntervalMemo]:
    """Within the block, :func:`bootstrap_ci` looks its intervals up in (and adds them to) the memo at ``path``
    (None: in memory only), saved at the end."""
    global _MEMO
    before, _MEMO = _MEMO, IntervalMemo(path)
    try:
        yield _MEMO
    finally:
        _MEMO.save()
        _MEMO = before


def bootstrap_ci(samples: Sequence[SeedSample], *, resamples: int = 1000, level: float = 0.95, seed: int = 0,
                 key: object = "") -> tuple[float, float] | None:
    """Percentile interval of the mean over seeds, resampling seeds and then items within each drawn seed.

    ``key`` names what is resampled (task, metric, step, row, language): it is mixed into the generator's seed so
    that every cell of a table has its own, reproducible stream. None when nothing varies (one seed, no items).
    Inside :func:`remembered_intervals`, an interval computed before from the same inputs is taken from the memo."""
    k = len(samples)
    if k == 0 or resamples <= 0 or (k == 1 and not samples[0].parts):
        return None

    def compute() -> tuple[float, float]:
        return _bootstrap_ci(samples, resamples, level, seed, key)

    memo = _MEMO
    if memo is None:
        return compute()
    return memo.get_or_compute(memo.digest(samples, resamples, level, seed, key), compute)


def _bootstrap_ci(samples: Sequence[SeedSample], resamples: int, level: float, seed: int, key: object
                  ) -> tuple[float, float]:
    k = len(samples)
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, stable_seed(key)])
    drawn = rng.integers(0, k, size=(resamples, k))
    values = np.empty((resamples, k))
    for s, sample in enumerate(samples):
        pos = np.nonzero(drawn == s)
        if len(pos[0]):
            values[pos] = sample.resampled(rng, len(pos[0]))
    reps = values.mean(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


# -- paired test ------------------------------------------------------------------------------------------
@dataclass
class PairTest:
    a: str
    b: str
    n: int  # languages both rows have
    wins: int  # languages where a is better than b
    ties: int
    losses: int
    median_diff: float | None  # median of a - b over the paired languages (metric units)
    statistic: float | None
    p_value: float | None
    p_holm: float | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def paired_test(a: str, b: str, va: dict[str, float], vb: dict[str, float], higher_is_better: bool,
                tol: float = 1e-12) -> PairTest:
    """Wilcoxon signed-rank test of row ``a`` against row ``b`` over the languages both have (inside
    :func:`remembered_intervals`, a test made before on the same differences is taken from the memo)."""
    langs = sorted(set(va) & set(vb))
    diffs = np.array([va[lang] - vb[lang] for lang in langs], dtype=float)
    diffs[np.abs(diffs) <= tol] = 0.0
    better = diffs > 0 if higher_is_better else diffs < 0
    worse = diffs < 0 if higher_is_better else diffs > 0
    ties = int((diffs == 0).sum())
    stat = p = None
    if len(langs) and (diffs != 0).any():
        stat, p = _wilcoxon(diffs)
    elif len(langs):
        p = 1.0  # identical on every language
    return PairTest(a, b, len(langs), int(better.sum()), ties, int(worse.sum()),
                    float(np.median(diffs)) if len(langs) else None, stat, p)


def _wilcoxon(diffs: np.ndarray) -> tuple[float, float]:
    """(statistic, two-sided p) of scipy's signed-rank test (``zero_method="wilcox"``) on ``diffs``; from the memo
    of :func:`remembered_intervals` when it holds them (scipy.stats is then not even imported)."""

    def compute() -> tuple[float, float]:
        from scipy.stats import wilcoxon

        res = wilcoxon(diffs, zero_method="wilcox", alternative="two-sided")
        return float(res.statistic), float(res.pvalue)

    memo = _MEMO
    if memo is None:
        return compute()
    h = hashlib.sha256(code_version().encode())
    h.update(np.ascontiguousarray(diffs, dtype=np.float64).tobytes())
    digest = "w:" + h.hexdigest()[:32]
    return memo.get_or_compute(digest, compute)


@dataclass
class DiffInterval:
    """The average over languages of ``a - b`` with its two-level bootstrap interval and p-value."""

    diff: float
    lo: float
    hi: float
    p_value: float  # two-sided: twice the share of resamples on the far side of zero (at most 1)
    languages: int
    seeds_a: int  # the most seeds any language of a has
    seeds_b: int
    resamples: int


def diff_interval(a: dict[str, Sequence[float]], b: dict[str, Sequence[float]], *, resamples: int = 2000,
                  level: float = 0.95, seed: int = 0, key: object = "") -> DiffInterval | None:
    """Two-level bootstrap of the average over languages of ``mean_seeds(a) - mean_seeds(b)``.

    ``a`` and ``b`` map a language to the values of each seed. Each resample draws the languages both rows have
    with replacement and, within each drawn language, each row's seeds with replacement (the rows' seeds are not
    paired: seed 1 of one method shares nothing with seed 1 of another). So the interval carries both sources of
    variation the design has -- which languages were tested, and which seeds were run -- where the Wilcoxon test
    over languages sees only the first. With one seed per row it is a bootstrap over languages. None when the rows
    share no language."""
    langs = sorted(set(a) & set(b))
    if not langs:
        return None
    rng = np.random.default_rng([int(seed) & 0xFFFFFFFF, stable_seed("diff", key)])
    n = len(langs)
    point = float(np.mean([np.mean(a[x]) - np.mean(b[x]) for x in langs]))
    if resamples <= 0:
        return DiffInterval(point, point, point, 1.0, n, max(len(a[x]) for x in langs),
                            max(len(b[x]) for x in langs), 0)

    def seed_means(values: dict[str, Sequence[float]]) -> np.ndarray:
        """(resamples, languages): each language's mean over its seeds, the seeds drawn with replacement."""
        out = np.empty((resamples, n))
        for j, x in enumerate(langs):
            v = np.asarray(values[x], dtype=float)
            out[:, j] = v[rng.integers(0, len(v), size=(resamples, len(v)))].mean(axis=1)
        return out

    per_lang = seed_means(a) - seed_means(b)
    drawn = rng.integers(0, n, size=(resamples, n))
    reps = np.take_along_axis(per_lang, drawn, axis=1).mean(axis=1)
    alpha = (1.0 - level) / 2
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    p = min(1.0, 2.0 * min(float((reps <= 0).mean()), float((reps >= 0).mean())))
    return DiffInterval(point, float(lo), float(hi), p, n, max(len(a[x]) for x in langs),
                        max(len(b[x]) for x in langs), resamples)


# -- the verdict on a pair of rows ---------------------------------------------------------------------------
ALPHA = 0.05  # the level of the Wilcoxon test of a verdict
VERDICT_RESAMPLES = 2000  # of the two-level bootstrap of a verdict's average difference


def smallest_p(n: int) -> float:
    """The smallest p-value the exact two-sided Wilcoxon signed-rank test can give over ``n`` non-zero differences:
    every difference on one side (the statistic 0, probability 2^-n under the null), doubled."""
    return 1.0 if n <= 0 else min(1.0, 2.0 * 0.5**n)


def languages_needed(alpha: float = ALPHA) -> int:
    """The fewest languages (non-zero differences) with which the test can give p < ``alpha`` at all (6 at 0.05)."""
    n = 1
    while smallest_p(n) >= alpha:
        n += 1
    return n


def design_note(n: int, ties: int = 0, alpha: float = ALPHA) -> str:
    """Why the test over ``n`` differing languages cannot reach significance ("" when it can)."""
    if smallest_p(n) < alpha:
        return ""
    tied = f" ({ties} more tied, which the test leaves out)" if ties else ""
    return (f"with {n} language{'s' if n != 1 else ''}{tied} the Wilcoxon test cannot go below "
            f"p = {smallest_p(n):.3g}; it needs at least {languages_needed(alpha)} languages (at any number of "
            "seeds: it pairs the languages' means over seeds)")


@dataclass
class PairVerdict:
    """What :func:`pair_verdict` decides about the average over languages of ``a - b``."""

    diff: float
    interval: DiffInterval  # of the average difference (languages, then each row's seeds resampled)
    test: PairTest  # the Wilcoxon signed-rank test over the languages
    better: str | None  # "a" or "b": the side the difference is significant for; None: not significant
    why: str  # why it is not significant ("" when it is)
    design: str = ""  # where the number of languages cannot reach significance at all: why (also in ``why``)

    @property
    def significant(self) -> bool:
        return self.better is not None


def verdict_key(task: str, metric: str, profile: str, step: object, row_a: str, row_b: str) -> tuple:
    """The name of a verdict's bootstrap stream: the same rows of the same board draw the same resamples, whoever
    asks (``harness compare``, the claims)."""
    return ("pair", task, metric, profile, str(step), row_a, row_b)


def pair_verdict(a: dict[str, Sequence[float]], b: dict[str, Sequence[float]], higher_is_better: bool, *,
                 resamples: int = VERDICT_RESAMPLES, seed: int = 0, key: object = "",
                 alpha: float = ALPHA) -> PairVerdict | None:
    """The one verdict on two rows (``a`` and ``b``: a language -> the values of each seed) over the languages both
    have: the average of ``a - b`` is significant, for the side it favours, when the paired Wilcoxon test over the
    languages (on their means over seeds) gives p < ``alpha`` and the two-level bootstrap interval of the average
    (:func:`diff_interval`) lies wholly on that side of zero. ``harness compare`` and the claims both ask this
    function, so they cannot give two verdicts for one pair. None when the rows share no language."""
    iv = diff_interval(a, b, resamples=resamples, seed=seed, key=key)
    if iv is None:
        return None
    ma = {x: statistics.fmean(v) for x, v in a.items()}  # as a board's row means them (Entry.mean)
    mb = {x: statistics.fmean(v) for x, v in b.items()}
    test = paired_test("a", "b", ma, mb, higher_is_better)
    sign = 1.0 if higher_is_better else -1.0
    near, far = (iv.lo, iv.hi) if sign > 0 else (-iv.hi, -iv.lo)  # the interval on a's side: above 0, a better
    tested = test.p_value is not None and test.p_value < alpha
    better = None
    if tested and near > 0 and sign * iv.diff > 0:
        better = "a"
    elif tested and far < 0 and sign * iv.diff < 0:
        better = "b"
    why, design = [], ""
    if better is None:
        if not iv.resamples:
            why.append("no interval")
        elif near <= 0 <= far:
            why.append("the interval includes 0")
        if not tested:
            design = design_note(test.wins + test.losses, test.ties, alpha)
            why.append(design or ("Wilcoxon p = " + ("-" if test.p_value is None else f"{test.p_value:.3g}")
                                  + f" ≥ {alpha}"))
    if better is None and not why:
        why.append("the interval lies on the other side of 0 than the difference")
    return PairVerdict(iv.diff, iv, test, better, "; ".join(why), design)


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values (None stays None and does not count)."""
    idx = [i for i, p in enumerate(p_values) if p is not None and not math.isnan(p)]
    order = sorted(idx, key=lambda i: p_values[i])  # type: ignore[arg-type,return-value]
    m = len(order)
    out: list[float | None] = [None] * len(p_values)
    running = 0.0
    for j, i in enumerate(order):
        running = max(running, min(1.0, (m - j) * float(p_values[i])))  # type: ignore[arg-type]
        out[i] = running
    return out


def pairwise_tests(table: dict[str, dict[str, float]], higher_is_better: bool) -> list[PairTest]:
    """Every unordered pair of rows (in the given row order), with Holm-adjusted p-values."""
    rows = list(table)
    tests = [paired_test(a, b, table[a], table[b], higher_is_better)
             for i, a in enumerate(rows) for b in rows[i + 1:]]
    for t, ph in zip(tests, holm([t.p_value for t in tests]), strict=True):
        t.p_holm = ph
    return tests
