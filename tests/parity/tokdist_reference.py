"""Regenerate the Token Distillation parity fixture from the authors' code (konstantinjdobler/token-distillation,
MIT): their ``transform_input_token_format`` and ``train_embeddings`` (``paper/token_distillation.py``) run here, on
hand-made snippets and on a tiny random Llama; what they return is written to ``fixtures/tokdist.json`` and
``fixtures/tokdist_model.safetensors``, which ``test_tokdist_parity.py`` compares ours against (no network, none of
their code in this repository).

    python tests/parity/tokdist_reference.py PATH/TO/token-distillation [--out tests/parity/fixtures]

The checkout used for the committed fixture: commit ac9ef2c (``git archive HEAD paper``). It needs torch,
transformers and tqdm (the harness's environment has them).

With ``--real-pair`` the same two functions run on real inputs instead, the real pair of :mod:`tests.parity.realpair`
(all-MiniLM-L6-v2 and its WordPiece tokenizer, the French Bible, the SentencePiece target trained on it; built from
the registry packages in ``--downloads``), and ``fixtures/tokdist_realpair.json`` is written:

* ``transform_input_token_format`` with every new target token's source pieces as a pattern (thousands, which
  overlap) on the first 5 windows of 50 ids (the paper's length) of the 40 most frequent ones in the French text;
* ``train_embeddings`` on all-MiniLM-L6-v2 itself (``BertForMaskedLM`` from the package's weights, its dropout set
  to 0 so that the reference's ``model.train()`` draws nothing), the 4 most frequent new tokens with 8 windows
  of 24 ids each, FVT pre-init (the mean of the pieces' rows), batch 4, lr 1e-4, one epoch.

    python tests/parity/tokdist_reference.py PATH/TO/token-distillation --real-pair [--downloads DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

# hand-made cases of the merge (spec §3.7.1): overlapping patterns (a longer one sharing a prefix, one sharing a
# suffix), two patterns in one snippet, a pattern at the end, a snippet without any
MERGE_PATTERNS = [([5, 6], 100), ([5, 6, 7], 101), ([7, 8], 102), ([6, 7], 103), ([9], 104)]
MERGE_SNIPPETS = [[1, 5, 6, 7, 8, 5, 6], [7, 8, 9, 2], [5, 6, 7], [3, 6, 7, 8, 4], [2, 3, 4], [5, 5, 6, 6, 7, 8]]

VOCAB, HIDDEN = 40, 16
NEW_PATTERNS = [[11, 12], [13, 14, 15], [12, 13]]  # ids V, V+1, V+2; the third overlaps the other two
N_SNIPPETS, SNIPPET_LEN, BATCH, LR, SEED = 32, 12, 4, 1e-4, 42
# the real pair (tests/parity/realpair.tokdist_inputs): the merge's and the training's inputs
REAL_MERGE = {"tokens": 40, "snippets": 5, "length": 50}
REAL_TRAIN = {"tokens": 4, "snippets": 8, "length": 24}


class Tok:
    """What ``train_embeddings`` reads of a tokenizer: the pad id and the vocabulary size."""

    def __init__(self, n: int, pad: int):
        self.n, self.pad_token_id = n, pad

    def __len__(self) -> int:
        return self.n


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                      attention_dropout=0.0, tie_word_embeddings=False, pad_token_id=0, bos_token_id=1)
    model = LlamaForCausalLM(cfg)
    model.resize_token_embeddings(VOCAB + len(NEW_PATTERNS), mean_resizing=False)
    emb = model.get_input_embeddings().weight
    with torch.no_grad():  # FVT pre-init: the mean of the pattern's rows; untied head rows zero (paper)
        for j, pat in enumerate(NEW_PATTERNS):
            emb[VOCAB + j] = emb[pat].mean(0)
            model.get_output_embeddings().weight[VOCAB + j] = 0
    return cfg, model.float()


def snippets() -> list[list[torch.Tensor]]:
    """Per new token, its snippets: BOS, random ids of the original vocabulary (no pad), the token's pattern in
    the middle (a few snippets hold a second pattern too)."""
    g = torch.Generator().manual_seed(7)
    out = []
    per = N_SNIPPETS // len(NEW_PATTERNS) + 1
    for j, pat in enumerate(NEW_PATTERNS):
        mine = []
        for k in range(per):
            s = torch.randint(2, 11, (SNIPPET_LEN,), generator=g)
            s[0] = 1
            mid = SNIPPET_LEN // 2 - len(pat) // 2
            s[mid:mid + len(pat)] = torch.tensor(pat)
            if k % 3 == 0:
                other = NEW_PATTERNS[(j + 1) % len(NEW_PATTERNS)]
                s[1:1 + len(other)] = torch.tensor(other)
            if k % 4 == 1:  # a pattern at the end
                s[-len(pat):] = torch.tensor(pat)
            mine.append(s)
        out.append(mine)
    return out


def batch_order(n: int) -> list[list[int]]:
    """The order their DataLoader draws after ``seed_everything(42)``: the same loader over indices."""
    from token_distillation_utils import seed_everything
    from torch.utils.data import DataLoader

    seed_everything(SEED)
    loader = DataLoader(list(range(n)), batch_size=BATCH, shuffle=True, pin_memory=True, num_workers=4,
                        drop_last=True)
    return [b.tolist() for b in loader]


def real_pair_main(args: argparse.Namespace, td: Any, commit: str) -> int:
    """The two functions on the real pair; writes ``tokdist_realpair.json`` (see the module docstring)."""
    import shutil
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from transformers import BertForMaskedLM

    from harness.worlds.bible.fetch import Fetcher
    from tests.parity.realpair import build_real_pair, tokdist_inputs

    work = Path(tempfile.mkdtemp(prefix="tokdist-realpair-"))
    try:
        pair = build_real_pair(work / "pair", Fetcher(root=args.downloads))
        st = pair.source_tokenizer
        vocab, pad = len(st), int(st.pad_token_id)
        mined = tokdist_inputs(pair, **REAL_MERGE)
        flat = [s for per in mined["snippets"] for s in per]
        merge = td.transform_input_token_format(
            [[torch.tensor(s) for s in flat]],
            {torch.tensor(p): vocab + j for j, (p, _) in enumerate(mined["patterns"])}, pad)

        train = tokdist_inputs(pair, **REAL_TRAIN)
        chosen = train["chosen"]
        model = BertForMaskedLM.from_pretrained(pair.source_dir, hidden_dropout_prob=0.0,
                                                attention_probs_dropout_prob=0.0).float()
        assert model.get_input_embeddings().weight.shape[0] == vocab
        original = model.get_input_embeddings().weight.detach().clone()
        model.resize_token_embeddings(vocab + len(chosen), mean_resizing=False)
        emb = model.get_input_embeddings().weight
        with torch.no_grad():  # FVT pre-init: the mean of the pieces' rows (the output table is tied)
            for j, pat in enumerate(chosen):
                emb[vocab + j] = emb[pat].mean(0)
        init_rows = emb[vocab:].detach().clone()
        texts = [[torch.tensor(s) for s in per] for per in train["snippets"]]
        losses: list[float] = []
        mse = torch.nn.functional.mse_loss

        def recording_mse(a, b, *rest, **kw):  # every step's loss, as their loop computes it
            out = mse(a, b, *rest, **kw)
            losses.append(float(out.item()))
            return out

        torch.nn.functional.mse_loss = recording_mse
        try:
            td.train_embeddings(model, texts, {torch.tensor(p): vocab + j for j, p in enumerate(chosen)},
                                Tok(vocab + len(chosen), pad), epochs=1, batch_size=BATCH, learning_rate=LR,
                                seed=SEED, target_layer=-1, mixed_precision=False)
        finally:
            torch.nn.functional.mse_loss = mse
        emb = model.get_input_embeddings().weight.detach()
        assert torch.equal(emb[:vocab], original), "the reference changed an original row"
        n_train = sum(len(per) for per in train["snippets"])
        fixture = {
            "reference": f"konstantinjdobler/token-distillation {commit}: paper/token_distillation.py",
            "inputs": "the real pair of tests/parity/realpair.py: " + pair.info["source"] + "; " + pair.info["target"],
            "vocab": vocab, "pad": pad,
            "merge": {"settings": REAL_MERGE, "patterns": mined["patterns"], "snippets": mined["snippets"],
                      "out": merge},
            "train": {"settings": REAL_TRAIN, "model": "BertForMaskedLM of the package's weights, dropout 0",
                      "chosen": chosen, "snippets": train["snippets"], "batch_size": BATCH, "lr": LR,
                      "order": batch_order(n_train), "losses": losses, "init_rows": init_rows.tolist(),
                      "new_rows": emb[vocab:].tolist()},
        }
        (args.out / "tokdist_realpair.json").write_text(json.dumps(fixture, separators=(",", ":")) + "\n")
        print(f"real pair: merge of {len(mined['patterns'])} patterns on {len(flat)} snippets; training "
              f"{len(losses)} steps, first loss {losses[0]:.8f}; written to {args.out / 'tokdist_realpair.json'}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="a checkout of konstantinjdobler/token-distillation")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "fixtures")
    ap.add_argument("--real-pair", action="store_true",
                    help="run on the real pair of tests/parity/realpair.py (writes tokdist_realpair.json)")
    ap.add_argument("--downloads", type=Path, default=None,
                    help="the registry downloads the real pair is built from (default <harness home>/downloads)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.checkout / "paper"))
    import token_distillation as td

    if args.real_pair:
        commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or "ac9ef2c (git archive)"
        if args.downloads is None:
            sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
            from harness.core.paths import harness_home

            args.downloads = harness_home() / "downloads"
        return real_pair_main(args, td, commit)
    from safetensors.torch import save_file

    merge = td.transform_input_token_format([[torch.tensor(s) for s in MERGE_SNIPPETS]],
                                            {torch.tensor(p): i for p, i in MERGE_PATTERNS}, 0)

    cfg, model = tiny_llama()
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out / "tokdist_model.safetensors"))
    texts = snippets()
    flat = [s for per in texts for s in per]
    mapping = {torch.tensor(p): VOCAB + j for j, p in enumerate(NEW_PATTERNS)}
    losses: list[float] = []
    mse = torch.nn.functional.mse_loss

    def recording_mse(a, b, *rest, **kw):  # every step's loss, as their loop computes it
        out = mse(a, b, *rest, **kw)
        losses.append(float(out.item()))
        return out

    torch.nn.functional.mse_loss = recording_mse
    try:
        td.train_embeddings(model, texts, mapping, Tok(VOCAB + len(NEW_PATTERNS), 0), epochs=1, batch_size=BATCH,
                            learning_rate=LR, seed=SEED, target_layer=-1, mixed_precision=False)
    finally:
        torch.nn.functional.mse_loss = mse
    commit = subprocess.run(["git", "-C", str(args.checkout), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "ac9ef2c (git archive)"
    fixture = {
        "reference": f"konstantinjdobler/token-distillation {commit}: paper/token_distillation.py",
        "merge": {"patterns": MERGE_PATTERNS, "snippets": MERGE_SNIPPETS, "pad": 0, "out": merge},
        "train": {"config": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                          "num_hidden_layers", "num_attention_heads",
                                                          "num_key_value_heads", "max_position_embeddings")},
                  "vocab": VOCAB, "patterns": NEW_PATTERNS, "snippets": [s.tolist() for s in flat], "pad": 0,
                  "batch_size": BATCH, "lr": LR, "order": batch_order(len(flat)), "losses": losses,
                  "new_rows": model.get_input_embeddings().weight[VOCAB:].tolist()},
    }
    (args.out / "tokdist.json").write_text(json.dumps(fixture, indent=None, separators=(",", ":")) + "\n")
    print(f"{len(losses)} steps, first loss {losses[0]:.8f}; written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
