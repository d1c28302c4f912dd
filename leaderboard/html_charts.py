"""The page's charts as inline SVG (no script, no network): per-language grouped bars with whiskers, each row minus
``random``, the init counts as stacked bars and loss curves; and the colours and escaping they share with the
tables of :mod:`leaderboard.render_html`."""

from __future__ import annotations

import html
import math
from collections.abc import Iterable

from leaderboard import fmt
from leaderboard.model import Board, Row, VariantInfo

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf", "#393b79", "#e6550d", "#637939", "#843c39", "#7b4173", "#3182bd", "#31a354", "#756bb1",
           "#fd8d3c", "#636363")
MAX_BAR_LANGUAGES = 60  # above this, the bar chart shows the slices instead of every language


def esc(s: object) -> str:
    return html.escape(str(s), quote=True)


def colors_for(labels: Iterable[str]) -> dict[str, str]:
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(dict.fromkeys(labels))}


# -- charts -----------------------------------------------------------------------------------------------
def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step) * step
    out, v = [], start
    while v <= hi + 1e-12:
        out.append(round(v, 12))
        v += step
    return out


def _legend(labels: list[str], colors: dict[str, str], x: int, y: int, width: int) -> tuple[str, int]:
    parts, cx, cy = [], x, y
    for label in labels:
        w = 22 + 7 * len(label)
        if cx + w > x + width and cx > x:
            cx, cy = x, cy + 16
        parts.append(f'<rect x="{cx}" y="{cy - 9}" width="12" height="10" fill="{colors[label]}"/>'
                     f'<text x="{cx + 16}" y="{cy}">{esc(label)}</text>')
        cx += w
    return "".join(parts), cy + 14


