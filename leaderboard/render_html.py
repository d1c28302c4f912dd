"""One self-contained static HTML page: sortable tables (a few lines of inline JS; the page reads fine without
it) whose row names stay in view when a wide table scrolls, per-language bar charts (each row, and each row minus
``random``), the init counts as stacked bars and CPT loss curves per method, as inline SVG. No network at view time:
no CDN, no fonts, no images outside the page. A column where every row scores the same has no best: it is grey,
with a note. Beside each row's name, a marker says what its method was checked against (the whole line on hover and
in the settings; :mod:`leaderboard.references`).

This module holds the page and its tables; the charts are drawn by :mod:`leaderboard.html_charts` (whose names
``esc``, ``colors_for``, ``bar_chart`` and the like stay importable from here)."""

from harness.core.objective import heldout_name
from leaderboard import fmt, references
from leaderboard.claims import LEGEND, claim_rows, summary
from leaderboard.costs import costs_html
from leaderboard.html_charts import (
    INIT_PARTS,
    MAX_BAR_LANGUAGES,
    PALETTE,
    bar_chart,
    colors_for,
    esc,
    init_chart,
    line_chart,
    random_delta_chart,
)
from leaderboard.model import GUESS, REFERENCE, Board, Leaderboard, Row, VariantInfo

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1b1f24;background:#fff}
header{background:#0b3d62;color:#fff;padding:14px 24px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;opacity:.9}nav{padding:6px 24px;background:#e8eef4;font-size:13px}
nav a{margin-right:14px;color:#0b3d62}main{padding:8px 24px 40px}h2{margin:28px 0 6px;font-size:19px;
border-bottom:2px solid #0b3d62}h3{margin:18px 0 4px;font-size:15px}p.hint{margin:2px 0 8px;color:#555;font-size:12px}
.wrap{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 7px;white-space:nowrap}th{background:#f3f6f9;position:sticky;top:0}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#dde7f0}td{text-align:right}
td.label{text-align:left;font-weight:600}td.best{background:#d8f5d0;font-weight:700;color:#145214}
td.gap{color:#aaa;text-align:center}tbody.paper td{font-style:italic;color:#555;background:#fafafa}
tbody.paper td.label{font-weight:400}.sd{color:#777;font-size:11px;margin-left:2px}
.ci{display:none;color:#555;font-size:11px;margin-left:3px}body.show-ci .ci{display:inline}
.note{color:#8a5300;font-size:12px}details{margin:6px 0}summary{cursor:pointer;color:#0b3d62;font-weight:600}
svg{font:11px system-ui,sans-serif;background:#fff}.charts{display:flex;flex-wrap:wrap;gap:18px}
td.claim-holds{background:#d8f5d0;color:#145214;font-weight:700}td.claim-contradicted{background:#fde2e1;
color:#8b1a13;font-weight:700}td.claim-inconclusive{background:#fff4d6;color:#7a5400;font-weight:700}
td.claim-note{text-align:left;white-space:normal;min-width:24em}p.summary{font-weight:600}
footer{color:#555;font-size:12px;padding:10px 24px;border-top:1px solid #ddd}
td.tie{background:#eceff1;color:#666}
table.board td:first-child,table.board th:first-child,table.slices td:first-child,table.slices th:first-child,
table.claims td:first-child,table.claims th:first-child{position:sticky;left:0;z-index:1;background:#fff;
box-shadow:inset -1px 0 #d0d7de}
table.board th:first-child,table.slices th:first-child,table.claims th:first-child{z-index:3;background:#f3f6f9}
th{z-index:2}tbody.paper td:first-child{background:#fafafa}
.ref{font-weight:400;font-size:12px;margin-left:4px;cursor:help}.ref-checked{color:#145214}.ref-none{color:#777}
.ref-unknown{color:#8a5300}
.blowup{color:#b3261e;font-weight:700;margin-left:4px;cursor:help}
"""

JS = """
document.querySelectorAll('table.sortable').forEach(function (t) {
  t.querySelectorAll('thead th').forEach(function (th, i) {
    th.addEventListener('click', function () {
      var asc = th.dataset.dir !== 'asc'; th.dataset.dir = asc ? 'asc' : 'desc';
      var key = function (tr) { var c = tr.cells[i], v = c ? c.dataset.v : '';
        return (v === undefined || v === '') ? null : (isNaN(+v) ? v : +v); };
      var body = t.tBodies[0];
      Array.from(body.rows).sort(function (a, b) { var x = key(a), y = key(b);
        if (x === null) return 1; if (y === null) return -1;
        return (x < y ? -1 : x > y ? 1 : 0) * (asc ? 1 : -1); }).forEach(function (r) { body.appendChild(r); });
    });
  });
});
var ci = document.getElementById('show-ci');
if (ci) ci.addEventListener('change', function () { document.body.classList.toggle('show-ci', ci.checked); });
document.documentElement.setAttribute('data-sortable', 'ready');
"""


# -- tables -----------------------------------------------------------------------------------------------
def _td(text: str, v: object = "", cls: str = "", title: str = "") -> str:
    attrs = f' data-v="{esc(v)}"'
    if cls:
        attrs += f' class="{cls}"'
    if title:
        attrs += f' title="{esc(title)}"'
    return f"<td{attrs}>{text}</td>"


def _value_td(board: Board, row: Row, lang: str) -> str:
    e = row.entries.get(lang)
    if e is None:
        return _td(fmt.MISSING, "", "gap", f"{row.label}: no {lang}")
    delta = board.kind == "delta"
    text = esc(fmt.cell(board, e.mean))
    if e.std is not None:
        text += f'<span class="sd">±{esc(fmt.std(e.std))}</span>'
    if e.ci:
        text += f'<span class="ci">{esc(fmt.ci(e.ci, delta))}</span>'
    tip = f"{row.label} · {lang}: {e.mean:.6g}"
    if e.std is not None:
        tip += f" ± {e.std:.3g} (n={e.n} seeds: " + ", ".join(f"s{s}={v:.4g}" for s, v in zip(
            e.seeds, e.values, strict=True)) + ")"
    if e.ci:
        tip += f"; 95% CI {fmt.ci(e.ci, delta)}"
    tied = fmt.tied_columns(board)
    if row.kind == "ours" and lang in tied:
        return _td(text, repr(e.mean), "tie", tip + f"; every row scores {fmt.cell(board, e.mean)}: no best")
    best = row.kind == "ours" and e.mean == board.best(lang)
    return _td(text, repr(e.mean), "best" if best else "", tip)


def _lang_title(lb: Leaderboard, board: Board, lang: str) -> str:
    m = lb.languages.get(lang, {})
    bits = [f"script {m.get('script', '?')}"]
    seen = m.get("seen") or {}
    bits += [f"{'seen' if v else 'unseen'} by {s}" for s, v in sorted(seen.items())]
    if m.get("resource_level"):
        bits.append(f"{m['resource_level']} resource")
    ls = (m.get("label_source") or {}).get(board.task)
    if ls:
        bits.append(f"{ls} labels")
    return " · ".join(bits)


def board_html(lb: Leaderboard, board: Board) -> str:
    show_common = board.common != board.languages
    inits = board.init_columns()
    heads = ['<th title="model variant (method, factorized dim); mean over seeds">row</th>']
    heads += [f'<th title="{esc(_lang_title(lb, board, lang))}">{esc(lang)}</th>' for lang in board.languages]
    heads.append('<th title="mean over all languages; only rows with every language">avg</th>')
    if show_common:
        heads.append(f'<th title="mean over the {len(board.common)} languages every row has">avg∩</th>')
    heads.append('<th title="mean rank over the common languages (1 = best; ties share their average rank)">'
                 'rank</th>')
    heads += [f"<th>{esc(name)}</th>" for _, name in inits]
    best_avg = board.best_of([r.avg for r in board.rows])
    best_common = board.best_of([r.avg_common for r in board.rows])
    best_rank = board.best_of([r.mean_rank for r in board.rows], lower_is_better=True)
    refs = references.by_label(lb.variants)
    shown = [refs[r.label] for r in board.rows if r.label in refs]

    def tr(r: Row) -> str:
        ours = r.kind == "ours"
        seeds = f"seeds {', '.join(r.seeds)}" if r.seeds else (
            "a uniform guess over the target vocabulary: what a model that learned nothing scores"
            if r.kind == GUESS else "a reference of the transplant: the same held-out sentences, scored once"
            if r.kind == REFERENCE else "published figure")
        line = refs.get(r.label) if ours else None
        if r.blowup:
            seeds += f" · blew up: {r.blowup}"
        name = esc(r.label) + (f'<span class="blowup" title="{esc(r.blowup)}">{esc(fmt.blowup(r))}</span>'
                               if r.blowup else "")
        if line is None:
            cells = [_td(name, r.label, "label", seeds)]
        else:
            k = references.kind(line)
            mark = (f'<span class="ref ref-{k}" title="{esc(references.SETTING)}: {esc(line)}">'
                    f"{references.MARKS[k]}</span>")
            cells = [_td(name + mark, r.label, "label", f"{seeds} · {references.SETTING}: {line}")]
        cells += [_value_td(board, r, lang) for lang in board.languages]
        if r.avg is None:
            cells.append(_td("gaps" if ours else fmt.MISSING, "", "gap", "missing languages: no average"))
        else:
            cells.append(_td(esc(fmt.cell(board, r.avg)), repr(r.avg), "best" if ours and r.avg == best_avg else ""))
        if show_common:
            cells.append(_td(esc(fmt.cell(board, r.avg_common)), "" if r.avg_common is None else repr(r.avg_common),
                             "best" if ours and r.avg_common is not None and r.avg_common == best_common else ""))
        cells.append(_td(esc(fmt.rank(r.mean_rank)), "" if r.mean_rank is None else repr(r.mean_rank),
                         "best" if ours and r.mean_rank is not None and r.mean_rank == best_rank else ""))
        cells += [_td(esc(fmt.init(k, r.init.get(k))), "" if r.init.get(k) is None else repr(r.init[k]))
                  for k, _ in inits]
        return "<tr>" + "".join(cells) + "</tr>"

    body = "".join(tr(r) for r in board.rows)
    paper = "".join(tr(r) for r in board.paper_rows)
    notes = "".join(f'<p class="note">note: {esc(n)}</p>' for n in board.notes)
    tie_note = fmt.ties_note(board)
    if tie_note:
        notes += f'<p class="note tie-note">note: {esc(tie_note)} (grey)</p>'
    return (f'<h3 id="{esc(board.id)}">{esc(board.title)}</h3><p class="hint">{esc(fmt.direction(board))}; '
            "mean ± std over seeds (hover a cell for the seeds and the 95% bootstrap interval); best per column "
            "in green, a column where every row scores the same in grey (no best); click a header to sort."
            + (f" Beside a row's name, what its method was checked against: {esc(references.legend(shown))} "
               "(hover it for what was compared and the test)." if shown else "") + "</p>"
            '<div class="wrap"><table class="board sortable" '
            f'data-board="{esc(board.id)}"><thead><tr>{"".join(heads)}</tr></thead><tbody>{body}</tbody>'
            + (f'<tbody class="paper">{paper}</tbody>' if paper else "") + f"</table></div>{notes}"
            + costs_html(board))


def slices_html(board: Board) -> str:
    if not board.slices:
        return ""
    heads = ["<th>row</th>"] + [f'<th title="{esc(s.dimension)}">{esc(s.dimension)}: {esc(s.header)}</th>'
                                for s in board.slices]
    rows = []
    for r in board.rows + board.paper_rows:
        cells = [_td(esc(r.label), r.label, "label")]
        for s in board.slices:
            v = s.averages.get(r.label)
            best = board.best_of([s.averages.get(o.label) for o in board.rows])
            cells.append(_td(esc(fmt.cell(board, v)), "" if v is None else repr(v),
                             "best" if r.kind == "ours" and v is not None and v == best else ("gap" if v is None
                                                                                              else "")))
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<h3>Slices · {esc(board.task)} · {esc(board.metric)} · {esc(board.step_label)}</h3>"
            '<p class="hint">average over the slice\'s languages (complete rows only); seen = seen by the row\'s '
            'source model.</p><div class="wrap"><table class="slices sortable"><thead><tr>'
            + "".join(heads) + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def pairs_html(board: Board) -> str:
    if not board.pairs:
        return ""
    heads = "".join(f"<th>{h}</th>" for h in ("A", "B", "langs", "A wins", "ties", "A losses", "median A−B", "p",
                                              "p Holm"))
    rows = []
    for p in board.pairs:
        rows.append("<tr>" + "".join([
            _td(esc(p.a), p.a, "label"), _td(esc(p.b), p.b, "label"), _td(str(p.n), p.n), _td(str(p.wins), p.wins),
            _td(str(p.ties), p.ties), _td(str(p.losses), p.losses),
            _td(esc(fmt.value(p.median_diff, True)), "" if p.median_diff is None else repr(p.median_diff)),
            _td(esc(fmt.p(p.p_value)), "" if p.p_value is None else repr(p.p_value)),
            _td(esc(fmt.p(p.p_holm)), "" if p.p_holm is None else repr(p.p_holm))]) + "</tr>")
    n = len(board.pairs)
    return (f"<details><summary>Paired tests · {esc(board.step_label)} ({n} pair{'s' if n != 1 else ''})</summary>"
            '<p class="hint">Wilcoxon signed-rank over the languages both rows have (two-sided; equal values are '
            "ties and leave the test); wins/losses in the metric's direction; Holm-adjusted across the pairs.</p>"
            '<div class="wrap"><table class="pairs sortable"><thead><tr>' + heads + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table></div></details>")


# -- page -------------------------------------------------------------------------------------------------
def _init_html(lb: Leaderboard) -> str:
    charts = "".join(init_chart([v for v in lb.variants if v.profile == p], f"target rows by origin · profile {p}")
                     for p in sorted({v.profile for v in lb.variants}))
    if not charts:
        return ""
    return ('<h2 id="init">Initialization</h2><p class="hint">How each row\'s target embedding rows were made: copied '
            "from the source (overlapping tokens), computed by the method, or drawn at random (the method's "
            'fallback); mean over seeds, from the init reports.</p><div class="charts">' + charts + "</div>")


def _settings_html(variants: list[VariantInfo]) -> str:
    if not variants:
        return ""
    keys = list(variants[0].settings)
    head = "<th>row</th>" + "".join(f"<th>{esc(k)}</th>" for k in keys)
    rows = "".join("<tr>" + _td(esc(v.label), v.label, "label") + "".join(
        f'<td style="text-align:left">{esc(v.settings.get(k, "-"))}</td>' for k in keys) + "</tr>" for v in variants)
    return ('<h2 id="settings">Settings of each row</h2><p class="hint">The explicit decisions behind each row '
            "(overlap rule, factorization, LM-head bias, CPT budget, seeds) and what its method was checked "
            "against, from its runs' params, tags and init reports.</p>"
            '<div class="wrap"><table class="sortable"><thead><tr>' + head + "</tr></thead><tbody>"
            + rows + "</tbody></table></div>")


def _cpt_html(lb: Leaderboard, colors: dict[str, str]) -> str:
    out = []
    for profile in sorted({v.profile for v in lb.variants}):
        vs = [v for v in lb.variants if v.profile == profile]
        held = {v.label: v.curves.get("cpt/heldout_loss", []) for v in vs}
        train = {v.label: v.curves.get("cpt/train_loss", []) for v in vs}
        heldout = heldout_name(o for b in lb.boards for o in (b.sources or {}).values())
        charts = line_chart(held, colors, f"{heldout} · profile {profile}", "loss") + line_chart(
            train, colors, f"training loss · profile {profile}", "loss")
        if not charts:
            continue
        rows = []
        for v in vs:
            h = v.curves.get("cpt/heldout_loss") or []
            rows.append("<tr>" + _td(esc(v.label), v.label, "label") + "".join(
                _td(esc(fmt.value(x)), "" if x is None else repr(x)) for x in (
                    h[0][1] if h else None, h[-1][1] if h else None, v.convergence.get("cpt/heldout_auc"))) + _td(
                esc(fmt.init("", v.convergence.get("cpt/steps_to_threshold"))),
                v.convergence.get("cpt/steps_to_threshold", "")) + "</tr>")
        out.append(f'<h3>Profile {esc(profile)}</h3><div class="charts">{charts}</div><div class="wrap">'
                   '<table class="sortable"><thead><tr><th>row</th><th>held-out loss step 0</th><th>held-out loss '
                   "final</th><th>AUC (mean loss over the curve)</th><th>steps to threshold</th></tr></thead><tbody>"
                   + "".join(rows) + "</tbody></table></div>")
    if not out:
        return ""
    return ('<h2 id="cpt">Continued pre-training</h2><p class="hint">Mean over seeds at each step; the held-out '
            "loss is evaluated at step 0, each checkpoint and the final step.</p>" + "".join(out))


def _tokstats_html(lb: Leaderboard) -> str:
    """Each source's tokenizer statistics (:mod:`leaderboard.tokstats`): per language, then the methods' shares."""
    from leaderboard.tokstats import language_rows, share_rows

    parts = []
    for st in lb.tokstats:
        parts.append(f"<h3>source {esc(st.source)}</h3>")
        for kind, (head, rows) in (("languages", language_rows(st)), ("shares", share_rows(st))):
            if rows:
                parts.append(f'<table class="sortable tokstats" data-kind="{kind}"><thead><tr>'
                             + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr></thead><tbody>"
                             + "".join("<tr>" + "".join(_td(esc(c), cls="label" if i == 0 else "")
                                                        for i, c in enumerate(r)) + "</tr>" for r in rows)
                             + "</tbody></table>")
    if not parts:
        return ""
    return ('<h2 id="tokenizers">Tokenizers</h2><p class="hint">per language, on its held-out text: tokens a word, '
            "bytes a token and the UNK rate of the source's tokenizer and of the target tokenizer; then, of the "
            "target tokens in that text, the share whose rows each method copied, computed, drew at random or left "
            'unknown (mean over languages and cells)</p><div class="wrap">' + "".join(parts) + "</div>")


def _languages_html(lb: Leaderboard) -> str:
    if not lb.languages:
        return ""
    srcs = sorted({s for m in lb.languages.values() for s in (m.get("seen") or {})})
    tasks = sorted({t for m in lb.languages.values() for t in (m.get("label_source") or {})})
    head = "".join(f"<th>{esc(h)}</th>" for h in ["language", "script", "resource level", "text chars",
                                                  *[f"seen by {s}" for s in srcs], *[f"{t} labels" for t in tasks]])
    rows = []
    for lang, m in lb.languages.items():
        cells = [lang, m.get("script", "-"), m.get("resource_level", "-"), m.get("text_chars", "-"),
                 *[{True: "seen", False: "unseen"}.get((m.get("seen") or {}).get(s), "-") for s in srcs],
                 *[(m.get("label_source") or {}).get(t, "-") for t in tasks]]
        rows.append("<tr>" + "".join(_td(esc(c), c, "label" if i == 0 else "") for i, c in enumerate(cells))
                    + "</tr>")
    return ('<h2 id="languages">Languages</h2><div class="wrap"><table class="sortable"><thead><tr>' + head
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div>")


def _claims_section(anchor: str, title: str, lead: str, head: list[str], rows: list[list[str]],
                    verdict_col: int) -> str:
    """A table of verdicts (the claims, the open question) under its heading and lead sentence: the columns before
    ``verdict_col`` are labels, the verdict is coloured, the last column is the note."""
    verdict = {v: f"claim-{v}" for v in ("holds", "contradicted", "inconclusive")}
    body = "".join("<tr>" + "".join(_td(esc(c), cls=verdict.get(c, "") if i == verdict_col else "label"
                                        if i < verdict_col else "claim-note" if i == len(head) - 1 else "")
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return (f'<h2 id="{anchor}">{esc(title)}</h2><p class="summary">{esc(lead)}</p><div class="wrap"><table '
            'class="claims"><thead><tr>' + "".join(f"<th>{esc(h)}</th>" for h in head)
            + f"</tr></thead><tbody>{body}</tbody></table></div>")


def leaderboard_html(lb: Leaderboard, *, generated: str = "", tracking_uri: str = "") -> str:
    colors = colors_for(v.label for v in lb.variants)
    for b in lb.boards:
        colors.update({k: c for k, c in colors_for([*colors, *(r.label for r in b.rows)]).items() if k not in colors})
    groups: dict[tuple[str, str], list[Board]] = {}
    for b in lb.boards:
        groups.setdefault((b.task, b.profile), []).append(b)
    nav, sections = [], []
    for (task, profile), boards in groups.items():
        sid = f"task-{task}-{profile}"
        nav.append(f'<a href="#{esc(sid)}">{esc(task)} ({esc(profile)})</a>')
        head = next((b for b in boards if b.headline and b.kind == "final"), boards[0])
        deltas = [b for b in boards if b.kind == "delta" and b.metric == head.metric]
        parts = [f'<h2 id="{esc(sid)}">{esc(task)} · {esc(head.metric)} · profile {esc(profile)}</h2>',
                 board_html(lb, head), slices_html(head),
                 f'<h3>Per language · {esc(head.metric)} · {esc(head.step_label)}</h3><div class="charts">'
                 f"{bar_chart(head, colors)}</div>"]
        versus = random_delta_chart(head, colors)
        if versus:
            parts.append(f"<h3>Per language · each method minus random · {esc(head.metric)} · "
                         f'{esc(head.step_label)}</h3><p class="hint">{esc(fmt.direction(head))}: bars to the '
                         f"{'right' if head.higher_is_better else 'left'} of 0 beat random on that language."
                         f'</p><div class="charts">{versus}</div>')
        parts.append(pairs_html(head))
        budgets = lb.budget_boards(head)  # each CPT budget's final step, where rows stopped at different steps
        for b in budgets + deltas:
            parts += [board_html(lb, b), slices_html(b)]
        shown = {id(b) for b in (head, *budgets, *deltas)}
        rest = [b for b in boards if id(b) not in shown]
        if rest:
            parts.append(f"<details><summary>All steps and metrics of {esc(task)} ({len(rest)} more tables)"
                         "</summary>" + "".join(board_html(lb, b) + slices_html(b) + pairs_html(b) for b in rest)
                         + "</details>")
        sections.append("".join(parts))
    if lb.claims:
        head, rows = claim_rows(lb.claims)
        sections.insert(0, _claims_section("claims", "The papers' claims on this run", summary(lb.claims), head,
                                           rows, 4) + f'<p class="hint">{esc(LEGEND)}</p>')
        nav.insert(0, '<a href="#claims">claims</a>')
    if lb.open_question:
        from leaderboard.claims import OPEN_QUESTION, open_question_rows

        head, rows = open_question_rows(lb.open_question)
        sections.insert(1 if lb.claims else 0, _claims_section(
            "open-question", "The open question: OFA and HyperOFA on a decoder", OPEN_QUESTION, head, rows, 3))
        nav.insert(1 if lb.claims else 0, '<a href="#open-question">open question</a>')
    for anchor, name in (("init", "init counts"), ("cpt", "CPT curves"), ("settings", "settings"),
                         ("languages", "languages"), *((("tokenizers", "tokenizers"),) if lb.tokstats else ())):
        nav.append(f'<a href="#{anchor}">{name}</a>')
    info = [f"worlds: {', '.join(lb.worlds) or '-'}", f"{len(lb.variants)} variant(s)"]
    bs = lb.bootstrap or {}
    boot = (f"{int(bs.get('level', 0.95) * 100)}% intervals resample seeds, then test items within each seed "
            f"({bs.get('resamples', 1000)} resamples, seed {bs.get('seed', 0)})" if bs.get("resamples", 1000)
            else "no bootstrap intervals (disabled)")
    if generated:
        info.append(f"generated {generated}")
    if tracking_uri:
        info.append(f"from {tracking_uri}")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>Leaderboard · {esc(lb.experiment)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>Leaderboard · {esc(lb.experiment)}</h1><p>{esc(' · '.join(info))}</p></header>"
            f'<nav>{"".join(nav)}<label style="float:right"><input type="checkbox" id="show-ci"> show 95% '
            "bootstrap intervals</label></nav><main>" + "".join(sections) + _init_html(lb) + _cpt_html(lb, colors)
            + _settings_html(lb.variants) + _languages_html(lb) + _tokstats_html(lb) + "</main><footer>Averages are over complete "
            "language sets only (a row with gaps shows them and gets no average); avg∩ and ranks use the "
            f"languages every row has; {esc(boot)}; paired tests are Wilcoxon signed-rank over languages. Rows "
            "labelled 'paper:' are published figures and take no part in ranks or tests.</footer>"
            f"<script>{JS}</script></body></html>\n")


__all__ = ["CSS", "INIT_PARTS", "JS", "MAX_BAR_LANGUAGES", "PALETTE", "bar_chart", "board_html", "colors_for", "esc",
           "init_chart", "leaderboard_html", "line_chart", "pairs_html", "random_delta_chart", "slices_html"]
