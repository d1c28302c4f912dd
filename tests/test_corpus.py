"""The CPT corpus (harness.corpus): the blocks and order of the reference path (harness.cpt.cpt_blocks), tokenized
once and shared, memory-mapped and pickled as a path, kill-safe, and the smoothed language sampling."""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from harness import corpus as corpus_mod
from harness.core.cache import ProductCache
from harness.corpus import (
    Corpus,
    CorpusDataset,
    block_order,
    ensure_corpus,
    id_dtype,
    sampling_probabilities,
    smoothed_order,
    write_order,
)
from harness.cpt import cpt_blocks

REPO = Path(__file__).resolve().parents[1]


def _tokenizer(world):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(world.source_dir(world.default_source))


def _languages(world):
    return sorted(p.stem for p in world.resource_files("cpt_text"))


def _view(corpus, seed, folder, **settings):
    return CorpusDataset(corpus, write_order(corpus, settings, seed, folder))


def _items(dataset):
    return [dataset[j]["input_ids"] for j in range(len(dataset))]


@pytest.mark.parametrize("block_size, cap", [(32, None), (48, 50)])
def test_the_same_blocks_in_the_same_order_as_cpt_blocks(synthetic_world, tmp_path, block_size, cap):
    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    cache = ProductCache(tmp_path)
    corpus = ensure_corpus(tok, synthetic_world, langs, block_size, cap, cache=cache)
    assert corpus.built and corpus.n_blocks > 10
    for seed in (1, 7):
        want = cpt_blocks(tok, synthetic_world, langs, block_size, cap, seed)
        got = _view(corpus, seed, tmp_path)
        assert len(got) == len(want)
        item = got[0]
        assert type(item["input_ids"]) is list and type(item["input_ids"][0]) is int  # as the collator got them
        assert _items(got) == want


MULTILINGUAL = {
    "ell_Grek": "Στην αρχή ήταν ο Λόγος, και ο Λόγος ήταν με τον Θεό.\n\n  Και το φως φέγγει στο σκοτάδι. \n",
    "bul_Cyrl": "В началото бе Словото, и Словото бе у Бога.\r\nИ светлината свети в тъмнината;\r\n\r\n",
    "kor_Hang": "태초에 말씀이 계시니라 이 말씀이 하나님과 함께 계셨으니\n빛이 어둠에 비치되 어둠이 깨닫지 못하더라\n",
    "khm_Khmr": "កាលពីដើមដំបូង មានព្រះបន្ទូល ហើយព្រះបន្ទូលគង់នៅជាមួយនឹងព្រះ\n\t\n",
    "uig_Arab": "ئەزەلدە سۆز بار ئىدى. سۆز خۇدا بىلەن بىللە ئىدى\n",
    "yue_Hani": "太初有道，道與神同在，道就是神。\n光照喺黑暗入面，黑暗冇勝過光。\n",
    "eng_Latn": "In the beginning was the Word, and the Word was with God!\n  \n\"Quoted\" -- dashes & 123 numbers.\n",
}


def _multilingual_world(tmp_path, repeat=60):
    cpt = tmp_path / "world" / "cpt"
    cpt.mkdir(parents=True)
    rng = random.Random(3)
    for lang, text in MULTILINGUAL.items():
        lines = text.splitlines(keepends=True)
        with open(cpt / f"{lang}.txt", "w", encoding="utf-8", newline="") as f:
            for i in range(repeat * (3 if lang == "eng_Latn" else 1)):
                f.write(f"{i} " + rng.choice(lines) if i % 5 else rng.choice(lines))
    return SimpleNamespace(name="multi", resource_files=lambda kind: sorted(cpt.glob("*.txt")))


