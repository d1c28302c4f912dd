"""CPT data path at the papers' scale: the old path (:func:`harness.cpt.cpt_blocks`, a list of Python lists handed
to the Trainer) beside the new one (:mod:`harness.corpus`: tokenized once into a memory-mapped product, a view
that pickles as paths).

**Corpus**: synthetic text shaped like HyperOFA's Table 7 (its 22 languages, each with its share of the 35,731,124
subsampled sentences, ``/work/shared/spec/methods.md``), at ``--fractions`` of that size, about 31 tokens a
sentence as the paper's 1.1 B tokens / 35.7 M sentences. Each language has words of its own script (Latin with its
diacritics, Greek, Cyrillic, Hangul, Georgian, Khmer, kana, Han, Arabic) drawn with a Zipf law from a vocabulary of
its own, spaces between words except in Japanese and Chinese. **Tokenizer**: a byte-level-free BPE of
``--vocab`` (default 250,000, XLM-R's size, so ids need uint32) pieces with SentencePiece's Metaspace
pre-tokenizer and XLM-R's special tokens, trained with the ``tokenizers`` library on a sample of that text.

**Measured**, each in a fresh process: tokenization tokens/s on 1 core and on every core (the old path is one
core; the new path's one-core rate is measured at the smallest size, its rate does not depend on the size); the
build's peak RSS (the process and its tokenizing workers, sampled every 0.1 s); the RSS at the first CPT step
(``run_cpt`` to the end of step 1, a one-layer XLM-R of the tokenizer's vocabulary, width 64, batch 8 x 512) with
0 and 2 loader workers (the process, and the process with its workers); the time from calling ``run_cpt`` to the
end of its first step on a cached corpus (the old path has no cache: it tokenizes every time). Extrapolated: the
time to tokenize 1.1 B and 12.8 B tokens on one core and on a 16-core node (all-core rate = 16 x the one-core rate
x the parallel efficiency measured here), and the old path's memory at those sizes (its bytes per token).

Usage: ``python benchmarks/bench_cpt_data.py --out /tmp/bench-cpt-data --fractions 0.0228 0.1823`` (about 25 M and
200 M tokens; ``--old-max-tokens`` bounds the sizes at which the old path runs).
"""

from __future__ import annotations  # noqa: I001 - the harness is imported first, out of order

from harness.core.kernels import pin

pin()  # first: the CPU kernels pinned (harness.core.kernels) before torch or numpy loads
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TABLE7 = {  # HyperOFA Table 7: subsampled sentences of the CPT data
    "eng_Latn": 5_000_000, "tur_Latn": 5_000_000, "ell_Grek": 5_000_000, "bul_Cyrl": 5_000_000,
    "ces_Latn": 5_000_000, "kor_Hang": 5_000_000, "kat_Geor": 990_785, "fry_Latn": 925_801, "zsm_Latn": 849_033,
    "khm_Khmr": 565_794, "jpn_Japn": 507_538, "yue_Hani": 483_750, "tuk_Latn": 312_480, "uig_Arab": 298_694,
    "pam_Latn": 292_293, "kab_Latn": 166_953, "gla_Latn": 124_953, "mhr_Cyrl": 91_557, "swh_Latn": 43_876,
    "cmn_Hani": 57_500, "pes_Arab": 18_762, "dtp_Latn": 1_355,
}
PAPER_TOKENS, FOCUS_TOKENS = 1.1e9, 12.8e9
EXTRA = {"tur": "çğıöşü", "ces": "áčďéěíňóřšťúůýž", "fry": "âêôûú", "zsm": "", "tuk": "äçňöşüýž", "pam": "ñ",
         "kab": "čḍǧḥɣṛṣṭẓε", "gla": "àèìòù", "swh": "", "dtp": "", "eng": ""}
