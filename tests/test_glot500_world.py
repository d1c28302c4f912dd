"""The glot500 world: its spec, `harness world check`, the fixture world build and an end-to-end run, the
published reference tables."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from harness.worlds.base import read_jsonl, read_lines
from harness.worlds.glot500 import FIXTURE_SPEC, Glot500World
from harness.worlds.glot500 import langcodes as lc
from harness.worlds.glot500 import reference as ref
from harness.worlds.glot500.builder import SPEC_PATH, load_spec

FIX = FIXTURE_SPEC.parent


@pytest.fixture(scope="module")
def fixture_world(harness_home):
    from harness.worlds import get_world

    return get_world("glot500-fixture")


# -- the spec -------------------------------------------------------------------------------------------------------
def test_spec_names_every_input_by_hub_id_or_path():
    spec = load_spec(SPEC_PATH)
    assert set(spec["sources"]) == {"xlm-roberta-base", "roberta-base"}
    for src in spec["sources"].values():
        assert src["hub_id"].startswith("FacebookAI/") and src["revision"] and "model.safetensors" in src["files"]
    assert spec["target_tokenizer"]["hub_id"] == "cis-lmu/glot500-base"
    assert spec["target_tokenizer"]["vocab_size"] == 401145
    hub = {k: v for k, v in spec["inputs"].items() if "hub_id" in v}
    assert set(hub) == {"wikiann", "ud", "tatoeba", "glot500c"}
    assert all(v["revision"] and v["repo_type"] == "dataset" for v in hub.values())
    # the two inputs without a Hub copy are user paths with their provenance
    assert "zenodo.org/records/7920596" in spec["inputs"]["colexnet"]["url"]
    assert "not public" in spec["inputs"]["bible"]["source"] and "NOT comparable" in spec["inputs"]["bible"]["standin"]


def test_spec_language_sets_and_table7():
    spec = load_spec(SPEC_PATH)
    langs = spec["languages"]
    # seed 000 App. C (Table 3 lists and Table 4 subsets)
    assert {k: len(langs[k]) for k in ("srb", "srt", "ner", "pos", "cpt_srb", "cpt_srt", "cpt_ner", "cpt_pos")} == \
        {"srb": 322, "srt": 98, "ner": 164, "pos": 91, "cpt_srb": 20, "cpt_srt": 20, "cpt_ner": 14, "cpt_pos": 9}
    rows = spec["cpt"]["languages"]
    assert len(rows) == 22
    assert sum(r[2] for r in rows) == 141_612_168 and sum(r[3] for r in rows) == 35_731_124  # Table 7 totals
    assert all(r[3] == min(r[2], spec["cpt"]["max_sentences"]) for r in rows)  # first-N rule reproduces Table 7
    assert {r[1] for r in rows} == {"high", "mid", "low"}
    assert [r[0] for r in rows if r[1] == "high"] == ["eng_Latn", "tur_Latn", "ell_Grek", "bul_Cyrl", "ces_Latn",
                                                       "kor_Hang"]
    assert lc.to_glot500_config("jpn_Jpan") == "jpn_Japn"  # Table 7 prints jpn_Japn, Glot500-c's config name
    # every CPT-subset language of a task is a CPT language
    cpt = {r[0] for r in rows}
    for key in ("cpt_srb", "cpt_srt", "cpt_ner", "cpt_pos"):
        assert set(langs[key]) <= cpt


def test_needs_follow_the_language_set_and_exclusions(tmp_path, monkeypatch):
    world = Glot500World("glot500", SPEC_PATH)
    full = world.needs(world.spec)
    assert len(full.tasks["sr-b"]) == 322 and len(full.tasks["ner"]) == 164 and full.tasks["ner"][0] != ""
    assert "eng_Latn" in full.tasks["pos"] and len(full.cpt) == 22 and full.tasks["mlm"] == full.cpt
    over = tmp_path / "over.toml"
    over.write_text('[world]\nlanguage_set = "cpt"\n[world.exclude]\npos = ["gla_Latn"]\n')
    monkeypatch.setenv("HARNESS_GLOT500_SPEC", str(over))
    sub = world.needs(world.spec)
    assert len(sub.tasks["sr-t"]) == 20 and len(sub.tasks["ner"]) == 14
    assert "gla_Latn" not in sub.tasks["pos"] and len(sub.tasks["pos"]) == 8
    assert world.version != Glot500World("glot500", SPEC_PATH, env_override=False).version  # spec is identity


# -- check on a machine without the inputs -----------------------------------------------------------------------------
def test_check_names_every_missing_input_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HARNESS_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HARNESS_GLOT500_SPEC", raising=False)
    rows = {r.name: r for r in Glot500World("glot500", SPEC_PATH).check()}
    missing = [r for r in rows.values() if not r.present]
    assert len(missing) == 9 and rows["hub access / spec"].present
    assert "none of the inputs is on this machine" in rows["hub access / spec"].where
    xlmr = rows["source model xlm-roberta-base"]
    assert xlmr.how == ("hf download FacebookAI/xlm-roberta-base config.json model.safetensors "
                        "sentencepiece.bpe.model tokenizer.json --revision 42d8930d2fa6e51784fc924d37943d1cb89ec0de")
    assert "1.1 GB" in xlmr.size and "not in the local Hub cache" in xlmr.where
    assert rows["NER: WikiANN"].how.startswith("hf download unimelb-nlp/wikiann --repo-type dataset --revision 3cbb")
    g5 = rows["CPT + MLM: Glot500-c"].how
    assert "--include 'jpn_Japn/*'" in g5 and g5.count("--include") == 22  # the 22 CPT configs, never all 500+
    colex = rows["word vectors: ColexNet+"]
    assert "zenodo.org/records/7920596" in colex.how and str(tmp_path / "home") in colex.how
    bible = rows["SR-B: Bible"]
    assert "Cysouw" in bible.how and "biblenlp-corpus-mmteb" in bible.how and "not comparable" in bible.how.lower()
    assert all("[" not in r.how for r in rows.values())  # no rich markup in the texts


def test_check_finds_inputs_in_the_hub_cache(tmp_path, monkeypatch):
    """The real spec with an override: Table 4 language set, Tatoeba present in a Hub-cache snapshot."""
    import hashlib
    import os

    hub = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    over = tmp_path / "over.toml"
    over.write_text('[world]\nlanguage_set = "cpt"\n')
    monkeypatch.setenv("HARNESS_GLOT500_SPEC", str(over))
    world = Glot500World("glot500", SPEC_PATH)
    commit = world.spec["inputs"]["tatoeba"]["revision"]
    repo = hub / "datasets--mteb--tatoeba-bitext-mining"
    src = FIX / "hub/mteb/tatoeba-bitext-mining/tur-eng/test/0000.parquet"
    blob = repo / "blobs" / hashlib.sha256(src.read_bytes()).hexdigest()
    blob.parent.mkdir(parents=True)
    shutil.copy(src, blob)
    needed = [world._tatoeba_config(world.spec, c, "mteb") for c in world.needs(world.spec).tasks["sr-t"]]
    for cfg in needed[:-1]:
        dst = repo / "snapshots" / commit / cfg / "test" / "0000.parquet"
        dst.parent.mkdir(parents=True)
        os.symlink(blob, dst)
    row = next(r for r in world.check() if r.name == "SR-T: Tatoeba")
    assert not row.present and f"missing 1 of 20: {needed[-1]}" in row.where
    assert row.how.endswith(f"--include '{needed[-1]}/*'")
    dst = repo / "snapshots" / commit / needed[-1] / "test" / "0000.parquet"
    dst.parent.mkdir(parents=True)
    os.symlink(blob, dst)
    row = next(r for r in world.check() if r.name == "SR-T: Tatoeba")
    assert row.present and "20 language(s)" in row.how


def test_cli_world_check_glot500_exits_nonzero(run_cli, tmp_path):
    r = run_cli("world", "check", "glot500", env={"HF_HUB_CACHE": str(tmp_path / "none"), "COLUMNS": "300",
                                                   "HARNESS_GLOT500_SPEC": ""})
    assert r.returncode == 1, r.stderr
    out = r.stdout
    for needle in ("FacebookAI/xlm-roberta-base", "cis-lmu/glot500-base", "unimelb-nlp/wikiann",
                   "universal-dependencies/universal_dependencies", "mteb/tatoeba-bitext-mining", "cis-lmu/Glot500",
                   "ColexNet+", "Bible", "hf download", "9 input(s) missing"):
        assert needle in out, needle


def test_cli_world_check_fixture_passes(run_cli):
    r = run_cli("world", "check", "glot500-fixture", env={"COLUMNS": "300"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "missing" not in r.stdout


# -- the fixture world -------------------------------------------------------------------------------------------------
def test_fixture_world_layout(fixture_world):
    w = fixture_world
    assert w.pivot == "eng_Latn" and w.sources == ["xlm-roberta-base"]
    assert set(w.tasks_available()) == {"sr-b", "sr-t", "ner", "pos", "mlm"}
    assert set(w.languages) == {"eng_Latn", "tur_Latn", "kat_Geor", "yue_Hani", "jpn_Jpan"}
    assert w.languages["kat_Geor"].seen == {"xlm-roberta-base": True}
    assert w.languages["yue_Hani"].seen == {"xlm-roberta-base": False}
    assert w.languages["eng_Latn"].resource_level == "high" and w.languages["eng_Latn"].text_chars > 0
    for kind in ("word_vectors", "target_text", "cpt_text"):
        assert w.has_resource(kind), kind
    assert not w.has_resource("dictionary")  # the papers' setting has no bilingual dictionaries
    from transformers import AutoConfig, AutoTokenizer

    src = AutoTokenizer.from_pretrained(w.source_dir("xlm-roberta-base"))
    assert AutoConfig.from_pretrained(w.source_dir("xlm-roberta-base")).vocab_size == len(src)
    tgt = AutoTokenizer.from_pretrained(w.target_tokenizer_dir)
    spec = tomllib.loads(FIXTURE_SPEC.read_text())
    assert len(tgt) == spec["target_tokenizer"]["vocab_size"]
    # every input is recorded with the sha256 of each file read
    inputs = {i["name"]: i for i in w.manifest["inputs"]}
    assert {"colexnet", "bible", "unimelb-nlp/wikiann", "cis-lmu/Glot500"} <= set(inputs)
    assert all(len(h) == 64 for i in inputs.values() for h in i.get("files", {}).values())
    assert any(f.endswith(".vectors.npy") for f in inputs["colexnet"]["files"])
    assert inputs["unimelb-nlp/wikiann"]["revision"] == "3cbb74c7948eba5f890d2e97120088b0cea5ab76"


def test_fixture_world_tagging_tasks(fixture_world):
    w = fixture_world
    ner = w.task_meta("ner")
    assert ner["labels"] == ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
    assert ner["languages"]["yue_Hani"]["wikiann_config"] == "zh-yue"
    assert {p.name for p in (w.task_dir("ner") / "eng_Latn").iterdir()} == {"train.jsonl", "dev.jsonl", "test.jsonl"}
    assert {p.name for p in (w.task_dir("ner") / "kat_Geor").iterdir()} == {"test.jsonl"}
    rows = read_jsonl(w.task_dir("ner") / "eng_Latn" / "train.jsonl")
    assert len(rows) == 60 and all(set(r["tags"]) <= set(ner["labels"]) for r in rows)
    pos = w.task_meta("pos")
    assert pos["languages"]["eng_Latn"]["treebanks"] == ["en_esl", "en_ewt", "en_gum"]
    assert pos["languages"]["eng_Latn"]["sentences"] == {"train": 60, "dev": 20, "test": 16}
    assert "kat_Geor" not in pos["languages"]  # not in the POS list
    test = read_jsonl(w.task_dir("pos") / "jpn_Jpan" / "test.jsonl")
    assert len(test) == 12 and all(set(r["tags"]) <= set(pos["labels"]) for r in test)


def test_fixture_world_retrieval_tasks(fixture_world):
    w = fixture_world
    pivot = {r["id"]: r["text"] for r in read_jsonl(w.task_dir("sr-t") / "eng_Latn.jsonl")}
    for code in ("tur_Latn", "kat_Geor", "yue_Hani", "jpn_Jpan"):
        rows = read_jsonl(w.task_dir("sr-t") / f"{code}.jsonl")
        assert len(rows) == 25  # max_pairs of the fixture spec (30 pairs in the files)
        assert all(r["id"] in pivot and r["id"].startswith(code + "/") for r in rows)
        assert lc.detect_script(rows[0]["text"]) == code[4:]
    srb = w.task_meta("sr-b")
    assert srb["comparable_to_papers"] is True
    english = {r["id"]: r["text"] for r in read_jsonl(w.task_dir("sr-b") / "eng_Latn.jsonl")}
    for code in ("tur_Latn", "kat_Geor", "yue_Hani", "jpn_Jpan"):
        rows = read_jsonl(w.task_dir("sr-b") / f"{code}.jsonl")
        assert len(rows) == 20 and all(r["id"] in english for r in rows)  # max_verses; aligned by verse id
        assert [r["id"] for r in rows] == sorted(r["id"] for r in rows)
    assert srb["languages"]["yue_Hani"]["file"] == "yue-x-bible-fixture.txt"  # not the Latin-script edition
    assert srb["languages"]["jpn_Jpan"]["shared_verses"] == 34
    # English queries come from the edition with the most verses
    assert english[next(iter(english))] and len(english) >= 20


def test_fixture_world_cpt_and_mlm(fixture_world):
    w = fixture_world
    stats = w.manifest["stats"]["cpt"]
    for code in ("eng_Latn", "tur_Latn", "kat_Geor", "yue_Hani", "jpn_Jpan"):
        cpt = read_lines(w.resource_path(f"cpt/{code}.txt"))
        held = read_lines(w.task_dir("mlm") / f"{code}.txt")
        assert 0 < len(cpt) <= 45 and held
        assert read_lines(w.resource_path(f"text/{code}.txt")) == cpt
        assert stats[code]["used_rows"] <= 45
    meta = w.task_meta("mlm")["languages"]
    assert meta["tur_Latn"]["from"] == "test split" and len(read_lines(w.task_dir("mlm") / "tur_Latn.txt")) == 10
    assert meta["jpn_Jpan"]["glot500c_config"] == "jpn_Japn" and meta["eng_Latn"]["from"] == "last 8 train rows"
    # the CPT text is the first N train rows; held-out rows come from the end, never from the first N
    from harness.worlds.glot500 import loaders as ld

    g = FIX / "hub/cis-lmu/Glot500"
    assert read_lines(w.resource_path("cpt/kat_Geor.txt")) == list(ld.iter_glot500c(g, "kat_Geor", stop=45))
    assert read_lines(w.task_dir("mlm") / "kat_Geor.txt") == list(ld.iter_glot500c(g, "kat_Geor", start=45))


def test_pos_from_a_conllu_release_and_missing_languages(tmp_path, monkeypatch):
    """format = "conllu" (Glot500's UD 2.11 data with fused forms), here from a .tgz extracted with path checks."""
    import tarfile

    from harness.core.errors import MissingResourceError
    from harness.worlds.glot500.builder import _Build

    tgz = tmp_path / "ud-treebanks-v2.11.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(FIX / "ud-treebanks-v2.11", arcname="ud-treebanks-v2.11")
    over = tmp_path / "over.toml"
    over.write_text(f'[inputs.ud]\nformat = "conllu"\nconllu_path = "{tgz}"\n'
                    '[languages]\npos = ["eng_Latn", "tur_Latn"]\n')
    monkeypatch.setenv("HARNESS_GLOT500_SPEC", str(over))
    world = Glot500World("glot500-fixture", FIXTURE_SPEC)
    assert next(r for r in world.check() if r.name.startswith("POS")).present
    out = tmp_path / "w"
    _Build(world, world.spec, out).pos()
    meta = json.loads((out / "tasks/pos/meta.json").read_text())
    assert meta["languages"]["eng_Latn"]["sentences"] == {"train": 8, "dev": 8, "test": 6}
    assert "fused forms" in meta["tokenization"]
    train = read_jsonl(out / "tasks/pos/eng_Latn/train.jsonl")
    assert any("cannot" in r["tokens"] for r in train) and not any("can" in r["tokens"] for r in train)
    assert not (out / ".ud-extract").exists()
    over.write_text(f'[inputs.ud]\nformat = "conllu"\nconllu_path = "{FIX / "ud-treebanks-v2.11"}"\n'
                    '[languages]\npos = ["eng_Latn", "jpn_Jpan"]\n')
    row = next(r for r in world.check() if r.name.startswith("POS"))
    assert not row.present and "ja" in row.where
    with pytest.raises(MissingResourceError, match="world.exclude.pos"):
        _Build(world, world.spec, tmp_path / "w2").pos()


def test_fixture_world_word_vectors(fixture_world):
    lines = fixture_world.resource_path("word_vectors.vec").read_text(encoding="utf-8").splitlines()
    n, dim = map(int, lines[0].split())
    assert n == len(lines) - 1 and dim == 16
    keys = {ln.split(" ", 1)[0] for ln in lines[1:]}
    assert {"book", "tur:kitap", "jpn:本", "kat:წიგნი"} <= keys


def test_fixture_build_is_deterministic(fixture_world, tmp_path):
    from harness.worlds import WORLDS
    from harness.worlds.base import load_world_dir

    out = tmp_path / "again"
    out.mkdir()
    WORLDS.get("glot500-fixture").build(out)
    again = load_world_dir("glot500-fixture", out)
    assert again.hash == fixture_world.hash
    for rel in ("tasks/sr-b/kat_Geor.jsonl", "tasks/pos/eng_Latn/train.jsonl", "resources/word_vectors.vec"):
        assert (out / rel).read_bytes() == (fixture_world.root / rel).read_bytes(), rel


def test_fixture_generator_reproduces_the_committed_files(tmp_path):
    """make_fixtures.py re-run: same files, same content (tables compared by value, models by tensors)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.make_fixtures(tmp_path / "fx")
    committed = {p.relative_to(FIX) for p in FIX.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    fresh = {p.relative_to(out) for p in out.rglob("*") if p.is_file()}
    assert fresh == committed - {Path("make_fixtures.py")}
    import datasets
    from safetensors.numpy import load_file

    for rel in sorted(fresh):
        a, b = FIX / rel, out / rel
        if rel.suffix == ".parquet":
            assert datasets.Dataset.from_parquet(str(a)).to_list() == datasets.Dataset.from_parquet(str(b)).to_list()
            assert datasets.Dataset.from_parquet(str(a)).features == datasets.Dataset.from_parquet(str(b)).features
        elif rel.suffix == ".arrow":
            assert datasets.Dataset.from_file(str(a)).to_list() == datasets.Dataset.from_file(str(b)).to_list()
        elif rel.suffix == ".safetensors":
            ta, tb = load_file(a), load_file(b)
            assert ta.keys() == tb.keys() and all((ta[k] == tb[k]).all() for k in ta)
        elif rel.name in ("state.json", "dataset_info.json"):
            continue  # hold a fingerprint of the writing library
        elif rel.name == "spec.toml":
            assert tomllib.loads(a.read_text()) == tomllib.loads(b.read_text())
        elif rel.suffix == ".json":  # by value, without the fields that only stamp the writing library's version
            assert _unstamped(json.loads(a.read_text())) == _unstamped(json.loads(b.read_text())), rel
        elif rel.suffix == ".npy":
            np.testing.assert_array_equal(np.load(a, allow_pickle=False), np.load(b, allow_pickle=False))
        elif rel.suffix == ".model":  # a SentencePiece model: the same pieces, scores and types
            assert _spm_pieces(a) == _spm_pieces(b), rel
        else:  # written by our own code (text, conllu, the gensim pickle): bytes
            assert a.read_bytes() == b.read_bytes(), rel


STAMPS = frozenset({"transformers_version"})  # fields a library writes to say which version wrote the file


def _unstamped(obj):
    if isinstance(obj, dict):
        return {k: _unstamped(v) for k, v in obj.items() if k not in STAMPS}
    if isinstance(obj, list):
        return [_unstamped(v) for v in obj]
    return obj


def _spm_pieces(path):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(path))
    return [(sp.id_to_piece(i), sp.get_score(i), sp.is_control(i), sp.is_unknown(i)) for i in range(sp.get_piece_size())]


def test_json_comparison_ignores_only_version_stamps():
    a = {"transformers_version": "5.23.0", "hidden_size": 8, "nested": [{"transformers_version": "x", "a": 1}]}
    assert _unstamped(a) == {"hidden_size": 8, "nested": [{"a": 1}]}
    assert _unstamped(a) != _unstamped({**a, "hidden_size": 9})


@pytest.mark.slow
def test_harness_run_on_the_fixture_world_end_to_end(run_cli, tracking_uri):
    """The brief's command: random and OFA, every task, 2 CPT steps, offline, through the real CLI."""
    from mlflow.tracking import MlflowClient

    exp = "glot500-fixture-e2e"
    r = run_cli("run", "--world", "glot500-fixture", "--methods", "random,ofa", "--tasks", "sr-b,sr-t,ner,pos,mlm",
                "--cpt-steps", "2", "--seeds", "1", "--experiment", exp, env={"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    c = MlflowClient(tracking_uri)
    runs = c.search_runs([c.get_experiment_by_name(exp).experiment_id])
    cells = [x for x in runs if x.data.tags.get("harness.kind") == "cell"]
    assert {x.data.params["method"] for x in cells} == {"random", "ofa"}
    assert all(x.info.status == "FINISHED" for x in runs)
    metrics = set().union(*(x.data.metrics for x in runs))
    from harness.core.record import metric_key

    for key in (("sr-b", "acc@10", "kat_Geor"), ("sr-t", "acc@10", "jpn_Jpan"), ("ner", "f1", "yue_Hani"),
                ("pos", "f1", "tur_Latn"), ("mlm", "loss", "eng_Latn"), ("cpt", "train_loss")):
        assert metric_key(*key) in metrics, key
    ofa = next(x for x in cells if x.data.params["method"] == "ofa")
    assert ofa.data.metrics["init/method"] > 0  # ColexNet+ keys reached target tokens


# -- reference tables -------------------------------------------------------------------------------------------------
def test_reference_transcribed_cells():
    sr_b = ref.reference_scores("sr-b", "mono-100")
    assert sr_b["random"]["tur_Latn"] == 5.2 and sr_b["hyperofa"]["dtp_Latn"] == 2.6
    assert "eng_Latn" not in sr_b["ofa"] and "jpn_Jpan" not in sr_b["ofa"]  # "-" in the paper
    assert ref.reference_scores("sr-t", "multi-400", step=4000)["ofa"]["yue_Hani"] == 59.4
    assert ref.reference_scores("pos", "multi-400")["hyperofa"]["gla_Latn"] == 33.6
    ner = ref.reference_scores("ner", "mono-100", step=4000)
    assert ner["ofa"]["eng_Latn"] == 80.5 and len(ner["ofa"]) == 14
    pos_mono = ref.reference_scores("pos", "mono-100")
    assert set(pos_mono["random"]) == {"eng_Latn", "tur_Latn", "ell_Grek", "bul_Cyrl", "ces_Latn", "kor_Hang",
                                       "khm_Khmr", "yue_Hani", "kab_Latn"}  # as printed (spec 7.7)
    frac = ref.reference_scores("sr-t", "mono-100", as_fraction=True)
    assert frac["random"]["fry_Latn"] == pytest.approx(0.197)
    with pytest.raises(Exception, match="mono-100 and multi-400"):
        ref.reference_scores("sr-t", "multi-200")


def test_reference_averages():
    assert ref.reference_averages("sr-t", "multi-400", step=4000) == {"hyperofa": 56.1, "ofa": 55.8, "random": 55.3}
    assert ref.reference_averages("pos", "mono-200") == {"random": 23.1, "ofa": 23.4, "hyperofa": 23.4}  # Table 3
    assert ref.reference_averages("ner", "multi-400", table=3)["hyperofa"] == 43.5
    assert ref.reference_averages("ner", "multi-400", table=3, doc="001")["hyperofa"] == 42.6  # report version
    assert ref.reference_averages("ner", "multi-400", step=0)["hyperofa"] == 47.5  # Table 4 (CPT languages)
    assert ref.model_setting("FacebookAI/roberta-base", 100) == "mono-100"
    assert ref.model_setting("xlm-roberta-base", "400") == "multi-400"  # dims come back from MLflow as strings
    assert ref.model_setting("xlm-roberta-base", "full") is None and ref.model_setting("bert", 100) is None
    import harness.worlds.glot500 as pkg  # what leaderboard/papers.py imports

    assert pkg.reference_scores is ref.reference_scores and pkg.model_setting is ref.model_setting
    with pytest.raises(Exception, match="steps 0 and 4000"):
        ref.reference_scores("ner", "multi-400", step=10)  # no published figures at other CPT steps
    table3 = [c for c in ref.average_cells() if c.table == 3 and c.doc == "000"]
    assert len(table3) == 18 * 4


def test_reference_table4_matches_the_per_language_means_except_flagged_cells():
    """Recomputing Table 4 from Tables 8-15 reproduces it to rounding, except the flagged cells."""
    bad = []
    for c in ref.average_cells():
        if c.table != 4:
            continue
        per = ref.reference_scores(c.task, c.model_setting, step=c.step)[c.method]
        mean = sum(per.values()) / len(per)
        expected_n = {"sr-t": 20, "sr-b": 20, "ner": 14, "pos": 9}[c.task]
        assert len(per) == expected_n, (c, len(per))  # the Table 4 caption's language counts
        if abs(mean - c.value) > 0.05 + 1e-9:
            bad.append((c.task, c.model_setting, c.method, c.step))
            assert c.flagged and "FLAG: printed" in c.note, c
    assert sorted(bad) == [("pos", "multi-400", "hyperofa", 4000), ("sr-t", "multi-400", "ofa", 4000)]
    assert {(c.task, c.model_setting, c.method, c.step) for c in ref.flagged_cells()
            if "FLAG: printed" in c.note} == set(bad)


def test_reference_files_are_well_formed():
    cells = ref.per_language_cells()
    assert len(cells) == 8 * 22 * 6  # Tables 8-15: 22 languages x 6 columns
    assert {c.table for c in cells} == set(range(8, 16))
    keys = [(c.table, c.method, c.step, c.lang) for c in cells]
    assert len(keys) == len(set(keys))
    assert all(0 <= c.value <= 100 for c in cells if c.value is not None)
    data = json.dumps([c.__dict__ for c in ref.average_cells()])
    assert "Liu et al. (2024a)" in data  # OFA rows of Table 3 are marked as copied


def test_tatoeba_column_order_is_checked():
    from harness.worlds.glot500.builder import _check_direction
    from harness.worlds.glot500.loaders import SchemaError, read_tatoeba

    pairs = read_tatoeba(FIX / "hub/mteb/tatoeba-bitext-mining", "kat", "mteb")
    _check_direction(pairs, "kat_Geor", "kat-eng")
    with pytest.raises(SchemaError, match="not in the expected order"):
        _check_direction([(e, x) for x, e in pairs], "kat_Geor", "kat-eng")


def _cache_repo(hub: Path, repo_type: str, hub_id: str, revision: str, src: Path) -> str:
    """Put ``src``'s files into a Hub-cache layout (blobs + snapshot symlinks + refs), as `hf download` does."""
    import hashlib
    import os

    commit = revision if len(revision) == 40 else hashlib.sha1(f"{hub_id}@{revision}".encode()).hexdigest()
    folder = hub / f"{repo_type}s--{hub_id.replace('/', '--')}"
    for f in sorted(p for p in src.rglob("*") if p.is_file()):
        data = f.read_bytes()
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        dst = folder / "snapshots" / commit / f.relative_to(src)
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(blob, dst.parent), dst)
    if revision != commit:
        ref = folder / "refs" / revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(commit)
    return commit


def test_world_builds_offline_from_the_hub_cache(tmp_path, monkeypatch):
    """Every Hub input only in the Hub cache (no paths), HF_HUB_OFFLINE=1: check passes and the world builds,
    recording the snapshot commits."""
    from harness.worlds.base import load_world_dir

    hub = tmp_path / "hub"
    spec = tomllib.loads(FIXTURE_SPEC.read_text())
    commits = {}
    for key, section, kind in (("xlmr", spec["sources"]["xlm-roberta-base"], "model"),
                               ("tok", spec["target_tokenizer"], "model"),
                               *((k, spec["inputs"][k], "dataset") for k in ("wikiann", "ud", "tatoeba", "glot500c"))):
        commits[key] = _cache_repo(hub, kind, section["hub_id"], section["revision"], FIX / section["path"])
    over = tmp_path / "over.toml"
    over.write_text('[sources.xlm-roberta-base]\npath = ""\n[target_tokenizer]\npath = ""\n' +
                    "".join(f'[inputs.{k}]\npath = ""\n' for k in ("wikiann", "ud", "tatoeba", "glot500c")))
    monkeypatch.setenv("HARNESS_GLOT500_SPEC", str(over))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    world = Glot500World("glot500-cached", FIXTURE_SPEC)
    rows = world.check()
    assert all(r.present for r in rows), [(r.name, r.where) for r in rows if not r.present]
    assert "every input is present" in rows[0].where and str(hub) in rows[2].where
    out = tmp_path / "built"
    out.mkdir()
    world.build(out)
    w = load_world_dir("glot500-cached", out)
    inputs = {i["name"]: i for i in w.manifest["inputs"]}
    assert inputs["unimelb-nlp/wikiann"]["commit"] == commits["wikiann"] == spec["inputs"]["wikiann"]["revision"]
    assert inputs["cis-lmu/Glot500"]["commit"] == commits["glot500c"] and inputs["cis-lmu/Glot500"]["path"] is None
    assert inputs["universal-dependencies/universal_dependencies"]["revision"] == "refs/convert/parquet"
    assert len(read_jsonl(out / "tasks/ner/eng_Latn/train.jsonl")) == 60
    # a partial cache: one Glot500-c config gone -> check names it, build refuses with the command to fetch it
    snap = hub / "datasets--cis-lmu--Glot500" / "snapshots" / commits["glot500c"]
    shutil.rmtree(snap / "kat_Geor")
    row = next(r for r in world.check() if r.name.startswith("CPT"))
    assert not row.present and "kat_Geor" in row.where and row.how.endswith("--include 'kat_Geor/*'")
    from harness.core.errors import MissingResourceError

    with pytest.raises(MissingResourceError, match="kat_Geor"):
        world.build(tmp_path / "again")