def _trained_tokenizer(world, vocab=400):
    """A Unigram tokenizer with XLM-R's special tokens and post-processor, trained on the world's text."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                                      unk_token="<unk>")
    tok.train([str(p) for p in world.resource_files("cpt_text")], trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0),
                                                                                             ("</s>", 2)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", mask_token="<mask>")


def test_the_same_blocks_on_multilingual_text_tokenized_by_worker_processes(tmp_path, monkeypatch):
    """Scripts of the paper's languages, blank and whitespace lines, CRLF line ends, a cap that cuts a file: two
    spawned tokenizing processes, small chunks (many in flight, returned in order) give the reference's blocks."""
    world = _multilingual_world(tmp_path)
    tok = _trained_tokenizer(world)
    langs = ["eng_Latn", "ell_Grek", "bul_Cyrl", "missing", "kor_Hang", "khm_Khmr", "uig_Arab", "yue_Hani"]
    monkeypatch.setattr(corpus_mod, "INLINE_BYTES", 0)
    monkeypatch.setattr(corpus_mod, "INLINE_LINES", 0)
    monkeypatch.setattr(corpus_mod, "CHUNK_LINES", 7)
    corpus = ensure_corpus(tok, world, langs, 16, 150, cache=ProductCache(tmp_path / "home"), workers=2)
    assert corpus.index["workers"] == 2 and corpus.index["encoder"] == "backend"
    assert corpus.dtype == id_dtype(len(tok)) == (np.uint8 if len(tok) <= 256 else np.uint16)
    assert corpus.index["tokens"] > 50 * 16 and len(corpus.index["languages"]) == 7
    assert [x["lang"] for x in corpus.index["languages"]] == [x for x in langs if x != "missing"]
    assert _items(_view(corpus, 5, tmp_path)) == cpt_blocks(tok, world, langs, 16, 150, 5)


@pytest.mark.parametrize("n", [0, 1, 2, 17, 1000])
def test_the_order_is_the_seeded_shuffle_of_the_block_indices(n):
    for seed in (0, 1, 12345):
        want = list(range(n))
        random.Random(seed).shuffle(want)
        got = block_order(n, seed)
        assert got.dtype == np.uint32 and got.tolist() == want


def test_a_second_cell_reuses_the_corpus(synthetic_world, tmp_path, monkeypatch):
    """Two cells' CPT on the same world (different seeds): the first builds the corpus and says so, the second
    says it reused it and tokenizes nothing; each trains on its own seed's order."""
    from harness.cpt import read_train_log, run_cpt
    from harness.initialize import load_model, save_model

    src = synthetic_world.source_dir(synthetic_world.default_source)
    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    settings = {"steps": 1, "lr": 1e-4, "effective_batch": 4, "per_device_batch": 4, "block_size": 24,
                "mlm_probability": 0.15, "warmup_steps": 0, "weight_decay": 0.0, "precision": "fp32",
                "max_sentences_per_language": 40, "save_every": 0}
    said: list[str] = []
    calls: list[int] = []
    real = corpus_mod.build_corpus
    monkeypatch.setattr(corpus_mod, "build_corpus", lambda *a, **k: calls.append(1) or real(*a, **k))
    for seed in (1, 2):
        run_cpt(model_dir=src, tokenizer=tok, world=synthetic_world, languages=langs, settings=settings,
                seed=seed, device="cpu", product_dir=tmp_path / f"cpt-{seed}", eval_steps=[],
                load_fn=lambda p: load_model(p, device="cpu"), save_fn=save_model, say=said.append)
        assert read_train_log(tmp_path / f"cpt-{seed}")
        assert not list((tmp_path / f"cpt-{seed}").glob(".order-*"))  # the order is not part of the product
    lines = [x for x in said if "CPT corpus" in x]
    assert len(lines) == 2 and "corpus built" in lines[0] and "corpus reused" in lines[1], said
    assert calls == [1]


def test_a_loader_worker_receives_a_path_not_the_data(synthetic_world, tmp_path):
    """The view pickles as its paths (a few hundred bytes, whatever the corpus size), and a spawned DataLoader
    worker reads the same items from the memmap."""
    import torch

    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    corpus = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(tmp_path))
    view = _view(corpus, 3, tmp_path)
    _ = view[0]  # opened here: the pickle still carries no data
    size = len(pickle.dumps(view))
    assert size < 1000 < (corpus.path / "tokens.bin").stat().st_size, size
    loader = torch.utils.data.DataLoader(view, batch_size=None, num_workers=1, multiprocessing_context="spawn")
    got = [item["input_ids"] for item in loader]
    assert got == _items(view)