SCRIPTS = {"Latn": [chr(c) for c in range(97, 123)], "Grek": [chr(c) for c in range(0x3B1, 0x3CA)],
           "Cyrl": [chr(c) for c in range(0x430, 0x450)], "Hang": [chr(c) for c in range(0xAC00, 0xAC00 + 600)],
           "Geor": [chr(c) for c in range(0x10D0, 0x10F1)], "Khmr": [chr(c) for c in range(0x1780, 0x17B4)],
           "Japn": [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x4E00, 0x4E00 + 400)],
           "Hani": [chr(c) for c in range(0x4E00, 0x4E00 + 3000)], "Arab": [chr(c) for c in range(0x627, 0x64B)]}


def _rss_tree(pid: int, pss: bool = False) -> tuple[int, int]:
    """(RSS of the process, memory of the process and all its descendants: the sum of their RSS, or with ``pss``
    of their PSS, which counts a page shared by forked loader workers once), bytes."""
    import psutil

    def size(p: psutil.Process) -> int:
        return p.memory_full_info().pss if pss else p.memory_info().rss

    p = psutil.Process(pid)
    own = p.memory_info().rss
    total = size(p)
    for c in p.children(recursive=True):
        try:
            total += size(c)
        except psutil.Error:
            pass
    return own, total


class PeakSampler:
    """The peak RSS of this process's tree, sampled every ``every`` seconds in a thread."""

    def __init__(self, every: float = 0.1):
        import threading

        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(every,), daemon=True)
        self._t.start()

    def _run(self, every: float) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_tree(os.getpid())[1])
            time.sleep(every)

    def stop(self) -> int:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, _rss_tree(os.getpid())[1])
        return self.peak


# -- the corpus and the tokenizer -----------------------------------------------------------------------------
def make_text(folder: Path, fraction: float, seed: int = 0, words_per_sentence: float = 16.0) -> dict[str, int]:
    """Table 7's languages at ``fraction`` of their sentences, written as ``<lang>.txt``; {lang: sentences}."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "_sizes.json"
    if done.is_file():
        return json.loads(done.read_text())
    sizes = {}
    for li, (lang, n_full) in enumerate(TABLE7.items()):
        n = max(1, round(n_full * fraction))
        rng = np.random.default_rng(seed * 1000 + li)
        code, script = lang.split("_")
        chars = SCRIPTS[script] + list(EXTRA.get(code, ""))
        spaced = script not in {"Japn", "Hani"}
        lengths = rng.integers(1 if not spaced else 2, 4 if not spaced else 10, size=30000)
        letters = [chars[i] for i in rng.integers(0, len(chars), size=int(lengths.sum()))]
        ends = np.cumsum(lengths)
        vocab = np.array(["".join(letters[e - k: e]) for k, e in zip(lengths, ends, strict=True)])
        ranks = np.arange(1, len(vocab) + 1)
        p = 1.0 / ranks ** 1.05
        p /= p.sum()
        pool = []  # sentences drawn from the language's Zipf law; the file samples them
        lengths = rng.poisson(words_per_sentence, size=20000) + 3
        words = vocab[rng.choice(len(vocab), size=int(lengths.sum()), p=p)].tolist()
        at = 0
        for k in lengths:
            s = (" " if spaced else "").join(words[at: at + k])
            at += k
            pool.append(s[:1].upper() + s[1:] + ("." if spaced else "。"))
        pool_arr = np.array(pool)
        with open(folder / f"{lang}.txt", "w", encoding="utf-8") as f:
            for start in range(0, n, 100000):
                idx = rng.integers(0, len(pool_arr), size=min(100000, n - start))
                f.write("\n".join(pool_arr[idx]) + "\n")
        sizes[lang] = n
    done.write_text(json.dumps(sizes))
    return sizes


def train_tokenizer(text: Path, out: Path, vocab: int) -> Path:
    """A Metaspace BPE of ``vocab`` pieces with XLM-R's special tokens, trained on the first 4,000 lines of each
    language of ``text``, saved (once) at ``out`` as a transformers tokenizer folder."""
    if (out / "tokenizer.json").is_file():
        return out
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    def sample():
        for f in sorted(text.glob("*.txt")):
            with open(f, encoding="utf-8") as fh:
                for i, line in enumerate(fh):
                    if i >= 4000:
                        break
                    yield line.rstrip("\n")

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(sample(), trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials,
                                                          show_progress=False, limit_alphabet=10000))
    tok.add_special_tokens(["<mask>"])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0),
                                                                                             ("</s>", 2)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>", cls_token="<s>", sep_token="</s>",
                                   model_max_length=512)
    fast.save_pretrained(out)
    return out


def make_model(tok_dir: Path, out: Path) -> Path:
    """A one-layer XLM-R of the tokenizer's vocabulary, width 64, 514 positions (random weights)."""
    if (out / "config.json").is_file():
        return out
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaForMaskedLM

    tok = AutoTokenizer.from_pretrained(tok_dir)
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=128, max_position_embeddings=514, pad_token_id=tok.pad_token_id)
    XLMRobertaForMaskedLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