def bar_chart(board: Board, colors: dict[str, str]) -> str:
    """Grouped horizontal bars: one group per language (or per slice when there are many), one bar per row, with
    the bootstrap interval (or ± std) as a whisker."""
    rows = board.rows
    if not rows or not board.languages:
        return ""
    cats: list[tuple[str, dict[str, tuple[float, tuple[float, float] | None]]]] = []
    if len(board.languages) <= MAX_BAR_LANGUAGES:
        for lang in board.languages:
            cats.append((lang, {r.label: (e.mean, e.ci or ((e.mean - e.std, e.mean + e.std) if e.std else None))
                                for r in rows if (e := r.entries.get(lang)) is not None}))
    else:
        for s in board.slices:
            cats.append((f"{s.dimension}: {s.value}", {r.label: (v, None) for r in rows
                                                        if (v := s.averages.get(r.label)) is not None}))
    vals = [x for _, d in cats for v, c in d.values() for x in ([v] + (list(c) if c else []))]
    if not vals:
        return ""
    lo, hi = min(0.0, min(vals)), max(0.0, max(vals))
    base = 0.0
    vmin, vmax = min(vals), max(vals)
    if vmin > 0 and vmax - vmin < 0.5 * vmax:  # e.g. losses 5.2 .. 6.5: bars from 0 would all look alike
        span = vmax - vmin or 0.1 * vmax
        step = _ticks(0.0, span)[1] if len(_ticks(0.0, span)) > 1 else span
        base = lo = max(0.0, math.floor((vmin - 0.2 * span) / step) * step)
    if hi == lo:
        hi = lo + 1.0
    width, left, right = 760, 150, 70
    plot_w = width - left - right
    legend, top = _legend([r.label for r in rows], colors, left, 16, plot_w)
    bar_h, gap = 11, 9
    group_h = len(rows) * bar_h + gap
    height = top + len(cats) * group_h + 30

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'data-plot="bars" aria-label="{esc(board.title)}">', legend]
    for t in _ticks(lo, hi):
        parts.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{height - 24}" stroke="#eee"/>'
                     f'<text x="{x(t):.1f}" y="{height - 10}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<line x1="{x(base):.1f}" y1="{top - 4}" x2="{x(base):.1f}" y2="{height - 24}" stroke="#888"/>')
    if base:
        parts.append(f'<text x="{width - 4}" y="{height - 10}" text-anchor="end" fill="#8a5300">axis from '
                     f"{base:g}</text>")
    for i, (name, d) in enumerate(cats):
        y0 = top + i * group_h
        parts.append(f'<text x="{left - 6}" y="{y0 + len(rows) * bar_h / 2 + 4:.1f}" text-anchor="end">'
                     f"{esc(name)}</text>")
        for j, r in enumerate(rows):
            if r.label not in d:
                continue
            v, c = d[r.label]
            y = y0 + j * bar_h
            x0, x1 = sorted((x(base), x(v)))
            parts.append(f'<rect class="mark" x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.5):.1f}" '
                         f'height="{bar_h - 2}" '
                         f'fill="{colors[r.label]}"><title>{esc(r.label)} · {esc(name)}: {fmt.cell(board, v)}'
                         f"</title></rect>")
            if c:
                parts.append(f'<line x1="{x(c[0]):.1f}" y1="{y + (bar_h - 2) / 2}" x2="{x(c[1]):.1f}" '
                             f'y2="{y + (bar_h - 2) / 2}" stroke="#222" stroke-width="1"/>')
            parts.append(f'<text x="{max(x1, x(c[1]) if c else x1) + 3:.1f}" y="{y + bar_h - 3}" '
                         f'font-size="9">{esc(fmt.cell(board, v))}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _baseline(board: Board, row: Row) -> Row | None:
    """The ``random`` row a row is measured against: the one of the same source and factorized dim, else the
    first ``random`` row of the board."""
    randoms = [r for r in board.rows if r.variant is not None and r.variant.method == "random"]
    if not randoms or row in randoms or row.variant is None:
        return None
    same = [r for r in randoms if r.variant and (r.variant.dim, r.variant.source) == (row.variant.dim,
                                                                                        row.variant.source)]
    return (same or randoms)[0]


def random_delta_chart(board: Board, colors: dict[str, str]) -> str:
    """Per language, each row minus its ``random`` row (the same source and dim): bars from 0, right = more of
    the metric (better when higher is better)."""
    rows = [(r, b) for r in board.rows if (b := _baseline(board, r)) is not None]
    if not rows or not board.languages or len(board.languages) > MAX_BAR_LANGUAGES:
        return ""
    cats = []
    for lang in board.languages:
        d = {r.label: r.value(lang) - b.value(lang) for r, b in rows  # type: ignore[operator]
             if r.value(lang) is not None and b.value(lang) is not None}
        cats.append((lang, d))
    vals = [v for _, d in cats for v in d.values()]
    if not vals:
        return ""
    lo, hi = min(0.0, min(vals)), max(0.0, max(vals))
    if hi == lo:
        hi = lo + 1.0
    pad = 0.04 * (hi - lo)
    lo, hi = lo - (pad if lo < 0 else 0), hi + pad
    width, left, right = 760, 150, 70
    plot_w = width - left - right
    labels = [r.label for r, _ in rows]
    legend, top = _legend(labels, colors, left, 16, plot_w)
    bar_h, gap = 11, 9
    group_h = len(rows) * bar_h + gap
    height = top + len(cats) * group_h + 30
    base_names = sorted({b.label for _, b in rows})

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'data-plot="delta" aria-label="{esc(board.title)}: each row minus {esc(", ".join(base_names))}">',
             legend]
    for t in _ticks(lo, hi):
        parts.append(f'<line x1="{x(t):.1f}" y1="{top - 4}" x2="{x(t):.1f}" y2="{height - 24}" stroke="#eee"/>'
                     f'<text x="{x(t):.1f}" y="{height - 10}" text-anchor="middle">{t:+g}</text>')
    parts.append(f'<line x1="{x(0):.1f}" y1="{top - 4}" x2="{x(0):.1f}" y2="{height - 24}" stroke="#444"/>')
    for i, (name, d) in enumerate(cats):
        y0 = top + i * group_h
        parts.append(f'<text x="{left - 6}" y="{y0 + len(rows) * bar_h / 2 + 4:.1f}" text-anchor="end">'
                     f"{esc(name)}</text>")
        for j, label in enumerate(labels):
            if label not in d:
                continue
            v = d[label]
            y = y0 + j * bar_h
            x0, x1 = sorted((x(0), x(v)))
            parts.append(f'<rect class="mark" x="{x0:.1f}" y="{y}" width="{max(x1 - x0, 0.5):.1f}" '
                         f'height="{bar_h - 2}" fill="{colors[label]}"><title>{esc(label)} · {esc(name)}: '
                         f"{fmt.value(v, True)} against random</title></rect>")
            tx, anchor = (x1 + 3, "start") if v >= 0 else (x0 - 3, "end")
            parts.append(f'<text x="{tx:.1f}" y="{y + bar_h - 3}" font-size="9" text-anchor="{anchor}">'
                         f"{esc(fmt.value(v, True))}</text>")
    parts.append("</svg>")
    return "".join(parts)


INIT_PARTS = (("init/copied", "copied", "#4c78a8"), ("init/method", "method", "#f58518"),
              ("init/random", "random", "#b9b9b9"))