def _build_and_die(home: str, block_size: int) -> None:
    """A child that builds the synthetic world's corpus and is killed (SIGKILL) after its first chunk."""
    code = ("from transformers import AutoTokenizer\n"
            "from harness.worlds import get_world\nfrom harness.corpus import ensure_corpus\n"
            "from harness.core.cache import ProductCache\nfrom pathlib import Path\n"
            "from harness.core import faults\nfaults.install()\n"
            "w = get_world('synthetic', build=False)\n"
            "tok = AutoTokenizer.from_pretrained(w.source_dir(w.default_source))\n"
            "langs = sorted(p.stem for p in w.resource_files('cpt_text'))\n"
            f"ensure_corpus(tok, w, langs, {block_size}, None, cache=ProductCache(Path({home!r})))\n")
    # the fault (harness.core.faults): SIGKILL right after the first chunk's blocks are written
    env = {**os.environ, "HARNESS_FAULT_AT": "harness.corpus:append_blocks@1/after", "PYTHONPATH": str(REPO)}
    env.pop("HARNESS_MAIN_PID", None)  # the child is its own harness process: the fault kills it, not this one
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)  # (a loaded machine: minutes to start)
    assert proc.returncode == -9, proc.stderr[-2000:]


def test_a_kill_during_the_build_leaves_nothing_a_later_run_uses(synthetic_world, tmp_path, monkeypatch):
    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    monkeypatch.setattr(corpus_mod, "CHUNK_LINES", 16)
    _build_and_die(str(tmp_path), 20)
    kind_dir = tmp_path / "products" / "corpus"
    left = [p for p in kind_dir.iterdir() if not p.name.endswith((".lock", ".lease"))]  # (empty lock files)
    assert len(left) == 1 and left[0].name.startswith(".tmp-")  # the half-written build, under a temporary name
    assert (left[0] / "tokens.bin").stat().st_size > 0 and not (left[0] / "_DONE.json").exists()
    corpus = ensure_corpus(tok, synthetic_world, langs, 20, None, cache=ProductCache(tmp_path))
    assert corpus.built and corpus.path.parent == kind_dir and not corpus.path.name.startswith(".tmp-")
    assert _items(_view(corpus, 4, tmp_path)) == cpt_blocks(tok, synthetic_world, langs, 20, None, 4)


def test_a_damaged_corpus_is_built_again(synthetic_world, tmp_path):
    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    first = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(tmp_path))
    data = (first.path / "tokens.bin").read_bytes()
    (first.path / "tokens.bin").write_bytes(data[:-2] + bytes([data[-2] ^ 1, data[-1]]))
    again = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(tmp_path))
    assert again.built and (again.path / "tokens.bin").read_bytes() == data


def _fake_corpus(tmp_path, counts):
    import json

    langs, first = [], 0
    for i, c in enumerate(counts):
        langs.append({"lang": f"l{i}", "first_block": first, "blocks": c, "tokens": c * 8})
        first += c
    (tmp_path / "index.json").write_text(json.dumps({"block_size": 8, "dtype": "uint16", "n_blocks": first,
                                                     "languages": langs}))
    return Corpus(tmp_path)


def test_smoothed_sampling_draws_languages_as_p_to_the_alpha(tmp_path):
    """Shares 90 / 9 / 1 %: with alpha 0.3 (Glot500-m) the draws follow p ** 0.3 normalized (about 52 / 26 /
    13 % ... ), the small languages' blocks repeat and the large one's are not all seen; alpha 1 keeps p."""
    counts = [18000, 1800, 200]
    corpus = _fake_corpus(tmp_path, counts)
    q = sampling_probabilities(counts, 0.3)
    p = np.array(counts) / sum(counts)
    assert np.allclose(q, p ** 0.3 / (p ** 0.3).sum())
    order = smoothed_order(corpus, 11, 0.3)
    assert len(order) == sum(counts)
    lang = np.searchsorted(np.cumsum(counts), order, side="right")
    share = np.bincount(lang, minlength=3) / len(order)
    assert np.allclose(share, q, atol=0.01), (share, q)
    # each language's blocks in a seeded order of its own: no block of a language twice before all were drawn
    small = order[lang == 2]
    assert sorted(small[:200].tolist()) == list(range(19800, 20000))
    assert np.array_equal(smoothed_order(corpus, 11, 0.3), order)
    flat = np.bincount(np.searchsorted(np.cumsum(counts), smoothed_order(corpus, 11, 1.0), side="right")) / 20000
    assert np.allclose(flat, p, atol=0.01)


