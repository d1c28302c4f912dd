"""Run the authors' OFA and HyperOFA code on a small real input and write its outputs as test fixtures.

This script runs OUTSIDE the harness: it imports nothing of this project, only the authors' files from an
extracted snapshot of their repositories (``cisnlp/ofa``, ``enesozeren/hyper-ofa``) and the libraries their code
needs (numpy, scikit-learn, gensim, transformers, torch, pytorch_lightning). Use ``make_ofa_fixtures.sh`` beside it,
which extracts the snapshots and the missing libraries into a temporary folder and runs this file there.

Inputs, all from the bible world's build (``~/.cache/harness/worlds/bible-v2``):

* source: the world's ``mono`` model (all-MiniLM-L6-v2, uncased WordPiece, 30,522 x 384): tokenizer and input
  embedding matrix, factorized with OFA's ``perform_factorize`` to ``--dim`` (100);
* target: the world's target tokenizer (122,776 SentencePiece pieces);
* word vectors: ``--words`` lines of the world's ``resources/word_vectors.vec`` (its ColexNet+-style multilingual
  vectors, keys ``iso3:word``), drawn at random with ``--seed``, in file order.

What runs, and what is written (to ``--out``; the inputs the harness needs to run on the same inputs as well):

* OFA: ``ofa/ofa.py``'s ``run_ofa`` (the authors' entry point, with ``keep_dim=[dim]``), which calls
  ``get_subword_embeddings_in_word_embedding_space``, ``perform_factorize``, ``get_overlapping_tokens`` and
  ``create_target_embeddings``; its ``target_matrix.npy`` is read back. ``ofa.npz``: the rows of a subset of the
  target tokens (``--rows`` method rows and ``--copied-rows`` copied rows), the provenance of every target token
  (copied / method / random, derived from the same functions: overlap set, zero subword vectors), the overlap map.
  ``inputs/source_rows.npz``: the rows of the reference's ``F_s`` those target rows need (copies and the top-k
  neighbours of the method rows).
* HyperOFA: ``hyperofa/utils.py``'s ``get_subword_to_word_mappings`` for both tokenizers (the matched word sets;
  the source side with ``F_s`` rows is the hypernetwork's training data), ``hypernetwork/utils.py``'s
  ``train_val_test_split`` (its split), ``init_target_matrix.py``'s ``create_target_embeddings`` with a
  marker prediction for every matched target token (which rows are copied / predicted / Gaussian).
  ``hyperofa.npz``.
* The hypernetwork: ``hypernetwork/lstm.py``'s ``LSTMModel`` (weights drawn with ``torch.manual_seed(--seed)``),
  a batch of real source tokens through ``hypernetwork/dataset.py``'s ``OFADataset`` and ``custom_collate_fn``,
  the forward pass in eval mode, ``lightning_modules.py``'s ``CustomLoss`` and the gradients of that loss.
  ``hypernetwork.safetensors`` (weights) and ``hypernetwork.npz`` (batch, outputs, losses, gradients).
* ``factorize.npz``: ``perform_factorize`` on a small real matrix (rows of E_s rounded to float16), for the
  factorization's convention.
* ``meta.json``: the commits, inputs, sizes, counts and the reference's run time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import lzma
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def load_module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def xz_copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f, lzma.open(dst, "wb", preset=9 | lzma.PRESET_EXTREME) as g:
        shutil.copyfileobj(f, g)


def csr(mapping: dict[int, list[int]], n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """A {token id: word ids} mapping as (indptr, words) with each token's words sorted."""
    indptr = np.zeros(n_tokens + 1, dtype=np.int64)
    words: list[np.ndarray] = []
    for t in range(n_tokens):
        w = np.sort(np.asarray(mapping.get(t, []), dtype=np.int64))
        indptr[t + 1] = indptr[t] + len(w)
        words.append(w)
    return indptr, np.concatenate(words).astype(np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ofa", type=Path, required=True, help="extracted snapshot of cisnlp/ofa")
    ap.add_argument("--hyperofa", type=Path, required=True, help="extracted snapshot of enesozeren/hyper-ofa")
    ap.add_argument("--ofa-commit", required=True)
    ap.add_argument("--hyperofa-commit", required=True)
    ap.add_argument("--world", type=Path, required=True, help="the built bible world (bible-v2)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--words", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--rows", type=int, default=1500, help="method rows stored")
    ap.add_argument("--copied-rows", type=int, default=300, help="copied rows stored")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hn-hidden", type=int, default=16)
    ap.add_argument("--hn-layers", type=int, default=2)
    ap.add_argument("--hn-batch", type=int, default=24)
    args = ap.parse_args()

    import torch
    from gensim.models import KeyedVectors
    from safetensors.numpy import load_file
    from safetensors.torch import save_file
    from sklearn.metrics.pairwise import cosine_similarity
    from transformers import AutoTokenizer

    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "inputs").mkdir(parents=True)
    rng = np.random.default_rng(args.seed)
    world = args.world
    src_dir, tgt_dir = world / "sources" / "mono", world / "target_tokenizer"
    vec_path = world / "resources" / "word_vectors.vec"

    # -- inputs ------------------------------------------------------------------------------------------------
    st = AutoTokenizer.from_pretrained(src_dir)
    tt = AutoTokenizer.from_pretrained(tgt_dir)
    weights = load_file(str(src_dir / "model.safetensors"))
    key = next(k for k in weights if k.endswith("embeddings.word_embeddings.weight"))
    e_s = np.ascontiguousarray(weights[key][: len(st)].astype(np.float32))
    del weights
    with open(vec_path, encoding="utf-8") as f:
        header = f.readline()
        lines = f.readlines()
    n_all, vdim = (int(x) for x in header.split())
    assert len(lines) == n_all
    chosen = np.sort(rng.choice(n_all, size=args.words, replace=False))
    vec_sub = Path(tempfile.mkdtemp()) / "word_vectors.vec"
    with open(vec_sub, "w", encoding="utf-8") as f:
        f.write(f"{len(chosen)} {vdim}\n")
        f.writelines(lines[i] for i in chosen)
    del lines
    xz_copy(vec_sub, out / "inputs" / "word_vectors.vec.xz")
    for name, d in (("source_tokenizer", src_dir), ("target_tokenizer", tgt_dir)):
        xz_copy(d / "tokenizer.json", out / "inputs" / name / "tokenizer.json.xz")
        shutil.copy(d / "tokenizer_config.json", out / "inputs" / name / "tokenizer_config.json")
    kv = KeyedVectors.load_word2vec_format(str(vec_sub))

    # -- OFA: the authors' entry point -------------------------------------------------------------------------
    sys.path.insert(0, str(args.ofa / "ofa"))  # ofa.py does `from utils import *`
    ofa_main = load_module("ofa_main", args.ofa / "ofa" / "ofa.py")
    ofa_utils = sys.modules["utils"]
    wv = ofa_utils.WordEmbedding(kv)
    save = Path(tempfile.mkdtemp()) / "ofa-out"
    run_args = SimpleNamespace(source_language_set="None", target_language_set="None", max_n_word_vectors=None,
                               keep_dim=f"[{args.dim}]", neighbors=10, temperature=0.1, do_save=True,
                               source_model_name="roberta-base",  # only names the output folder
                               save_path=str(save) + "/")
    t0 = time.perf_counter()
    ofa_main.run_ofa(run_args, wv, st, tt, e_s.copy())
    ofa_seconds = time.perf_counter() - t0
    folder = save / f"roberta_all_{args.dim}"  # run_ofa's own naming
    target_matrix = np.load(folder / "target_matrix.npy")
    f_s = np.load(folder / "source_matrix.npy")
    primitive = np.load(folder / "primitive_embeddings.npy")

    # provenance, from the same functions run_ofa calls
    overlap = ofa_utils.get_overlapping_tokens(tt, st, fuzzy_search=True)
    copy = {int(t): int(s) for t, s in overlap.values()}
    u_s, _ = ofa_utils.get_subword_embeddings_in_word_embedding_space(st, wv)
    u_t, _ = ofa_utils.get_subword_embeddings_in_word_embedding_space(tt, wv)
    n_t = len(tt)
    provenance = np.full(n_t, 2, dtype=np.int8)  # 0 copied, 1 method, 2 random
    has_u = ~(u_t == 0).all(axis=1)
    provenance[has_u] = 1
    provenance[list(copy)] = 0
    for t, s in copy.items():  # copied rows are the source rows
        assert np.array_equal(target_matrix[t], f_s[s])
    method_ids = np.flatnonzero(provenance == 1)
    copied_ids = np.array(sorted(copy), dtype=np.int64)
    rows_m = np.sort(rng.choice(method_ids, size=min(args.rows, len(method_ids)), replace=False))
    rows_c = np.sort(rng.choice(copied_ids, size=min(args.copied_rows, len(copied_ids)), replace=False))
    rows = np.sort(np.concatenate([rows_m, rows_c]))
    # the source rows those target rows are made of: their copies and the top-10 of the method rows, selected as
    # create_target_embeddings selects them (np.argpartition on sklearn's cosine), plus the next 10 by cosine so
    # that a tie broken the other way still finds its row
    sims = cosine_similarity(u_t[rows_m], u_s)
    need = set(copy[int(t)] for t in rows_c)
    need.update(np.argpartition(sims, -20, axis=1)[:, -20:].ravel().tolist())
    src_ids = np.array(sorted(need), dtype=np.int64)
    np.savez_compressed(out / "inputs" / "source_rows.npz", ids=src_ids, rows=f_s[src_ids],
                        n_source=np.int64(len(st)))
    np.savez_compressed(out / "ofa.npz", rows=rows, matrix=target_matrix[rows], provenance=provenance,
                        copy_target=np.array(sorted(copy), dtype=np.int64),
                        copy_source=np.array([copy[t] for t in sorted(copy)], dtype=np.int64))

    # -- HyperOFA's shared steps -------------------------------------------------------------------------------
    sys.path.insert(0, str(args.hyperofa))
    from hypernetwork import utils as hn_utils  # noqa: E402
    from hyperofa import utils as hofa_utils  # noqa: E402

    init_target = load_module("hyperofa_init_target_matrix", args.hyperofa / "hyperofa" / "init_target_matrix.py")
    hwv = hofa_utils.WordEmbedding(kv)
    t0 = time.perf_counter()
    src_map, _ = hofa_utils.get_subword_to_word_mappings(st, hwv)
    tgt_map, _ = hofa_utils.get_subword_to_word_mappings(tt, hwv)
    hofa_prim, hofa_fs = hofa_utils.perform_factorize(e_s.copy(), keep_dim=args.dim)
    mapping_seconds = time.perf_counter() - t0
    assert np.array_equal(hofa_fs, f_s) and np.array_equal(hofa_prim, primitive)  # the same factorization
    train_map, val_map, test_map = hn_utils.train_val_test_split(src_map, 0.97, 0.025, 0.005, seed=42)
    pairs = hn_utils.create_input_target_pairs(train_map, f_s)
    assert all(np.array_equal(t, f_s[i]) for i, t in zip(train_map, pairs["targets"], strict=True))
    # which rows the assembly copies, predicts or draws: a marker prediction (never a source row) for every
    # target token with matched words
    marker = {int(t): np.full(args.dim, 1000.0 + t, dtype=f_s.dtype) for t in tgt_map}
    assembled = init_target.create_target_embeddings(st, tt, f_s, marker)
    h_prov = np.full(n_t, 2, dtype=np.int8)
    for t in range(n_t):
        if t in marker and np.array_equal(assembled[t], marker[t]):
            h_prov[t] = 1
    h_overlap = init_target.get_overlapping_tokens(tt, st, fuzzy_search=True)
    for t, s in h_overlap.values():
        assert np.array_equal(assembled[t], f_s[s])
        h_prov[t] = 0
    s_indptr, s_words = csr(src_map, len(st))
    t_indptr, t_words = csr(tgt_map, n_t)
    np.savez_compressed(out / "hyperofa.npz", source_indptr=s_indptr, source_words=s_words,
                        target_indptr=t_indptr, target_words=t_words, provenance=h_prov,
                        split_train=np.array(sorted(train_map), dtype=np.int64),
                        split_val=np.array(sorted(val_map), dtype=np.int64),
                        split_test=np.array(sorted(test_map), dtype=np.int64))

    # -- the hypernetwork: architecture, input pipeline, loss ------------------------------------------------------
    from hypernetwork.dataset import OFADataset, custom_collate_fn  # noqa: E402
    from hypernetwork.lightning_modules import CustomLoss  # noqa: E402
    from hypernetwork.lstm import LSTMModel  # noqa: E402

    emb = hn_utils.create_word_embedding_matrix(hwv)  # (n_words + 1, 200), the last row the zero PAD
    pad = len(kv.index_to_key)
    by_len = sorted(src_map, key=lambda t: (len(src_map[t]), t))
    # a batch of real source tokens with set sizes from 1 to the largest (cut to 256 by the dataset)
    picks = sorted({by_len[int(round(q * (len(by_len) - 1)))] for q in np.linspace(0, 1, args.hn_batch)})
    inputs = [src_map[t] for t in picks]
    targets = [f_s[t] for t in picks]
    dataset = OFADataset(inputs, targets, max_context_size=256, augment=False)
    batch_x, batch_y = custom_collate_fn([dataset[i] for i in range(len(dataset))], pad_idx=pad)
    torch.manual_seed(args.seed)
    model = LSTMModel(emb_dim=vdim, hidden_dim=args.hn_hidden, num_layers=args.hn_layers, output_dim=args.dim,
                      context_size=256, dropout=0.4, word_vector_emb=emb, padding_idx=pad)
    model.eval()
    pred = model(batch_x)
    results = {}
    for temp in (0.5, 0.25):
        loss, contrastive, l1 = CustomLoss(temperature=temp, lambd=0.1)(pred, batch_y)
        results[temp] = (float(loss), float(contrastive), float(l1))
    loss, _, _ = CustomLoss(temperature=0.5, lambd=0.1)(pred, batch_y)
    model.zero_grad()
    loss.backward()
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not k.startswith("word_vector")}
    grads = {f"grad.{k}": p.grad.detach().numpy() for k, p in model.named_parameters() if p.grad is not None}
    save_file(state, str(out / "hypernetwork.safetensors"))
    lengths = [len(dataset[i][0]) for i in range(len(dataset))]
    np.savez_compressed(out / "hypernetwork.npz", tokens=np.array(picks, dtype=np.int64),
                        batch=batch_x.numpy().astype(np.int32), targets=batch_y.numpy(),
                        set_lengths=np.array([len(s) for s in inputs], dtype=np.int64),
                        lengths=np.array(lengths, dtype=np.int64),
                        inputs_flat=np.concatenate([np.asarray(s[:256], dtype=np.int32) for s in inputs]),
                        output=pred.detach().numpy(),
                        loss_t05=np.array(results[0.5]), loss_t025=np.array(results[0.25]), **grads)

    # -- the factorization's convention on a small real matrix -----------------------------------------------------
    sub = e_s[rng.choice(len(e_s), size=256, replace=False)].astype(np.float16).astype(np.float32)
    p_sub, f_sub = ofa_utils.perform_factorize(sub, keep_dim=64)
    np.savez_compressed(out / "factorize.npz", matrix=sub.astype(np.float16), coords=f_sub, primitive=p_sub)

    assert not any(m == "harness" or m.startswith(("harness.", "methods")) for m in sys.modules), \
        "the reference run must not import the project"
    counts = {name: int((provenance == v).sum()) for v, name in enumerate(("copied", "method", "random"))}
    h_counts = {name: int((h_prov == v).sum()) for v, name in enumerate(("copied", "method", "random"))}
    meta = {
        "script": "scripts/reference/ofa_reference.py (run by scripts/reference/make_ofa_fixtures.sh)",
        "reference": {"cisnlp/ofa": args.ofa_commit, "enesozeren/hyper-ofa": args.hyperofa_commit},
        "inputs": {
            "world": world.name,
            "source": {"dir": "sources/mono", "tokens": len(st), "dim": int(e_s.shape[1]),
                       "model_sha256": sha256(src_dir / "model.safetensors"),
                       "tokenizer_sha256": sha256(src_dir / "tokenizer.json")},
            "target_tokenizer": {"tokens": n_t, "tokenizer_sha256": sha256(tgt_dir / "tokenizer.json")},
            "word_vectors": {"file": "resources/word_vectors.vec", "sha256": sha256(vec_path), "lines": n_all,
                             "dim": vdim, "subset": len(chosen), "drawn_with": f"numpy default_rng({args.seed})"},
            "dim": args.dim, "neighbors": 10, "temperature": 0.1,
        },
        "ofa": {"counts": counts, "stored_rows": {"method": int(len(rows_m)), "copied": int(len(rows_c))},
                "source_rows_stored": int(len(src_ids)), "seconds": round(ofa_seconds, 2)},
        "hyperofa": {"counts": h_counts, "matched_source": len(src_map), "matched_target": len(tgt_map),
                     "split": [len(train_map), len(val_map), len(test_map)],
                     "mapping_seconds": round(mapping_seconds, 2)},
        "hypernetwork": {"hidden": args.hn_hidden, "layers": args.hn_layers, "dropout": 0.4, "batch": len(picks),
                         "max_context_size": 256, "loss_lambda": 0.1, "temperatures": [0.5, 0.25],
                         "init": f"torch.manual_seed({args.seed})"},
        "factorize": {"rows": 256, "keep_dim": 64, "matrix": "random rows of E_s rounded to float16"},
        "versions": {m: __import__(m).__version__ for m in ("numpy", "torch", "transformers", "gensim", "sklearn")},
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