class TextWorld:
    """What the CPT data path reads of a world: its name and its CPT text files."""

    def __init__(self, text: Path):
        self.name, self.text = f"bench-{text.name}", text

    def resource_files(self, kind: str) -> list[Path]:
        return sorted(self.text.glob("*.txt")) if kind == "cpt_text" else []


# -- the measurements, each in a fresh process ----------------------------------------------------------------
def _tokenizer(tok_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tok_dir)


def child_build(a: argparse.Namespace) -> dict:
    """Tokenize the corpus: the old path (cpt_blocks, one core) or the new (a fresh corpus product)."""
    from harness.core.cache import ProductCache

    world, tok = TextWorld(Path(a.text)), _tokenizer(a.tok)
    langs = sorted(TABLE7)
    sampler = PeakSampler()
    base = _rss_tree(os.getpid())[1]
    t0 = time.perf_counter()
    if a.path == "old":
        from harness.cpt import cpt_blocks

        blocks = cpt_blocks(tok, world, langs, 512, None, 1)
        tokens = len(blocks) * 512
    else:
        from harness.corpus import ensure_corpus

        corpus = ensure_corpus(tok, world, langs, 512, None, cache=ProductCache(Path(a.home)), workers=a.workers)
        tokens = int(corpus.index["tokens"])
    seconds = time.perf_counter() - t0
    peak = sampler.stop()
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds, "peak_rss": peak,
            "base_rss": base}


def child_first_step(a: argparse.Namespace) -> dict:
    """``run_cpt`` to the end of its first step; the RSS there (the process, and with its loader workers)."""
    import harness.cpt as cpt
    from harness.initialize import load_model, save_model

    world, tok = TextWorld(Path(a.text)), _tokenizer(a.tok)
    os.environ["HARNESS_HOME"] = a.home
    if a.path == "old":  # the lines run_cpt had before the corpus: every block a list, handed to the Trainer
        class Old:
            built, block_size, path = True, 512, Path("old")
            dtype = __import__("numpy").dtype("int64")

            def __init__(self, blocks):
                self.blocks, self.n_blocks = blocks, len(blocks)

        cpt.ensure_corpus = lambda tok_, w, langs, bs, cap: Old(cpt.cpt_blocks(tok_, w, langs, bs, cap, 1))
        cpt.write_order = lambda corpus, settings, seed, work: corpus
        cpt.CorpusDataset = lambda corpus, old: [{"input_ids": b} for b in old.blocks]
    got: dict = {}
    t0 = time.perf_counter()

    def progress(step: int, total: int, loss) -> None:
        if "seconds" not in got:
            got["seconds"] = time.perf_counter() - t0
            got["rss"], got["rss_with_workers"] = _rss_tree(os.getpid())
            got["pss_with_workers"] = _rss_tree(os.getpid(), pss=True)[1]

    settings = {"steps": 2, "lr": 1e-4, "effective_batch": 8, "per_device_batch": 8, "block_size": 512,
                "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
                "save_every": 0, "dataloader_workers": a.workers, "persistent_workers": a.workers > 0,
                "logging_steps": 1, "auto_batch": False, "attention_mask": False}
    said: list[str] = []
    work = Path(a.home) / f"cpt-{a.path}-{a.workers}-{time.time_ns()}"
    cpt.run_cpt(model_dir=Path(a.model), tokenizer=tok, world=world, languages=sorted(TABLE7), settings=settings,
                seed=1, device="cpu", product_dir=work, eval_steps=[], load_fn=lambda p: load_model(p, "cpu"),
                save_fn=save_model, progress=progress, say=said.append)
    got["said"] = [x for x in said if "corpus" in x]
    return got