def test_language_sampling_settings(tmp_path):
    from harness.core.errors import ConfigError
    from harness.corpus import sampling_settings

    assert sampling_settings({}) == ("shuffled", 0.3)
    assert sampling_settings({"language_sampling": "smoothed", "sampling_alpha": 0.5}) == ("smoothed", 0.5)
    with pytest.raises(ConfigError):
        sampling_settings({"language_sampling": "uniform"})
    with pytest.raises(ConfigError):
        sampling_settings({"language_sampling": "smoothed", "sampling_alpha": 0})
    corpus = _fake_corpus(tmp_path, [50, 5])
    shuffled = np.load(write_order(corpus, {}, 3, tmp_path))
    assert shuffled.tolist() == block_order(55, 3).tolist()
    smoothed = np.load(write_order(corpus, {"language_sampling": "smoothed"}, 3, tmp_path))
    assert smoothed.tolist() == smoothed_order(corpus, 3, 0.3).tolist()


def test_the_smallest_type_that_holds_the_vocabulary():
    assert id_dtype(256) == np.uint8 and id_dtype(257) == np.uint16
    assert id_dtype(65536) == np.uint16 and id_dtype(65537) == np.uint32
    assert id_dtype(250002) == np.uint32  # XLM-R's vocabulary


def test_the_corpus_is_listed_and_removed_like_the_other_products(synthetic_world, tmp_path):
    from harness import cache_admin

    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    corpus = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(tmp_path))
    (item,) = [i for i in cache_admin.scan(tmp_path) if i.kind == "corpus"]
    assert item.path == corpus.path and item.world == synthetic_world.name and not item.busy
    assert item.bytes >= (corpus.path / "tokens.bin").stat().st_size
    assert "corpus" in cache_admin.known_kinds([])
    assert cache_admin.select([item], None, None, None) == [item]  # a plain prune takes it
    assert cache_admin.select([item], ["corpus"], None, None) == [item]
    cache_admin.remove([item], tmp_path)
    assert not corpus.path.exists()
    assert ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(tmp_path)).built


@pytest.mark.slow
@pytest.mark.parametrize("block_size, cap", [(64, 100), (512, None)])
def test_the_same_blocks_on_the_bible_worlds_text(tmp_path, block_size, cap):
    """The bible world's CPT text, tokenized by its target tokenizer (the one a cell's CPT uses): the cpu
    profile's slice (each language's first 100 lines, tokenized in this process) and the whole text at the
    paper's block size (23.5 M tokens, through the worker processes) give the blocks and order of
    ``cpt_blocks``. Builds the bible world where it is not built (minutes)."""
    from transformers import AutoTokenizer

    from harness.worlds import get_world

    world = get_world("bible")
    tok, langs = AutoTokenizer.from_pretrained(world.target_tokenizer_dir), _languages(world)
    corpus = ensure_corpus(tok, world, langs, block_size, cap, cache=ProductCache(tmp_path), workers=2)
    assert corpus.built and corpus.n_blocks > 100
    for seed in (1, 3):
        assert _items(_view(corpus, seed, tmp_path)) == cpt_blocks(tok, world, langs, block_size, cap, seed)


