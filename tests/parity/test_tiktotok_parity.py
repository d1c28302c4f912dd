"""Parity of our Tik-to-Tok with its authors' package ``trans-tokenizers`` 0.1.4 (``transtokenizers``, MIT), where
the two algorithms coincide, on the synthetic world (docs/methods/tiktotok.md names each difference).

The package builds a target row from a list of (source token, weight) pairs per target token (``smooth_mapping``'s
output) in ``remap_model``; our Tik-to-Tok builds it from its plan (route, source ids, weights per row). The pairs
themselves come from different evidence -- theirs from fast_align counts over a parallel corpus and a substring
smoothing, ours from bilingual dictionaries and fastText spaces with the paper's rank weights -- so what is
compared is:

* **the rows, given the same pairs**: our plan handed to their ``remap_model`` gives every row of ours; rows of one
  source (copies, UNK) bit for bit, weighted averages to 1e-6 (they sum float32 products in ascending weight
  order, we take a float64 dot product);
* **the copies without alignment evidence**: their ``map_tokens`` on an empty alignment file maps the tokens both
  vocabularies share (numbers, punctuation, words, after swapping the word-start markers) and the special tokens;
  where our plan copies a row, theirs maps the same source token, and the tokens only they map are counted by kind.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.core.registry import METHODS
from methods.overlap import SPECIAL_PREFIX
from tests.parity.common import report
from tests.test_focus import synthetic_ctx

pytestmark = pytest.mark.parity

transtokenizers = pytest.importorskip("transtokenizers")

TINY = {"dim": 16, "epochs": 3, "bucket": 20_000}


@pytest.fixture(scope="module")
def ours(synthetic_world, parity_cache):
    cls = METHODS.get("tiktotok")
    ctx = synthetic_ctx(synthetic_world, parity_cache, TINY)
    method = cls()
    p = method.resolve_params(ctx)
    plan, _ = method.plan(ctx, p, method.mapping(ctx))
    return ctx, plan


def test_rows_from_the_same_pairs(ours, synthetic_world, monkeypatch):
    ctx, plan = ours
    # remap_model writes the target's additional_special_tokens_ids into the model's config, an attribute that
    # transformers 5 tokenizers no longer have: given here (it names config metadata only, no row)
    monkeypatch.setattr(type(ctx.target_tokenizer), "additional_special_tokens_ids",
                        property(lambda self: self.convert_tokens_to_ids(list(self.extra_special_tokens or []))),
                        raising=False)
    st, tt = ctx.source_tokenizer, ctx.target_tokenizer
    src_dir, tgt_dir = str(synthetic_world.source_dir("src")), str(synthetic_world.target_tokenizer_dir)
    mapping = [(tt.convert_ids_to_tokens(i), [(st.convert_ids_to_tokens(s), w)
                                             for s, w in zip(plan.sources[i], plan.weights[i], strict=True)])
               for i in range(plan.n)]
    with torch.random.fork_rng(devices=[]):
        model = transtokenizers.remap_model(src_dir, tgt_dir, mapping, src_dir)
    theirs = model.get_input_embeddings().weight.detach()[:plan.n].float()
    mine = plan.matrix(ctx.source_matrix)
    diff = (theirs - mine).abs().max(dim=1).values
    single = np.array([len(set(s)) == 1 for s in plan.sources])
    lines = []
    for route in ("copy", "unk", "dictionary", "fasttext"):
        ids = [i for i in range(plan.n) if plan.route[i] == route]
        if not ids:
            continue
        d = diff[ids]
        exact = int((d == 0).sum())
        lines.append(f"{route} {len(ids)} rows: {exact} identical, max |diff| {d.max().item():.1e}")
    report("tiktotok rows vs trans-tokenizers remap_model (same pairs): " + "; ".join(lines))
    one = torch.from_numpy(single)
    assert torch.equal(theirs[one], mine[one])  # one source: the source row, bit for bit
    assert diff.max().item() <= 1e-6
    assert int((~one).sum()) > 0  # weighted rows were compared too


def test_copies_without_alignments(ours, synthetic_world, tmp_path):
    ctx, plan = ours
    st, tt = ctx.source_tokenizer, ctx.target_tokenizer
    empty = tmp_path / "empty.fast_align.tsv"
    empty.write_text("")
    pairs, _ = transtokenizers.map_tokens(str(empty), str(synthetic_world.source_dir("src")),
                                          str(synthetic_world.target_tokenizer_dir))
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
    report(f"tiktotok copies vs trans-tokenizers map_tokens without alignments: {len(same)} of {len(ours_copy)} "
           f"copied rows map the same source token; {len(differ)} differ "
           f"({', '.join(f'{tt.convert_ids_to_tokens(i)}->{st.convert_ids_to_tokens(s)}' for i, (s, _) in list(differ.items())[:5])}); "
           f"mapped by theirs only: {dict(sorted(kinds.items()))}")
    specials = [i for i in ours_copy if canon[i].startswith(SPECIAL_PREFIX)]
    assert specials and all(i in same for i in specials)  # special tokens by role, on both sides
    assert not differ  # every row we copy, they map to the same source token
    assert len(same) == len(ours_copy) > len(specials)
