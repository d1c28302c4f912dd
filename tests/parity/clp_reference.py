"""Regenerate the CLP / CLP+ / OMP parity fixture (``tests/parity/fixtures/clp_synthetic*``) from a checkout of
``gucci-j/llm-cva`` (MIT; not on PyPI, and never copied here: its initializers are imported from the path given).

    PYTHONHASHSEED=0 python tests/parity/clp_reference.py --llm-cva /path/to/llm-cva --commit 4faf142
        [--out tests/parity/fixtures]
        [--inputs tests/parity/fixtures/clp_synthetic.npz]   (llm-cva again on the fixture's own inputs)

Needs, besides the harness: ``entmax`` and ``scikit-learn`` (llm-cva's imports; both in the parity environment).

What it does: builds the synthetic world in a temporary harness home; takes its source input table, its two
tokenizers, the helper model of ``clp`` under the ``cpu`` profile (trained here, on the world's CPT text) and FOCUS's
token-level fastText vectors of the target tokens (the ``cpu`` profile's, OMP's other donor space); runs llm-cva's
``CLPEmbeddingInitializer`` and ``CLPPlusEmbeddingInitializer`` (``copy_special_tokens=False``, seed 42) with stub
models whose ``get_input_embeddings()`` are those tables in float64, and writes

    clp_synthetic/source, clp_synthetic/target   the two tokenizers (what the test rebuilds the overlap from)
    clp_synthetic.json  the llm-cva commit (``--commit``) and the settings
    clp_synthetic.npz   source (|V_s| x d), helper (|V_t| x d_h), fasttext (|V_t| x d_f), fasttext_has (|V_t|),
                        overlap_target / overlap_source (llm-cva's overlapping tokens' ids),
                        new_target (the other target ids), clp / clp_plus (llm-cva's rows of those ids, float64)

With ``--real-pair`` it runs llm-cva on the real pair of :mod:`tests.parity.realpair` instead (all-MiniLM-L6-v2's
table and WordPiece tokenizer, the SentencePiece target trained on the French Bible, built from the registry
packages in ``--downloads``) and writes a small fixture, ``clp_realpair.npz`` / ``clp_realpair.json``:

    PYTHONHASHSEED=0 python tests/parity/clp_reference.py --llm-cva /path/to/llm-cva --commit 4faf142 --real-pair

The helper is the ``cpu`` profile's (:data:`methods.helper_model.HELPER_CPU`), trained here on the pair's French
text with its target tokenizer by :func:`methods.helper_model.helper_tables`. The two tokenizers are handed to
llm-cva as vocabularies of their canonical strings (:mod:`methods.canonical`; special tokens by their text), so
that its ``get_vocab()`` intersection is our ``exact`` overlap (``specials="string"``): across tokenizer families
the raw-string intersection pairs a French in-word piece with an English word-start token (spec §2.5), the
deviation the method pages name. The fixture keeps what the test needs and no more (the source rows are re-read
from the package at test time):

    target_fingerprint, source_fingerprint   (json) the tokenizers the fixture belongs to
    helper_ids, helper   the helper's rows (float32) of the overlap (CLP's, and OMP's specials by role) and of
                         the sample
    overlap_target / overlap_source   llm-cva's overlapping tokens' ids
    sample               new target ids: evenly spaced, and those whose helper cosines to the overlap sum
                         closest to zero (CLP's weights s / sum(s) largest)
    clp / clp_plus       llm-cva's rows of the sample (float64)

Run with ``PYTHONHASHSEED=0`` (llm-cva sums over ``list(set)``, whose order follows string hashing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
REAL_SAMPLE = 240  # new target ids of the real pair's fixture, evenly spaced ...
REAL_EDGE = 16  # ... and those whose helper cosines to the overlap sum closest to zero


class _Stub(torch.nn.Module):
    """What llm-cva reads of a model: ``get_input_embeddings().weight`` (and, to assemble the result,
    ``resize_token_embeddings`` / ``tie_weights`` / ``config.tie_word_embeddings``)."""

    def __init__(self, table: np.ndarray):
        super().__init__()
        self.emb = torch.nn.Embedding(*table.shape)
        self.emb.weight.data = torch.from_numpy(np.array(table))

        class _Config:
            tie_word_embeddings = True

        self.config = _Config()

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.emb

    def get_output_embeddings(self) -> None:
        return None

    def resize_token_embeddings(self, n: int, pad_to_multiple_of: int | None = None) -> None:
        pass

    def tie_weights(self) -> None:
        pass


def _load(path: Path, name: str) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synthetic_inputs(home: Path) -> tuple:
    """The synthetic world's source table and tokenizers, the cpu profile's helper table and FOCUS's cpu
    fastText vectors (built in the harness home ``home``)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    import methods  # noqa: F401 - registers the methods
    from harness.worlds import get_world
    from methods.base import InitContext
    from methods.clp import CLPInit
    from methods.helper_model import focus_vectors, helper_tables
    from methods.overlap import mapping_cache
    from methods.params import resolve

    world = get_world("synthetic")
    st = AutoTokenizer.from_pretrained(world.source_dir("src"))
    tt = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    e_s = AutoModelForMaskedLM.from_pretrained(world.source_dir("src")).get_input_embeddings().weight
    e_s = e_s.detach()[:len(st)].float().clone()
    ctx = InitContext(source_matrix=e_s, source_tokenizer=st, target_tokenizer=tt,
                      mapping_for=mapping_cache(st, tt, None), world=world, seed=1, profile="cpu",
                      cache_dir=home / "cache" / "methods" / "clp")
    p = resolve("clp", CLPInit.params, CLPInit.profile_defaults("cpu"))
    helper = helper_tables(ctx, p, who="clp").input
    ft, ft_has, _ = focus_vectors(ctx)
    return e_s.numpy(), helper, ft, ft_has, st, tt