# -- a corpus in use is never pruned ----------------------------------------------------------------------------
def _reader(corpus_path: Path, folder: Path) -> subprocess.Popen:
    """A process that reads the corpus as a CPT's loader worker does (CorpusDataset, opened lazily) and lives on."""
    code = ("import sys, time\nfrom pathlib import Path\n"
            "from harness.corpus import Corpus, CorpusDataset, write_order\n"
            f"c = Corpus(Path({str(corpus_path)!r}))\n"
            f"v = CorpusDataset(c, write_order(c, {{}}, 1, Path({str(folder)!r})))\n"
            "v[0]\nprint('reading', flush=True)\ntime.sleep(300)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.readline().strip() == "reading"
    return proc


def _prune(home: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.cli", "cache", "prune", "--kind", "corpus", *flags],
                          capture_output=True, text=True, env={**os.environ, "HARNESS_HOME": str(home)}, cwd=REPO,
                          timeout=120)


def test_a_corpus_a_process_reads_is_not_pruned_but_by_force(synthetic_world, tmp_path):
    """A CPT's reader holds a lease on its corpus: prune beside it leaves the corpus and says so; --force removes
    it; a reader that was killed holds nothing (the kernel dropped its lock)."""
    import signal

    tok, langs = _tokenizer(synthetic_world), _languages(synthetic_world)
    home = tmp_path / "home"
    corpus = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(home))
    from harness.core.cache import release_lease

    release_lease(corpus.path)  # (this test process built it: only the reader below holds it)
    reader = _reader(corpus.path, tmp_path)
    try:
        dry = _prune(home, "--dry-run")
        assert dry.returncode == 0 and f"would skip 1 product(s) in use: corpus {corpus.path.name}" in dry.stdout
        r = _prune(home)
        assert r.returncode == 0, r.stderr
        assert f"skipped 1 product(s) in use: corpus {corpus.path.name}" in r.stdout and "--force" in r.stdout
        assert "freed 0 B in 0 item(s)" in r.stdout
        assert (corpus.path / "tokens.bin").is_file() and (corpus.path / "_DONE.json").is_file()
        r = _prune(home, "--force")
        assert r.returncode == 0 and "freed" in r.stdout and "in use" not in r.stdout.split("freed")[1], r.stdout
        assert not corpus.path.exists()
    finally:
        reader.kill()
        reader.wait()
    again = ensure_corpus(tok, synthetic_world, langs, 32, None, cache=ProductCache(home))
    assert again.built and again.path == corpus.path
    release_lease(again.path)
    reader = _reader(again.path, tmp_path)
    reader.send_signal(signal.SIGKILL)
    reader.wait()
    r = _prune(home)
    assert r.returncode == 0 and "in use" not in r.stdout and not again.path.exists(), r.stdout
    assert "removing 1 item(s)" in r.stdout  # said before it removed them


def test_the_cpt_texts_digests_come_from_the_worlds_record(synthetic_world, monkeypatch):
    """A cell process does not hash the CPT text again for the corpus key: the world's checksums (checked at its
    load, by stat) give each file's sha256; a file whose stats moved is hashed."""
    import hashlib

    from harness.core import hashing

    files = corpus_mod.cpt_files(synthetic_world, _languages(synthetic_world))
    want = {lang: hashlib.sha256(p.read_bytes()).hexdigest() for lang, p in files.items()}
    hashed = []
    real = hashing.sha256_file
    monkeypatch.setattr(hashing, "sha256_file", lambda p, *a: hashed.append(p) or real(p, *a))
    monkeypatch.setattr(corpus_mod, "_DIGESTS", {})
    assert {lang: corpus_mod.file_sha256(p) for lang, p in files.items()} == want and hashed == []
    path = next(iter(files.values()))
    st = path.stat()
    same = SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns, st_ctime_ns=st.st_ctime_ns)
    assert corpus_mod._world_recorded_sha256(path, same) == want[path.stem]
    for moved in (SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns + 1, st_ctime_ns=st.st_ctime_ns),
                  SimpleNamespace(st_size=st.st_size, st_mtime_ns=st.st_mtime_ns, st_ctime_ns=st.st_ctime_ns + 1),
                  SimpleNamespace(st_size=st.st_size + 1, st_mtime_ns=st.st_mtime_ns, st_ctime_ns=st.st_ctime_ns)):
        assert corpus_mod._world_recorded_sha256(path, moved) is None  # then file_sha256 hashes it