def run_child(mode: str, **kw) -> dict:
    args = [sys.executable, __file__, "--child", mode] + [f"--{k.replace('_', '-')}={v}" for k, v in kw.items()]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run(args, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} {kw} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the tables ----------------------------------------------------------------------------------------------
def mb(x: float) -> str:
    return f"{x / 2**20:,.0f} MB"


def hours(s: float) -> str:
    return f"{s / 60:,.1f} min" if s < 3600 else f"{s / 3600:,.2f} h"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--path", default="new")
    ap.add_argument("--text")
    ap.add_argument("--tok")
    ap.add_argument("--model")
    ap.add_argument("--home")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--out", default="/tmp/bench-cpt-data")
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.0228, 0.1823])
    ap.add_argument("--vocab", type=int, default=250_000)
    ap.add_argument("--old-max-tokens", type=float, default=40e6)
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.child:
        print(json.dumps((child_build if a.child == "build" else child_first_step)(a)))
        return 0
    from harness.core.precision import cpu_name
    from harness.corpus import default_workers

    out = Path(a.out)
    cores = default_workers()
    texts = {f: out / f"text-{f}" for f in a.fractions}
    t0 = time.perf_counter()
    for f, d in texts.items():
        make_text(d, f)
    print(f"text made in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    small = texts[min(a.fractions)] if not (out / "tokenizer" / "tokenizer.json").is_file() else None
    t0 = time.perf_counter()
    tok = train_tokenizer(small, out / "tokenizer", a.vocab)
    model = make_model(tok, out / "model")
    print(f"tokenizer and model in {time.perf_counter() - t0:.0f}s", file=sys.stderr)
    rows: dict = {}
    if a.json and Path(a.json).is_file():  # the sizes measured before (a run stopped, or one size at a time)
        rows = {float(k): v for k, v in json.loads(Path(a.json).read_text())["rows"].items()}
    smallest = min([*a.fractions, *rows])
    for f in sorted(set(a.fractions) - set(rows)):
        text, home = texts[f], out / f"home-{f}"
        common = {"text": text, "tok": tok, "model": model}
        r: dict = {"fraction": f, "bytes": sum(p.stat().st_size for p in text.glob("*.txt"))}
        if f == smallest:  # the one-core rate does not depend on the size: measured at the smallest
            r["new_1"] = run_child("build", path="new", home=out / f"home1-{f}", workers=1, **common)
        r["new_all"] = run_child("build", path="new", home=home, workers=cores, **common)
        r["tokens"] = r["new_all"]["tokens"]
        for w in (0, 2):
            r[f"new_step_{w}"] = run_child("first_step", path="new", home=home, workers=w, **common)
        if r["tokens"] <= a.old_max_tokens:
            r["old_build"] = run_child("build", path="old", home=home, **common)
            for w in (0, 2):
                r[f"old_step_{w}"] = run_child("first_step", path="old", home=home, workers=w, **common)
        rows[f] = r
        print(json.dumps(r), file=sys.stderr)
        if a.json:
            Path(a.json).write_text(json.dumps({"cores": cores, "cpu": cpu_name(), "rows": rows}, indent=1))
    print(render(dict(sorted(rows.items())), cores, cpu_name()))
    return 0


def render(rows: dict, cores: int, cpu: str) -> str:
    lines = [f"CPT data path, {cpu}, {cores} cores; synthetic Table 7 corpus, BPE tokenizer, blocks of 512", ""]
    first = rows[min(rows)]
    one_new = first["new_1"]["tokens_per_s"]
    old_rate = next((r["old_build"]["tokens_per_s"] for r in rows.values() if "old_build" in r), None)
    head = f"| {'':44} |" + "|".join(f" {'old' + ' ' * 7} | {'new':10} " for _ in rows) + "|"
    lines.append("| size (tokens)" + " " * 31 + "|" + "|".join(
        f" {r['tokens'] / 1e6:,.1f} M ({r['fraction']:.2%} of Table 7)".ljust(25) for r in rows.values()) + "|")
    lines.append(head)

    def row(name: str, old_fn, new_fn) -> None:
        cells = []
        for r in rows.values():
            o = old_fn(r) if "old_build" in r else "(not run)"
            cells.append(f" {o:10} | {new_fn(r):10} ")
        lines.append(f"| {name:44} |" + "|".join(cells) + "|")

    row("tokenization tokens/s, 1 core", lambda r: f"{r['old_build']['tokens_per_s']:,.0f}",
        lambda r: f"{r['new_1']['tokens_per_s']:,.0f}" if "new_1" in r else "(= small)")
    row(f"tokenization tokens/s, {cores} cores", lambda r: "(1 core)",
        lambda r: f"{r['new_all']['tokens_per_s']:,.0f}")
    row("build peak RSS (with its workers)", lambda r: mb(r["old_build"]["peak_rss"]),
        lambda r: mb(r["new_all"]["peak_rss"]))
    for w in (0, 2):
        row(f"RSS at the first CPT step, {w} loader workers", lambda r, w=w: mb(r[f"old_step_{w}"]["rss"]),
            lambda r, w=w: mb(r[f"new_step_{w}"]["rss"]))
        if w:
            row("  the process and its workers, RSS summed", lambda r: mb(r["old_step_2"]["rss_with_workers"]),
                lambda r: mb(r["new_step_2"]["rss_with_workers"]))
            row("  the process and its workers, PSS summed", lambda r: mb(r["old_step_2"]["pss_with_workers"]),
                lambda r: mb(r["new_step_2"]["pss_with_workers"]))
    row("run_cpt to the end of step 1 (cached corpus)", lambda r: f"{r['old_step_0']['seconds']:.1f} s",
        lambda r: f"{r['new_step_0']['seconds']:.1f} s")
    par = max(r["new_all"]["tokens_per_s"] for r in rows.values()) / (cores * one_new)
    lines += ["", f"parallel efficiency of the new build here: {par:.2f} x {cores} cores x the one-core rate", ""]
    old_bytes = None
    for r in rows.values():
        if "old_build" in r:
            old_bytes = (r["old_build"]["peak_rss"] - r["old_build"]["base_rss"]) / r["tokens"]
    for tokens, name in ((PAPER_TOKENS, "HyperOFA's 1.1 B"), (FOCUS_TOKENS, "FOCUS's 12.8 B")):
        lines.append(f"extrapolated to {name} tokens:")
        if old_rate:
            lines.append(f"  old: {hours(tokens / old_rate)} of one-core tokenization in every cell; "
                         f"{tokens * old_bytes / 2**30:,.0f} GB of RSS per process ({old_bytes:.0f} B/token), "
                         f"again in each spawned loader worker (forked ones share its pages: PSS row), "
                         f"x4 over 4 torchrun ranks")
        r16 = 16 * one_new * min(1.0, par)
        lines.append(f"  new: once per world, {hours(tokens / (cores * one_new * min(1.0, par)))} on these "
                     f"{cores} cores, {hours(tokens / r16)} on a 16-core node ({r16:,.0f} tokens/s); "
                     f"{tokens * 4 / 2**30:,.1f} GB on disk (uint32); RSS flat (table)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