class _CanonicalVocab:
    """A tokenizer as llm-cva reads it (``get_vocab()``, ``len()``), its strings the canonical ones."""

    def __init__(self, vocab: dict[str, int], size: int):
        self.vocab, self.size = vocab, size

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def __len__(self) -> int:
        return self.size


def canonical_vocabs(st, tt) -> tuple[_CanonicalVocab, _CanonicalVocab]:
    """The source and target vocabularies keyed by the strings the ``exact`` rule compares (``specials="string"``):
    llm-cva's intersection of them is our overlap."""
    from methods.canonical import canonical_vocab
    from methods.overlap import exact_table, string_of

    sv, tv = canonical_vocab(st), canonical_vocab(tt)
    source = exact_table(sv, "string")  # the highest source id wins a tie, as in the rule
    target: dict[str, int] = {}
    for i in range(len(tv)):
        c = string_of(tv, i, "string")
        key = c if c is not None else f"\x00{i}"
        if key in target:
            sys.exit(f"target tokens {target[key]} and {i} have one canonical string {key!r}")
        target[key] = i
    return _CanonicalVocab(source, len(sv)), _CanonicalVocab(target, len(tv))


def real_pair_main(args: argparse.Namespace, clp_cls: type, clp_plus_cls: type) -> None:
    """llm-cva on the real pair; writes ``clp_realpair.npz`` / ``.json`` (see the module docstring)."""
    sys.path.insert(0, str(HERE.parent.parent))
    from harness.worlds.bible.fetch import Fetcher
    from methods.clp import CLPInit
    from methods.helper_model import helper_tables
    from methods.params import resolve
    from methods.shared import tokenizer_fingerprint
    from tests.parity.realpair import build_real_pair, pair_ctx

    work = Path(tempfile.mkdtemp(prefix="clp-realpair-"))
    try:
        pair = build_real_pair(work / "pair", Fetcher(root=args.downloads))
        st, tt = pair.source_tokenizer, pair.target_tokenizer
        ctx = pair_ctx(pair, work / "cache" / "methods" / "clp", {}, profile="cpu")
        p = resolve("clp", CLPInit.params, CLPInit.profile_defaults("cpu"))
        tables = helper_tables(ctx, p, who="clp")
        helper = tables.input
        by_string = ctx.mapping_for("exact", specials="string").copy
        by_role = ctx.mapping_for("exact", specials="role").copy
        source = pair.source_matrix.numpy()
        sv, tv = canonical_vocabs(st, tt)
        out = {}
        for name, cls in (("clp", clp_cls), ("clp_plus", clp_plus_cls)):
            model = cls(_Stub(source.astype(np.float64)), _Stub(helper.astype(np.float64)), sv, tv,
                        copy_special_tokens=False, seed=42)()
            out[name] = model.get_input_embeddings().weight.detach().numpy()[:len(tt)].astype(np.float64)
        shared = sorted(set(tv.vocab) & set(sv.vocab), key=lambda c: tv.vocab[c])
        overlap = {tv.vocab[c]: sv.vocab[c] for c in shared}
        if overlap != by_string:
            sys.exit(f"llm-cva's overlap ({len(overlap)}) is not the exact rule's ({len(by_string)})")
        new = np.setdiff1d(np.arange(len(tt)), np.array(sorted(overlap)))
        picks = np.unique(np.linspace(0, len(new) - 1, REAL_SAMPLE).round().astype(np.int64))
        unit = helper.astype(np.float64)
        unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-300)
        sums = np.abs((unit[new] @ unit[np.array(sorted(overlap))].T).sum(1))  # |sum of CLP's cosines|
        taken = set(picks.tolist())
        edge = [int(i) for i in np.argsort(sums, kind="stable") if int(i) not in taken][:REAL_EDGE]
        sample = np.sort(new[np.concatenate([picks, np.array(edge, dtype=np.int64)])])
        helper_ids = np.array(sorted(set(overlap) | set(by_role) | set(sample.tolist())), dtype=np.int64)
        args.out.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(args.out / "clp_realpair.npz", helper_ids=helper_ids,
                            helper=helper[helper_ids].astype(np.float32),
                            overlap_target=np.array(sorted(overlap), dtype=np.int64),
                            overlap_source=np.array([overlap[t] for t in sorted(overlap)], dtype=np.int64),
                            sample=sample, **{name: rows[sample] for name, rows in out.items()})
        raw = set(st.get_vocab()) & set(tt.get_vocab())
        info = tables.info
        (args.out / "clp_realpair.json").write_text(json.dumps({
            "reference": f"gucci-j/llm-cva {args.commit[:7]} (git archive): adaptation/src/core/clp_init.py, "
                         "clp_plus_init.py",
            "inputs": "the real pair of tests/parity/realpair.py: " + pair.info["source"] + "; " + pair.info["target"],
            "source_fingerprint": tokenizer_fingerprint(st), "target_fingerprint": tokenizer_fingerprint(tt),
            "vocabularies": "canonical strings (methods.canonical; special tokens by their text), so that llm-cva's "
                            "get_vocab() intersection is the exact rule's overlap",
            "overlap": len(overlap), "raw_string_overlap": len(raw), "new": int(len(new)),
            "sample": {"evenly_spaced": int(len(picks)), "cosine_sum_nearest_zero": len(edge)},
            "helper": {"profile": "cpu", "settings": info.get("settings"), "seconds": info.get("seconds"),
                       "first_loss": info.get("first_loss"), "final_loss": info.get("final_loss")},
            "seed": 42, "copy_special_tokens": False, "PYTHONHASHSEED": 0}, indent=1) + "\n")
        print(f"wrote {args.out / 'clp_realpair.npz'}: |V_t| {len(tt)}, overlap {len(overlap)} (raw strings "
              f"{len(raw)}), sample {len(sample)}, helper rows {len(helper_ids)} x {helper.shape[1]} (trained in "
              f"{info.get('seconds')} s, loss {info.get('first_loss')} -> {info.get('final_loss')})")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llm-cva", required=True, type=Path, help="a checkout of gucci-j/llm-cva")
    ap.add_argument("--out", type=Path, default=HERE / "fixtures")
    ap.add_argument("--commit", required=True, help="the llm-cva commit of the checkout (recorded in the fixture)")
    ap.add_argument("--inputs", type=Path, default=None,
                    help="reuse the tables and tokenizers of this fixture (its .npz) instead of building them")
    ap.add_argument("--real-pair", action="store_true",
                    help="run on the real pair of tests/parity/realpair.py (writes clp_realpair.*)")
    ap.add_argument("--downloads", type=Path, default=None,
                    help="the registry downloads the real pair is built from (default <harness home>/downloads)")
    args = ap.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        sys.exit("run with PYTHONHASHSEED=0 (llm-cva sums in list(set) order)")
    core = args.llm_cva / "adaptation" / "src"
    if not (core / "core" / "clp_init.py").is_file():
        sys.exit(f"--llm-cva: {args.llm_cva} is not a checkout of gucci-j/llm-cva (no adaptation/src/core/clp_init.py)")
    # the two modules by file (the package's __init__ imports every initializer, and their other dependencies)
    clp_init = _load(core / "core" / "clp_init.py", "llm_cva_clp_init")
    clp_plus_init = _load(core / "core" / "clp_plus_init.py", "llm_cva_clp_plus_init")
    CLPEmbeddingInitializer = clp_init.CLPEmbeddingInitializer  # noqa: N806
    CLPPlusEmbeddingInitializer = clp_plus_init.CLPPlusEmbeddingInitializer  # noqa: N806

    if args.real_pair:
        if args.downloads is None:
            sys.path.insert(0, str(HERE.parent.parent))
            from harness.core.paths import harness_home

            args.downloads = harness_home() / "downloads"
        real_pair_main(args, CLPEmbeddingInitializer, CLPPlusEmbeddingInitializer)
        return

    from transformers import AutoTokenizer

    home = None
    if args.inputs is not None:  # the tables and tokenizers of an earlier fixture: llm-cva run again on them
        z = np.load(args.inputs)
        source, helper, ft, ft_has = z["source"], z["helper"], z["fasttext"], z["fasttext_has"]
        folder = args.inputs.with_suffix("")
        st = AutoTokenizer.from_pretrained(folder / "source")
        tt = AutoTokenizer.from_pretrained(folder / "target")
    else:
        home = Path(tempfile.mkdtemp(prefix="clp-fixture-"))
        os.environ["HARNESS_HOME"] = str(home)
        source, helper, ft, ft_has, st, tt = synthetic_inputs(home)

    # float64 inputs, as our methods compute: sklearn's cosines then run in float64 too (in the helper's float32
    # they carry float32 rounding, which CLP's weights s / sum(s) magnify where the cosines nearly cancel)
    out = {}
    for name, cls in (("clp", CLPEmbeddingInitializer), ("clp_plus", CLPPlusEmbeddingInitializer)):
        model = cls(_Stub(source.astype(np.float64)), _Stub(helper.astype(np.float64)), st, tt,
                    copy_special_tokens=False, seed=42)()
        out[name] = model.get_input_embeddings().weight.detach().numpy()[:len(tt)].astype(np.float64)
    tv, sv = tt.get_vocab(), st.get_vocab()
    shared = sorted(set(tv) & set(sv), key=lambda t: tv[t])
    target = args.out / "clp_synthetic"
    for side, tok in (("source", st), ("target", tt)):
        if args.inputs is not None and args.out.resolve() == args.inputs.parent.resolve():
            break  # the same folder: the tokenizers are already there
        if (target / side).exists():
            shutil.rmtree(target / side)
        tok.save_pretrained(target / side)
    overlap_target = np.array([tv[t] for t in shared])
    new = np.setdiff1d(np.arange(len(tt)), overlap_target)  # the copied rows are the source's: kept out
    np.savez_compressed(args.out / "clp_synthetic.npz", source=source, helper=helper, fasttext=ft,
                        fasttext_has=ft_has, overlap_target=overlap_target,
                        overlap_source=np.array([sv[t] for t in shared]), new_target=new,
                        **{name: rows[new] for name, rows in out.items()})
    (args.out / "clp_synthetic.json").write_text(json.dumps({
        "reference": f"gucci-j/llm-cva {args.commit[:7]} (git archive): adaptation/src/core/clp_init.py, "
                     "clp_plus_init.py",
        "inputs": "the synthetic world: source table and tokenizers, the cpu profile's helper table (float64 to "
                  "llm-cva)", "seed": 42, "copy_special_tokens": False, "PYTHONHASHSEED": 0}, indent=1) + "\n")
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
    print(f"wrote {args.out / 'clp_synthetic.npz'}: |V_s| {len(st)}, |V_t| {len(tt)}, overlap {len(shared)}, "
          f"helper {helper.shape}, fastText {ft.shape} ({int(ft_has.sum())} with a vector)")


if __name__ == "__main__":
    main()