def init_chart(variants: list[VariantInfo], title: str) -> str:
    """One stacked bar per row: how many target rows were copied, computed by the method and drawn at random
    (mean over seeds, from the init reports)."""
    vs = [v for v in variants if any(k in v.init for k, _, _ in INIT_PARTS)]
    if not vs:
        return ""
    totals = [sum(v.init.get(k, 0.0) for k, _, _ in INIT_PARTS) for v in vs]
    top_total = max(totals) or 1.0
    left = min(max(100, 7 * max(len(v.label) for v in vs) + 12), 460)  # the longest row name in full
    right = 150
    width = left + 520 + right
    plot_w = width - left - right
    parts_legend = "".join(f'<rect x="{left + 110 * i}" y="27" width="12" height="10" fill="{c}"/>'
                           f'<text x="{left + 110 * i + 16}" y="36">{name}</text>'
                           for i, (_, name, c) in enumerate(INIT_PARTS))
    top, bar_h = 50, 18
    height = top + len(vs) * (bar_h + 6) + 12
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'data-plot="init" aria-label="{esc(title)}"><text x="{left}" y="16" font-size="13" '
           f'font-weight="600">{esc(title)}</text>', parts_legend]
    for i, (v, total) in enumerate(zip(vs, totals, strict=True)):
        y = top + i * (bar_h + 6)
        out.append(f'<text x="{left - 6}" y="{y + bar_h - 5}" text-anchor="end">{esc(v.label)}</text>')
        x = float(left)
        for key, name, color in INIT_PARTS:
            n = v.init.get(key, 0.0)
            w = n / top_total * plot_w
            if n > 0:
                share = n / total if total else 0.0
                out.append(f'<rect class="mark" x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar_h}" '
                           f'fill="{color}"><title>{esc(v.label)}: {name} {fmt.init(key, n)} ({share:.0%})'
                           "</title></rect>")
            x += w
        of = "" if total == top_total else f" of {fmt.init('', top_total)}"
        out.append(f'<text x="{x + 4:.1f}" y="{y + bar_h - 5}" font-size="10">{fmt.init("", total)}{of}</text>')
    out.append("</svg>")
    return "".join(out)


def line_chart(series: dict[str, list[tuple[int, float]]], colors: dict[str, str], title: str,
               ylabel: str) -> str:
    series = {k: v for k, v in series.items() if v}
    if not series:
        return ""
    xs = [s for pts in series.values() for s, _ in pts]
    ys = [v for pts in series.values() for _, v in pts]
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    pad = (y_hi - y_lo) * 0.06 or abs(y_hi) * 0.05 or 1.0
    y_lo, y_hi = y_lo - pad, y_hi + pad
    if x_hi == x_lo:
        x_hi = x_lo + 1
    width, height, left, right, bottom = 560, 320, 64, 16, 44
    legend, top = _legend(list(series), colors, left, 34, width - left - right)
    plot_h = height - top - bottom

    def px(s: float) -> float:
        return left + (s - x_lo) / (x_hi - x_lo) * (width - left - right)

    def py(v: float) -> float:
        return top + (1 - (v - y_lo) / (y_hi - y_lo)) * plot_h

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'data-plot="curve" aria-label="{esc(title)}"><text x="{left}" y="16" font-size="13" '
             f'font-weight="600">{esc(title)}'
             f"</text>", legend]
    for t in _ticks(y_lo, y_hi):
        parts.append(f'<line x1="{left}" y1="{py(t):.1f}" x2="{width - right}" y2="{py(t):.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in _ticks(x_lo, x_hi):
        parts.append(f'<text x="{px(t):.1f}" y="{height - bottom + 16}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" stroke="#888"/>'
                 f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#888"/>'
                 f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">CPT step</text>'
                 f'<text x="14" y="{top + plot_h / 2:.0f}" transform="rotate(-90 14 {top + plot_h / 2:.0f})" '
                 f'text-anchor="middle">{esc(ylabel)}</text>')
    for label, pts in series.items():
        c = colors.get(label, "#333")
        path = " ".join(f"{px(s):.1f},{py(v):.1f}" for s, v in pts)
        parts.append(f'<polyline class="mark" points="{path}" fill="none" stroke="{c}" stroke-width="2"><title>'
                     f'{esc(label)}'
                     "</title></polyline>")
        if len(pts) <= 40:
            parts += [f'<circle cx="{px(s):.1f}" cy="{py(v):.1f}" r="3" fill="{c}"><title>{esc(label)} · step {s}: '
                      f"{v:.4f}</title></circle>" for s, v in pts]
    parts.append("</svg>")
    return "".join(parts)
