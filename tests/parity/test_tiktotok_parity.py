"""Parity of our Tik-to-Tok with its authors' package ``trans-tokenizers`` 0.1.4 (``transtokenizers``, MIT), where
the two algorithms coincide, on the synthetic world and on the real pair of :mod:`tests.parity.realpair`
(all-MiniLM-L6-v2's WordPiece and table, the SentencePiece target trained on the French Bible, FreeDict
English-French; docs/methods/tiktotok.md names each difference).

The package builds a target row from a list of (source token, weight) pairs per target token (``smooth_mapping``'s
output) in ``remap_model``; our Tik-to-Tok builds it from its plan (route, source ids, weights per row). The pairs
themselves come from different evidence -- theirs from fast_align counts over a parallel corpus and a substring
smoothing, ours from bilingual dictionaries and fastText spaces with the paper's rank weights -- so what is
compared is:

* **the rows, given the same pairs**: our plan handed to their ``remap_model`` gives every row of ours; rows of one
  (source, weight) pair (copies, UNK, a single translation) bit for bit, weighted averages to 1e-6 (they sum
  float32 products in ascending weight order, we take a float64 dot product);
* **the copies without alignment evidence**: their ``map_tokens`` on an empty alignment file maps the tokens both
  vocabularies share (numbers, punctuation, words, after swapping the word-start markers) and the special tokens;
  where our plan copies a row, theirs maps the same source token, and the tokens only they map are counted by kind.
  On the real pair (a WordPiece source, whose word-start marker is empty) their marker swap
  ``token.replace("▁", "").replace("", "##")`` writes ``##`` between every character, so it finds no shared token:
  the special tokens agree; the in-word numbers we copy (``"1" -> "##1"``) their loop over numbers maps to the
  word-start form of the same string (``"1"``); the in-word punctuation we copy (``"," -> "##,"``) they do not map.
  The test asserts that every difference is one of these two kinds.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.registry import METHODS
from methods.overlap import SPECIAL_PREFIX
from tests.parity.common import report
from tests.parity.realpair import pair_ctx
from tests.test_focus import synthetic_ctx

pytestmark = pytest.mark.parity

transtokenizers = pytest.importorskip("transtokenizers")

TINY = {"dim": 16, "epochs": 3, "bucket": 20_000}
# the real pair: every dictionary pair and line, one epoch (the fastText space only picks the neighbours, which
# both sides are then given)
REAL = {"dim": 16, "epochs": 1, "bucket": 20_000, "workers": 1}


def planned(ctx):
    method = METHODS.get("tiktotok")()
    p = method.resolve_params(ctx)
    plan, _ = method.plan(ctx, p, method.mapping(ctx))
    return ctx, plan


@pytest.fixture(scope="module", params=["synthetic", "real-pair"])
def ours(request, parity_cache):
    """(world name, our context, our plan, the source model's folder, the target tokenizer's folder)."""
    if request.param == "synthetic":
        world = request.getfixturevalue("synthetic_world")
        ctx, plan = planned(synthetic_ctx(world, parity_cache, TINY))
        return request.param, ctx, plan, str(world.source_dir("src")), str(world.target_tokenizer_dir)
    pair = request.getfixturevalue("real_pair")
    ctx, plan = planned(pair_ctx(pair, parity_cache, REAL))
    return request.param, ctx, plan, str(pair.source_dir), str(pair.target_dir)


def test_rows_from_the_same_pairs(ours, monkeypatch):
    world, ctx, plan, src_dir, tgt_dir = ours
    # remap_model writes the target's additional_special_tokens_ids into the model's config, an attribute that
    # transformers 5 tokenizers no longer have: given here (it names config metadata only, no row)
    monkeypatch.setattr(type(ctx.target_tokenizer), "additional_special_tokens_ids",
                        property(lambda self: self.convert_tokens_to_ids(list(self.extra_special_tokens or []))),
                        raising=False)
    st, tt = ctx.source_tokenizer, ctx.target_tokenizer
    mapping = [(tt.convert_ids_to_tokens(i), [(st.convert_ids_to_tokens(s), w)
                                             for s, w in zip(plan.sources[i], plan.weights[i], strict=True)])
               for i in range(plan.n)]
    with torch.random.fork_rng(devices=[]):
        model = transtokenizers.remap_model(src_dir, tgt_dir, mapping, src_dir)
    theirs = model.get_input_embeddings().weight.detach()[:plan.n].float()
    mine = plan.matrix(ctx.source_matrix)
    diff = (theirs - mine).abs().max(dim=1).values
    # one (source, weight) pair: theirs copies the source row without its weight (a source named twice, two
    # translations with one first piece, is a weighted sum on their side, to 1 ulp)
    single = np.array([len(s) == 1 for s in plan.sources])
    lines = []
    for route in ("copy", "unk", "dictionary", "fasttext"):
        ids = [i for i in range(plan.n) if plan.route[i] == route]
        if not ids:
            continue
        d = diff[ids]
        exact = int((d == 0).sum())
        lines.append(f"{route} {len(ids)} rows: {exact} identical, max |diff| {d.max().item():.1e}")
    report(f"tiktotok rows vs trans-tokenizers remap_model (same pairs), {world}: " + "; ".join(lines))
    one = torch.from_numpy(single)
    assert torch.equal(theirs[one], mine[one])  # one source: the source row, bit for bit
    assert diff.max().item() <= 1e-6
    assert int((~one).sum()) > 0  # weighted rows were compared too


def test_copies_without_alignments(ours, tmp_path):
    world, ctx, plan, src_dir, tgt_dir = ours
    st, tt = ctx.source_tokenizer, ctx.target_tokenizer
    empty = tmp_path / "empty.fast_align.tsv"
    empty.write_text("")
    pairs, _ = transtokenizers.map_tokens(str(empty), src_dir, tgt_dir)
    src_vocab = st.get_vocab()
    theirs: dict[int, set[int]] = {}
    for token, cands in pairs.items():
        tid = tt.convert_tokens_to_ids(token)
        if tid is None or tid == tt.unk_token_id and token != tt.unk_token:
            continue
        best = max(cands.values())
        theirs[tid] = {src_vocab[c] for c, n in cands.items() if n == best and c in src_vocab}
    canon = ctx.mapping_for("tiktotok").target_tokens
    ours_copy = {i: plan.sources[i][0] for i in range(plan.n) if plan.route[i] == "copy"}
    same = [i for i, s in ours_copy.items() if s in theirs.get(i, set())]
    differ = {i: (s, theirs.get(i)) for i, s in ours_copy.items() if s not in theirs.get(i, set())}
    only_theirs = [i for i in theirs if i not in ours_copy]
    kinds: dict[str, int] = {}
    for i in only_theirs:
        c = canon[i]
        kind = ("special" if c.startswith(SPECIAL_PREFIX) else
                "alphabetic, " + (plan.route[i] or "unplanned") if any(ch.isalpha() for ch in c) else "other")
        kinds[kind] = kinds.get(kind, 0) + 1
    unmapped = {i: s for i, (s, c) in differ.items() if not c}  # rows theirs does not map at all
    # rows theirs maps to another source token: a number inside a word, which their loop over numbers maps to the
    # word-start form ("1" -> "1") where ours keeps the position ("1" -> "##1")
    other = {i: (s, c) for i, (s, c) in differ.items() if c}
    position_only = {i for i, (s, c) in other.items()
                     if {st.convert_ids_to_tokens(x) for x in c} == {st.convert_ids_to_tokens(s).removeprefix("##")}}
    report(f"tiktotok copies vs trans-tokenizers map_tokens without alignments, {world}: {len(same)} of "
           f"{len(ours_copy)} copied rows map the same source token; {len(other)} map another "
           f"({len(position_only)} the same string at word start: "
           f"{', '.join(f'{tt.convert_ids_to_tokens(i)}->{st.convert_ids_to_tokens(s)}' for i, (s, _) in list(other.items())[:4])}), "
           f"{len(unmapped)} are not mapped by theirs "
           f"({', '.join(f'{tt.convert_ids_to_tokens(i)}->{st.convert_ids_to_tokens(s)}' for i, s in list(unmapped.items())[:6])}); "
           f"mapped by theirs only: {dict(sorted(kinds.items()))}")
    specials = [i for i in ours_copy if canon[i].startswith(SPECIAL_PREFIX)]
    assert specials and all(i in same for i in specials)  # special tokens by role, on both sides
    if world == "synthetic":  # the same tokenizer family: they map every row we copy, to the same source token
        assert not differ and len(same) == len(ours_copy) > len(specials)
    else:  # WordPiece source: a row we copy that they map elsewhere is the word-start form of the same string,
        # and the rows they do not map are the in-word pieces their marker swap misses (no letter in them)
        assert set(other) == position_only
        assert all(not any(ch.isalpha() for ch in tt.convert_ids_to_tokens(i)) for i in unmapped)
