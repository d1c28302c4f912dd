"""Throughput of the evaluation tasks on CPU: retrieval encoding, exact top-k search, tagging fine-tuning.

For a tiny model (2 layers, hidden 32) and a MiniLM-sized one (6 layers, hidden 384, random init from config), on
synthetic data with realistic sentence lengths, it measures

- retrieval encoding: sentences/second through the scaled retrieval layer (mean pooling, length-grouped batches);
- tagging fine-tuning: optimizer steps/second under the ``cpu`` profile (batch 32, max length 128), and the wall
  time of a whole ``ner`` evaluation with the ``cpu`` profile (the synthetic world holds 1,000 training, 300 dev
  and 2 × 300 test sentences; the profile's caps decide how many are used, printed in the last column);
- exact top-k search: torch blocked matmul + topk vs faiss IndexFlatIP, 1,000 × 1,000 and 5,000 × 5,000.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_tasks.py [--threads N] [--quick]``. Prints a table.
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import random
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table
from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

from harness.core.registry import TASKS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from harness.worlds.base import load_world_dir
from harness.worlds.writer import write_jsonl
from tasks.base import TaskSettings
from tasks.metrics import l2_normalize, search_topk
from tasks.retrieval import encode_sentences, retrieval_layer

N_WORDS = 30000
TAGS = ["O"] * 6 + ["B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
MODELS = {
    "tiny (2L, 32d)": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64},
    "MiniLM-sized (6L, 384d)": {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12,
                                "intermediate_size": 1536},
}


def make_tokenizer():
    pieces = [(f"▁w{i}", -2.0 - i / N_WORDS) for i in range(N_WORDS)]
    return make_xlmr_tokenizer(xlmr_vocab(pieces + [(c, -12.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]))


def make_model(tok, spec: dict) -> XLMRobertaForMaskedLM:
    g = torch.Generator().manual_seed(0)
    cfg = XLMRobertaConfig(vocab_size=len(tok), max_position_embeddings=514, pad_token_id=1, **spec)
    model = XLMRobertaForMaskedLM(cfg)
    with torch.no_grad():  # reproducible weights without the global RNG
        for p in model.parameters():
            if p.ndim > 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)
    return model.eval()


def sentence(rng: random.Random, lo: int, hi: int) -> list[str]:
    return [f"w{min(N_WORDS - 1, int(rng.paretovariate(0.8)))}" for _ in range(rng.randint(lo, hi))]


def make_world(root: Path, n_train: int, n_dev: int, n_test: int) -> object:
    rng = random.Random(0)
    langs = ["eng_Latn", "deu_Latn"]
    d = root / "tasks" / "ner"
    for lang in langs:
        splits = {"train": n_train, "dev": n_dev, "test": n_test} if lang == "eng_Latn" else {"test": n_test}
        for split, n in splits.items():
            rows = []
            for _ in range(n):
                toks = sentence(rng, 5, 25)
                rows.append({"tokens": toks, "tags": [rng.choice(TAGS) for _ in toks]})
            write_jsonl(d / lang / f"{split}.jsonl", rows)
    (d / "meta.json").write_text(json.dumps({"languages": {lang: {"label_source": "gold"} for lang in langs}}))
    (root / "manifest.json").write_text(json.dumps({"name": "bench", "pivot_language": "eng_Latn",
                                                    "sources": {"bench": {}}}))
    (root / "languages.json").write_text(json.dumps({lang: {"script": "Latn"} for lang in langs}))
    return load_world_dir("bench", root)


def bench_encoding(model, tok, n: int) -> float:
    rng = random.Random(1)
    texts = [" ".join(sentence(rng, 6, 30)) for _ in range(n)]
    layers = model.config.num_hidden_layers
    encode_sentences(model, tok, texts[:32], layer=retrieval_layer(layers), n_layers=layers)  # warm-up
    t0 = time.perf_counter()
    encode_sentences(model, tok, texts, layer=retrieval_layer(layers), n_layers=layers, batch_size=32)
    return n / (time.perf_counter() - t0)


def bench_search(n: int, dim: int = 384) -> tuple[float, float]:
    g = torch.Generator().manual_seed(2)
    q, c = l2_normalize(torch.randn(n, dim, generator=g)), l2_normalize(torch.randn(n, dim, generator=g))
    out = []
    for backend in ("torch", "faiss"):
        search_topk(q[:10], c, 10, backend=backend)
        t0 = time.perf_counter()
        search_topk(q, c, 10, backend=backend)
        out.append(time.perf_counter() - t0)
    return out[0], out[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--quick", action="store_true", help="smaller data (a smoke run)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n_enc, n_train, n_dev, n_test = (200, 200, 60, 60) if args.quick else (1000, 1000, 300, 300)
    console = Console(width=160)
    tok = make_tokenizer()
    table = Table(title=f"task throughput on CPU, {args.threads} thread(s)")
    for col in ("model", "params", "retrieval layer", "encode sent/s", "fine-tune steps/s", "ner cpu profile (s)",
                "train / dev / test sents"):
        table.add_column(col, justify="right")
    with tempfile.TemporaryDirectory() as td:
        world = make_world(Path(td) / "world", n_train, n_dev, n_test)
        task = TASKS.get("ner")()
        task.evaluate(make_model(tok, MODELS["tiny (2L, 32d)"]), tok, world, ["eng_Latn"],
                      TaskSettings(profile="cpu", params={"epochs": 1, "max_train_sentences": 16,
                                                          "max_dev_sentences": 16}, max_sentences=16))  # warm-up
        for name, spec in MODELS.items():
            model = make_model(tok, spec)
            n_params = sum(p.numel() for p in model.base_model.parameters())
            sps = bench_encoding(model, tok, n_enc)
            t0 = time.perf_counter()
            res = task.evaluate(model, tok, world, ["eng_Latn", "deu_Latn"], TaskSettings(profile="cpu"))
            wall = time.perf_counter() - t0
            steps_s = res.extras["steps"] / res.extras["train_seconds"]
            table.add_row(name, f"{n_params / 1e6:.1f} M", str(retrieval_layer(spec["num_hidden_layers"])),
                          f"{sps:.0f}", f"{steps_s:.2f} ({res.extras['steps']} steps)", f"{wall:.1f}",
                          f"{res.extras['n_train']} / {res.extras['n_dev']} / {sum(res.extras['n_sentences'].values())}")
    console.print(table)
    st = Table(title="exact top-10 search, 384-d unit vectors")
    for col in ("queries x candidates", "torch matmul+topk (ms)", "faiss IndexFlatIP (ms)"):
        st.add_column(col, justify="right")
    for n in ((1000,) if args.quick else (1000, 5000)):
        t, f = bench_search(n)
        st.add_row(f"{n} x {n}", f"{t * 1000:.1f}", f"{f * 1000:.1f}")
    console.print(st)


if __name__ == "__main__":
    main()
