"""Loaders of the glot500 world, on fixtures written in the real sources' schemas (tests/fixtures/glot500)."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from harness.core.errors import MissingResourceError
from harness.worlds.glot500 import langcodes as lc
from harness.worlds.glot500 import loaders as ld

FIX = Path(__file__).resolve().parent / "fixtures" / "glot500"
WIKIANN = FIX / "hub/unimelb-nlp/wikiann"
UD = FIX / "hub/universal-dependencies/universal_dependencies"
MTEB = FIX / "hub/mteb/tatoeba-bitext-mining"
GLOT500C = FIX / "hub/cis-lmu/Glot500"
COLEX = FIX / "colexnet/colexnet_vectors_minlang_50_200_10_updated.wv"


# -- locating repositories ------------------------------------------------------------------------------------
def _fake_cache(tmp_path: Path, repo_type: str, hub_id: str, commit: str, ref: str | None, files: dict[str, Path]):
    folder = tmp_path / "hub" / f"{repo_type}s--{hub_id.replace('/', '--')}"
    blobs = folder / "blobs"
    blobs.mkdir(parents=True)
    for rel, src in files.items():
        data = src.read_bytes()
        import hashlib

        blob = blobs / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        dst = folder / "snapshots" / commit / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, dst.parent), dst)
    if ref:
        (folder / "refs" / Path(ref).parent).mkdir(parents=True, exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return folder


def test_hub_cache_lookup_by_commit_and_branch(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    commit = "3cbb74c7948eba5f890d2e97120088b0cea5ab76"
    src = WIKIANN / "en" / "test-00000-of-00001.parquet"
    _fake_cache(tmp_path, "dataset", "unimelb-nlp/wikiann", commit, "main", {"en/test-00000-of-00001.parquet": src})
    by_commit = ld.HubRef("unimelb-nlp/wikiann", commit, "dataset")
    by_branch = ld.HubRef("unimelb-nlp/wikiann", "main", "dataset")
    snap = ld.resolve_repo(by_commit)
    assert snap is not None and snap.name == commit and ld.snapshot_commit(snap) == commit
    assert ld.resolve_repo(by_branch) == snap
    assert ld.resolve_repo(ld.HubRef("unimelb-nlp/wikiann", "other", "dataset")) is None
    assert ld.resolve_repo(ld.HubRef("unimelb-nlp/wikiann", "0" * 40, "dataset")) is None
    # data read through the cache's symlinks equals the original; its sha256 is the blob name (no re-hashing)
    assert len(ld.read_wikiann(snap, "en", "test")) == 20
    f = snap / "en" / "test-00000-of-00001.parquet"
    from harness.core.hashing import sha256_file

    assert ld.file_sha256(f) == sha256_file(src)
    # a branch ref with slashes (refs/convert/parquet) resolves too
    _fake_cache(tmp_path, "dataset", "org/ud", "a" * 40, "refs/convert/parquet", {"en_ewt/test/0000.parquet":
                                                                                     UD / "en_ewt/test/0000.parquet"})
    assert ld.resolve_repo(ld.HubRef("org/ud", "refs/convert/parquet", "dataset")).name == "a" * 40


def test_hub_cache_dir_follows_env(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hfhome"))
    assert ld.hub_cache_dir() == tmp_path / "hfhome" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert ld.hub_cache_dir() == tmp_path / "c"


def test_user_path_replaces_the_cache(tmp_path):
    assert ld.resolve_repo(ld.HubRef("x/y", "main", "dataset", path=WIKIANN)) == WIKIANN
    assert ld.resolve_repo(ld.HubRef("x/y", "main", "dataset", path=tmp_path / "nope")) is None


def test_download_command():
    ref = ld.HubRef("cis-lmu/Glot500", "main", "dataset")
    assert ld.hf_download_command(ref, include=["eng_Latn/train/*"]) == \
        "hf download cis-lmu/Glot500 --repo-type dataset --include 'eng_Latn/train/*'"
    ref = ld.HubRef("FacebookAI/xlm-roberta-base", "42d8930d2fa6e51784fc924d37943d1cb89ec0de")
    assert ld.hf_download_command(ref, ["config.json"]) == \
        "hf download FacebookAI/xlm-roberta-base config.json --revision 42d8930d2fa6e51784fc924d37943d1cb89ec0de"


def test_split_files_layouts(tmp_path):
    # main-branch data files, the parquet conversion, save_to_disk shards (metadata json excluded), older names
    assert [p.name for p in ld.split_files(WIKIANN, "en", "dev")] == ["validation-00000-of-00001.parquet"]
    assert [p.parent.name for p in ld.split_files(UD, "en_ewt", "dev")] == ["validation"]
    assert [p.name for p in ld.split_files(GLOT500C, "eng_Latn", "train")] == ["data-00000-of-00001.arrow"]
    old = tmp_path / "en"
    old.mkdir()
    shutil.copy(WIKIANN / "en" / "test-00000-of-00001.parquet", old / "wikiann-test.parquet")
    assert [p.name for p in ld.split_files(tmp_path, "en", "test")] == ["wikiann-test.parquet"]
    assert ld.split_files(tmp_path, "en", "train") == []
    assert ld.split_files(tmp_path, "xx", "test") == []


# -- WikiANN ------------------------------------------------------------------------------------------------------
def test_wikiann_reads_class_labels_as_iob2_strings():
    test = ld.read_wikiann(WIKIANN, "en", "test")
    assert len(test) == 20
    tags = {t for s in test for t in s.tags}
    assert tags <= set(ld.NER_LABELS) and "B-PER" in tags and "O" in tags
    assert all(len(s.tokens) == len(s.tags) for s in test)
    # entity spans agree with the file's own `spans` column
    import datasets

    raw = datasets.Dataset.from_parquet(str(WIKIANN / "en" / "test-00000-of-00001.parquet"))
    first = test[0]
    spans = []
    for tok, tag in zip(first.tokens, first.tags, strict=True):
        if tag.startswith("B-"):
            spans.append([tag[2:], tok])
        elif tag.startswith("I-"):
            spans[-1].append(tok)
    assert [f"{s[0]}: {' '.join(s[1:])}" for s in spans] == raw[0]["spans"]
    assert len(ld.read_wikiann(WIKIANN, "en", "train")) == 60
    assert len(ld.read_wikiann(WIKIANN, "zh-yue", "test")) == 15
    assert lc.from_wikiann("zh-yue") == "yue_Hani"


def _write_ner(path: Path, names: list[str] | None) -> None:
    import datasets

    tags = datasets.Sequence(datasets.ClassLabel(names=names)) if names else datasets.Sequence(datasets.Value("int64"))
    feats = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")), "ner_tags": tags})
    path.parent.mkdir(parents=True, exist_ok=True)
    datasets.Dataset.from_dict({"tokens": [["a", "b"]], "ner_tags": [[0, 1]]}, features=feats).to_parquet(str(path))


def test_wikiann_schema_errors(tmp_path):
    _write_ner(tmp_path / "plain" / "test-00000-of-00001.parquet", None)
    with pytest.raises(ld.SchemaError, match="expected a list of ClassLabel"):
        ld.read_wikiann(tmp_path, "plain", "test")
    _write_ner(tmp_path / "order" / "test-00000-of-00001.parquet", ["O", "B-LOC", "I-LOC", "B-PER", "I-PER",
                                                                    "B-ORG", "I-ORG"])
    with pytest.raises(ld.SchemaError, match="labels are"):
        ld.read_wikiann(tmp_path, "order", "test")
    with pytest.raises(MissingResourceError, match="no data files"):
        ld.read_wikiann(tmp_path, "de", "test")


# -- Universal Dependencies ------------------------------------------------------------------------------------------
def test_ud_hub_merges_treebanks_and_drops_range_lines():
    groups = ld.ud_configs(UD)
    assert groups["en"] == ["en_esl", "en_ewt", "en_gum"] and groups["yue"] == ["yue_hk"]
    test = ld.read_ud_hub(UD, groups["en"], "test")
    assert len(test) == 10 + 6  # en_ewt + en_gum; en_esl (all words "_") is dropped as Glot500 does
    assert all("_" not in s.tags and "_" not in s.tokens for s in test)
    assert {t for s in test for t in s.tags} <= set(ld.UPOS)
    with_mwt = [s for s in test if "can" in s.tokens]
    assert with_mwt and all("cannot" not in s.tokens for s in with_mwt)  # syntactic words kept, range dropped
    s = with_mwt[0]
    i = s.tokens.index("can")
    assert s.tags[i:i + 3] == ["AUX", "PART", "VERB"]
    assert len(ld.read_ud_hub(UD, groups["en"], "train")) == 60
    assert len(ld.read_ud_hub(UD, groups["yue"], "train")) == 0  # test-only treebank


def test_ud_hub_drops_tokens_without_a_basic_head(tmp_path):
    """An enhanced-UD empty node in a Hub row has a UPOS but no basic head ("None"): not a word."""
    import datasets

    src = datasets.Dataset.from_parquet(str(UD / "en_ewt" / "test" / "0000.parquet"))
    row = dict(src[0])
    n = len(row["tokens"])
    for key in ("tokens", "lemmas", "xpos", "feats", "deprel", "deps", "misc"):
        row[key] = row[key] + ["gone"]
    row["upos"] = row["upos"] + [ld.UD_HF_UPOS.index("VERB")]
    row["head"] = row["head"] + ["None"]
    out = tmp_path / "en_x" / "test" / "0000.parquet"
    out.parent.mkdir(parents=True)
    datasets.Dataset.from_list([row], features=src.features).to_parquet(str(out))
    (sent,) = ld.read_ud_hub(tmp_path, ["en_x"], "test")
    assert "gone" not in sent.tokens and len(sent.tokens) == n - row["upos"].count(ld.UD_HF_UPOS.index("_"))


def test_ud_cleaning_rules():
    assert ld.clean_ud_sentence(["_", "_", "_"], ["NOUN"] * 3) is None
    assert ld.clean_ud_sentence(["a", "_", "_"], ["NOUN"] * 3) is None  # n_empty >= len - 1
    kept = ld.clean_ud_sentence(["ab\u200cc", "d e", "_", "x"], ["NOUN", "VERB", "X", "PUNCT"])
    assert kept is not None and kept.tokens == ["abc", "de", "_", "x"]


def test_ud_conllu_fused_forms():
    root = FIX / "ud-treebanks-v2.11"
    assert set(ld.ud_conllu_prefixes(root)) == {"en", "tr"}
    dev = ld.read_ud_conllu(root, "en", "dev")
    assert len(dev) == 8
    fused = [s for s in dev if "cannot" in s.tokens]
    assert len(fused) == 3  # sentences 0, 3, 6
    for s in fused:
        assert "can" not in s.tokens and "not" not in s.tokens
        assert s.tags[s.tokens.index("cannot")] == "AUX"  # can/AUX and not/PART tie in depth: AUX precedes PART
    assert all("gone" not in s.tokens for s in dev)  # enhanced-UD empty node is not a word
    assert len(ld.read_ud_conllu(root, "tr", "test")) == 6


def test_fused_form_takes_the_span_heads_pos():
    text = ("1\tShe\tshe\tPRON\t_\t_\t2\tnsubj\t_\t_\n2-3\tdella\t_\t_\t_\t_\t_\t_\t_\t_\n"
            "2\tdi\tdi\tADP\t_\t_\t3\tcase\t_\t_\n3\tla\til\tDET\t_\t_\t0\troot\t_\t_\n")
    tokens, tags = ld.fused_words(ld.parse_conllu(text)[0])
    assert tokens == ["She", "della"] and tags == ["PRON", "DET"]  # la is the highest node of the span
    tie = ("1-2\tdámelo\t_\t_\t_\t_\t_\t_\t_\t_\n1\tda\tdar\tVERB\t_\t_\t0\troot\t_\t_\n"
           "2\tme\tyo\tPRON\t_\t_\t0\troot\t_\t_\n")
    assert ld.fused_words(ld.parse_conllu(tie)[0]) == (["dámelo"], ["VERB"])
    with pytest.raises(ld.SchemaError, match="columns"):
        ld.parse_conllu("1\tbad\tline\n")


def test_extract_tgz_refuses_paths_outside(tmp_path):
    good = tmp_path / "good.tgz"
    with tarfile.open(good, "w:gz") as tf:
        data = b"1\ta\ta\tNOUN\t_\t_\t0\troot\t_\t_\n"
        info = tarfile.TarInfo("ud-treebanks-v2.11/UD_X-Y/xx_y-ud-test.conllu")
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    out = ld.extract_tgz(good, tmp_path / "out")
    assert (out / "ud-treebanks-v2.11/UD_X-Y/xx_y-ud-test.conllu").read_bytes() == data
    bad = tmp_path / "bad.tgz"
    with tarfile.open(bad, "w:gz") as tf:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(MissingResourceError, match="outside"):
        ld.extract_tgz(bad, tmp_path / "out2")
    assert not (tmp_path / "escape.txt").exists()


# -- Tatoeba and Bible ------------------------------------------------------------------------------------------------
def test_tatoeba_layouts(tmp_path):
    pairs = ld.read_tatoeba(MTEB, "tur", "mteb")
    assert len(pairs) == 30
    x, e = pairs[0]
    assert lc.detect_script(x) == "Latn" and x != e
    assert lc.detect_script(ld.read_tatoeba(MTEB, "kat", "mteb")[0][0]) == "Geor"
    xt = ld.read_tatoeba(FIX / "hub/google/xtreme", "tur", "xtreme")
    assert len(xt) == 12
    # the mteb main branch keeps JSON files: same columns, same reader
    d = tmp_path / "tur-eng"
    d.mkdir()
    (d / "test.jsonl").write_text("\n".join(json.dumps({"sentence1": a, "sentence2": b}) for a, b in pairs[:5]))
    assert ld.read_tatoeba(tmp_path, "tur", "mteb") == pairs[:5]
    with pytest.raises(ld.SchemaError, match="sentence1"):
        (d / "test.jsonl").write_text(json.dumps({"src": "a", "tgt": "b"}))
        ld.read_tatoeba(tmp_path, "tur", "mteb")


def test_pbc_files(tmp_path):
    verses = ld.read_pbc_file(FIX / "pbc" / "tur-x-bible-fixture.txt")
    assert all(len(k) == 8 and k.isdigit() for k in verses)
    assert len(verses) == 57 and all(v for v in verses.values())  # 60 verses minus 3; the empty verse skipped
    files = ld.pbc_files(FIX / "pbc")
    assert [p.name for p in files["yue"]] == ["yue-x-bible-fixture.txt", "yue-x-bible-jyutping.txt"]
    assert len(files["eng"]) == 2
    bad = tmp_path / "xxx-x-bible-bad.txt"
    bad.write_text("# comment\n4000100 too short\n")
    with pytest.raises(ld.SchemaError, match="8-digit"):
        ld.read_pbc_file(bad)


def test_pbc_edition_is_chosen_by_script():
    from harness.worlds.glot500.builder import _pick_pbc_file

    english = ld.read_pbc_file(FIX / "pbc" / "eng-x-bible-fixture.txt")
    files = ld.pbc_files(FIX / "pbc")
    assert _pick_pbc_file(files["yue"], "yue_Hani", english).name == "yue-x-bible-fixture.txt"
    assert _pick_pbc_file(files["yue"], "yue_Latn", english).name == "yue-x-bible-jyutping.txt"
    with pytest.raises(MissingResourceError, match="Cyrl"):
        _pick_pbc_file(files["yue"], "yue_Cyrl", english)


def test_glot500_bible_pairs(tmp_path):
    (tmp_path / "bible.tur_Latn-eng_Latn.tur_Latn").write_text("bir\niki\n\n")
    (tmp_path / "bible.tur_Latn-eng_Latn.eng_Latn").write_text("one\ntwo\n\n")
    assert ld.read_glot500_bible_pair(tmp_path, "tur_Latn") == [("bir", "one"), ("iki", "two")]
    (tmp_path / "bible.tur_Latn-eng_Latn.eng_Latn").write_text("one\n")
    with pytest.raises(ld.SchemaError, match="aligned"):
        ld.read_glot500_bible_pair(tmp_path, "tur_Latn")


# -- Glot500-c -------------------------------------------------------------------------------------------------------
def test_glot500c_first_n_sentences():
    assert ld.glot500c_rows(GLOT500C, "eng_Latn") == 80
    first = list(ld.iter_glot500c(GLOT500C, "eng_Latn", stop=10))
    assert len(first) == 9  # row 5 is empty and skipped
    assert first[3] == first[3].strip()  # row 3 was padded with spaces
    everything = list(ld.iter_glot500c(GLOT500C, "eng_Latn"))
    assert everything[:9] == first and len(everything) == 79
    assert list(ld.iter_glot500c(GLOT500C, "eng_Latn", start=75)) == everything[-5:]
    assert ld.has_split(GLOT500C, "tur_Latn", "test") and not ld.has_split(GLOT500C, "eng_Latn", "test")
    assert ld.glot500c_rows(GLOT500C, lc.to_glot500_config("jpn_Jpan")) == 40  # stored as jpn_Japn
    assert lc.detect_script(first[0]) == "Latn"


# -- ColexNet+ ---------------------------------------------------------------------------------------------------------
def test_keyed_vectors_read_without_gensim():
    kv = ld.read_keyed_vectors(COLEX)
    assert kv.gensim_class == "KeyedVectors" and len(kv.files) == 2
    assert kv.vectors.shape == (len(kv.keys), 16)
    np.testing.assert_array_equal(np.asarray(kv.vectors), np.load(f"{COLEX}.vectors.npy"))
    assert "book" in kv.keys and "tur:kitap" in kv.keys and "kat:წიგნი" in kv.keys  # English unprefixed
    assert "hong$kong" in kv.keys  # `$` marks a space
    i, j, k = kv.keys.index("book"), kv.keys.index("tur:kitap"), kv.keys.index("water")
    v = np.asarray(kv.vectors)
    cos = lambda a, b: float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    assert cos(v[i], v[j]) > cos(v[i], v[k])  # translations are neighbours


def test_keyed_vectors_gensim3_layout_with_inline_vectors(tmp_path):
    import sys
    import types

    mods = {n: types.ModuleType(n) for n in ("gensim", "gensim.models", "gensim.models.keyedvectors")}
    KV = type("Word2VecKeyedVectors", (), {"__module__": "gensim.models.keyedvectors"})
    Vocab = type("Vocab", (), {"__module__": "gensim.models.keyedvectors"})
    mods["gensim.models.keyedvectors"].Word2VecKeyedVectors = KV
    mods["gensim.models.keyedvectors"].Vocab = Vocab
    obj = KV()
    vocab = {}
    for i, w in enumerate(["b", "a"]):
        voc = Vocab()
        voc.__dict__.update({"index": i, "count": 3})
        vocab[w] = voc
    obj.__dict__.update({"vocab": vocab, "vectors": np.eye(2, 3, dtype=np.float32), "vector_size": 3})
    saved = {n: sys.modules.get(n) for n in mods}
    sys.modules.update(mods)
    try:
        blob = pickle.dumps(obj, protocol=2)
    finally:
        for n, m in saved.items():
            sys.modules.pop(n, None) if m is None else sys.modules.__setitem__(n, m)
    path = tmp_path / "old.wv"
    path.write_bytes(blob)
    kv = ld.read_keyed_vectors(path)
    assert kv.keys == ["b", "a"] and kv.gensim_class == "Word2VecKeyedVectors"
    np.testing.assert_array_equal(kv.vectors, np.eye(2, 3, dtype=np.float32))


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch should-not-exist",))


def test_keyed_vectors_refuse_foreign_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "evil.wv"
    path.write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(ld.SchemaError, match="refusing to load global"):
        ld.read_keyed_vectors(path)
    assert not (tmp_path / "should-not-exist").exists()
    path.write_bytes(pickle.dumps({"not": "keyed vectors"}))
    with pytest.raises(ld.SchemaError, match="not a gensim KeyedVectors"):
        ld.read_keyed_vectors(path)
    path.write_bytes(b"garbage")
    with pytest.raises(ld.SchemaError):
        ld.read_keyed_vectors(path)


def test_keyed_vectors_missing_companion(tmp_path):
    shutil.copy(COLEX, tmp_path / COLEX.name)
    with pytest.raises(MissingResourceError, match="vectors.npy"):
        ld.read_keyed_vectors(tmp_path / COLEX.name)


def test_word2vec_text_conversion_round_trips(tmp_path):
    kv = ld.read_keyed_vectors(COLEX)
    out = tmp_path / "wv.vec"
    seen = []
    info = ld.write_word2vec_text(kv, out, progress=seen.append, chunk=50)
    assert info == {"words": len(kv.keys), "dim": 16, "keys_with_whitespace": 0}
    assert sum(seen) == len(kv.keys)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"{len(kv.keys)} 16" and len(lines) == len(kv.keys) + 1
    key, *nums = lines[1].split(" ")
    assert key == kv.keys[0]
    np.testing.assert_allclose(np.array(nums, dtype=np.float32), np.asarray(kv.vectors[0]), rtol=1e-5, atol=1e-6)
    try:  # the methods' reader of the harness layout, when present
        from methods.wordvectors import read_word2vec_text
    except ImportError:
        return
    wv = read_word2vec_text(out)
    assert wv.keys == kv.keys
    np.testing.assert_allclose(wv.vectors, np.asarray(kv.vectors), rtol=1e-5, atol=1e-6)


# -- tokenizer and models ----------------------------------------------------------------------------------------
def test_glot500_tokenizer_extends_the_source():
    import tomllib

    from transformers import AutoTokenizer

    tgt = ld.load_target_tokenizer(FIX / "models" / "glot500-base")
    with open(FIX / "spec.toml", "rb") as f:
        assert len(tgt) == tomllib.load(f)["target_tokenizer"]["vocab_size"]
    src = AutoTokenizer.from_pretrained(FIX / "models" / "xlm-roberta-base")
    assert len(tgt) > len(src)
    src_vocab, tgt_vocab = src.get_vocab(), tgt.get_vocab()
    # Glot500-style: every source piece keeps its id, new pieces come after (only <mask> moves to the end)
    assert all(tgt_vocab[p] == i for p, i in src_vocab.items() if p != "<mask>")
    ka = "მარია ახალი წიგნი კითხულობს"
    assert tgt.unk_token_id not in tgt(ka)["input_ids"]
    assert src.unk_token_id in src(ka)["input_ids"]  # the English-only source cannot spell Georgian


def test_tokenizer_layout_is_checked(tmp_path):
    with pytest.raises(MissingResourceError, match="neither"):
        ld.load_target_tokenizer(tmp_path)


def test_source_model_files_refuse_pickled_weights(tmp_path):
    files = ld.source_model_files(FIX / "models" / "xlm-roberta-base")
    assert {f.name for f in files} == {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(MissingResourceError, match="pickled weights are not loaded"):
        ld.source_model_files(tmp_path)
