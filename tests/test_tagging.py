"""Tagging (ner, pos): labels on each word's first non-marker sub-token, fine-tuning that learns, model selection,
caching, determinism."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

import tasks.tagging as tagging
from harness.core.errors import ConfigError, MissingResourceError
from harness.core.registry import TASKS
from harness.core.tokenization import make_xlmr_tokenizer, xlmr_vocab
from harness.worlds.base import load_world_dir
from harness.worlds.writer import write_jsonl
from tasks.base import Task, TaskSettings
from tasks.data import TaggedSentence, batches_per_epoch, read_tagging_split, shuffled_length_batches
from tasks.metrics import pos_scores, token_accuracy
from tasks.tagger import IGNORE, marker_ids
from tasks.tagging import PROFILES, Featurizer

N_WORDS = 60
LANGS = ("eng_Latn", "deu_Latn")


pytestmark = pytest.mark.usefixtures("private_hf_home")


@pytest.fixture(scope="module")
def tok():
    pieces = [(f"▁w{i}", -2.0) for i in range(N_WORDS)] + [(c, -6.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    return make_xlmr_tokenizer(xlmr_vocab(pieces + [("▁", -4.0)]))


def tiny_model(vocab: int, seed: int = 0) -> XLMRobertaForMaskedLM:
    torch.manual_seed(seed)  # model construction only; the code under test never touches the global RNG
    cfg = XLMRobertaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=130, pad_token_id=1)
    return XLMRobertaForMaskedLM(cfg).eval()


# tag = f(word): the rule a tagger must learn
def ner_tag(i: int) -> str:
    return ("B-PER", "B-LOC", "B-ORG")[i // 10] if i < 30 else "O"


def pos_tag(i: int) -> str:
    return ("NOUN", "VERB", "DET")[i // 20]


def ner_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    ids: list[int] = []
    for _ in range(rng.randint(4, 10)):
        entity = rng.random() < 0.35 and not (ids and ids[-1] < 30)  # single-word entities, never adjacent
        ids.append(rng.randrange(30) if entity else rng.randrange(30, N_WORDS))
    return [f"w{i}" for i in ids], [ner_tag(i) for i in ids]


def pos_sentence(rng: random.Random) -> tuple[list[str], list[str]]:
    ids = [rng.randrange(N_WORDS) for _ in range(rng.randint(4, 10))]
    return [f"w{i}" for i in ids], [pos_tag(i) for i in ids]


def make_world(root: Path, *, shuffle_train_labels: bool = False, n_train: int = 240) -> object:
    rng = random.Random(7)
    for task, gen in (("ner", ner_sentence), ("pos", pos_sentence)):
        d = root / "tasks" / task
        splits = {"train": n_train, "dev": 60, "test": 60}
        for lang in LANGS:
            for split, n in splits.items():
                if lang != "eng_Latn" and split != "test":
                    continue
                rows = [dict(zip(("tokens", "tags"), gen(rng), strict=True)) for _ in range(n)]
                if split == "train" and shuffle_train_labels:  # same tags, no relation to the words
                    flat = [t for r in rows for t in r["tags"]]
                    random.Random(3).shuffle(flat)
                    for r in rows:
                        r["tags"], flat = flat[:len(r["tags"])], flat[len(r["tags"]):]
                write_jsonl(d / lang / f"{split}.jsonl", rows)
        meta = {"languages": {"eng_Latn": {"label_source": "gold"}, "deu_Latn": {"label_source": "silver"}}}
        (d / "meta.json").write_text(json.dumps(meta))
    (root / "manifest.json").write_text(json.dumps({"name": "tiny", "pivot_language": "eng_Latn",
                                                    "sources": {"tiny": {}}}))
    (root / "languages.json").write_text(json.dumps({c: {"script": "Latn"} for c in LANGS}))
    return load_world_dir("tiny", root)


FAST = {"epochs": 4, "lr": 3e-3, "batch_size": 16, "max_length": 64, "eval_every": 25}


# -- features ---------------------------------------------------------------------------------------------------
def test_labels_sit_on_the_first_non_marker_sub_token(tok):
    sent = TaggedSentence(["w1", "zz9", "w2"], ["B-PER", "O", "B-LOC"])
    pieces = tok(["w1", "zz9", "w2"], add_special_tokens=False)["input_ids"]
    assert [tok.convert_ids_to_tokens(p) for p in pieces] == [["▁w1"], ["▁", "z", "z", "9"], ["▁w2"]]
    feat = Featurizer(tok, 64)  # default: first-nonmarker
    (seg,) = feat.segments([sent], {"O": 0, "B-PER": 1, "B-LOC": 2})
    assert seg.input_ids == [tok.cls_token_id, *pieces[0], *pieces[1], *pieces[2], tok.sep_token_id]
    assert seg.labels == [IGNORE, 1, IGNORE, 0, IGNORE, IGNORE, 2, IGNORE]  # zz9's label on "z", not on "▁"
    assert feat.label_positions(seg, sent, 0) == [1, 3, 6]
    # the reference rule: the first sub-token, whatever it is
    first = Featurizer(tok, 64, "first")
    (seg,) = first.segments([sent], {"O": 0, "B-PER": 1, "B-LOC": 2})
    assert seg.labels == [IGNORE, 1, 0, IGNORE, IGNORE, IGNORE, 2, IGNORE]
    assert first.label_positions(seg, sent, 0) == [1, 2, 6]
    with pytest.raises(ConfigError, match="label_subtoken"):
        Featurizer(tok, 64, "middle")


CJK_LINES = ["東京は日本の首都です。", "南アフリカ共和国の大統領が来日した。", "山田さんは大阪に住んでいます。",
             "今年は雨が多い年でした。", "北京是中国的首都。", "上海是一个大城市。", "我们明天去北京。",
             "他在上海工作了三年。"]


@pytest.fixture(scope="module")
def cjk_tok():
    """A SentencePiece Unigram tokenizer learned on a few lines of Japanese and Chinese (no spaces), in the XLM-R
    layout as the worlds build their target tokenizers: a word tokenized alone starts with a bare ``▁``."""
    from harness.core.tokenization import train_unigram

    return make_xlmr_tokenizer(xlmr_vocab(train_unigram(CJK_LINES * 3, 80)))


@pytest.mark.parametrize("words, tags", [
    (["年", "南アフリカ", "の", "東京"], ["O", "B-LOC", "O", "B-LOC"]),  # Japanese
    (["北京", "是", "中国", "的", "首都"], ["B-LOC", "O", "B-LOC", "O", "O"]),  # Chinese
])
def test_words_without_spaces_are_labelled_after_the_bare_marker(cjk_tok, words, tags):
    marker = cjk_tok.convert_tokens_to_ids("▁")
    pieces = [cjk_tok.convert_ids_to_tokens(p) for p in cjk_tok(words, add_special_tokens=False)["input_ids"]]
    assert all(p[0] == "▁" and len(p) > 1 for p in pieces), pieces  # every word: a bare "▁", then the word
    label_ids = {"O": 0, "B-LOC": 1}
    sent = TaggedSentence(words, tags)
    feat = Featurizer(cjk_tok, 64)
    (seg,) = feat.segments([sent], label_ids)
    expected, pos = [], 1  # after <s>
    for p in pieces:
        expected.append(pos + 1)  # the sub-token right after the marker
        pos += len(p)
    assert feat.label_positions(seg, sent, 0) == expected
    assert [i for i, lab in enumerate(seg.labels) if lab != IGNORE] == expected
    assert [seg.labels[i] for i in expected] == [label_ids[t] for t in tags]
    assert all(seg.input_ids[i] != marker for i in expected)
    # the reference rule puts every label on a "▁"
    (old,) = Featurizer(cjk_tok, 64, "first").segments([sent], label_ids)
    assert all(old.input_ids[i] == marker for i, lab in enumerate(old.labels) if lab != IGNORE)


class _MarkerSpotter(torch.nn.Module):
    """A stand-in tagger: label 1 on every bare-marker position, label 0 elsewhere."""

    training = False

    def __init__(self, marker: int):
        super().__init__()
        self.marker = marker

    def forward(self, input_ids, attention_mask):
        is_marker = (input_ids == self.marker).long()
        return torch.nn.functional.one_hot(is_marker, 2).float()


def test_predictions_are_read_where_the_labels_were_put(cjk_tok):
    sents = [TaggedSentence(["年", "南アフリカ", "の"], ["O"] * 3), TaggedSentence(["北京", "是", "首都"], ["O"] * 3)]
    spotter = _MarkerSpotter(cjk_tok.convert_tokens_to_ids("▁"))
    for mode, tag in (("first-nonmarker", "O"), ("first", "MARK")):
        pred = tagging.predict(spotter, Featurizer(cjk_tok, 64, mode), sents, ["O", "MARK"], batch_size=4,
                               pad_id=cjk_tok.pad_token_id, device=torch.device("cpu"))
        assert pred == [[tag] * 3, [tag] * 3], mode
    # a long sentence split into segments keeps reading the labelled sub-tokens
    long = [TaggedSentence(["年", "南アフリカ", "の", "東京"] * 6, ["O"] * 24)]
    feat = Featurizer(cjk_tok, 12)
    assert len(feat.segments(long, None)) > 1
    assert tagging.predict(spotter, feat, long, ["O", "MARK"], batch_size=4, pad_id=cjk_tok.pad_token_id,
                           device=torch.device("cpu")) == [["O"] * 24]


def test_wordpiece_and_byte_level_markers():
    from transformers import BertTokenizer

    bert = BertTokenizer(vocab={t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "w", "##x"])})
    assert marker_ids(bert) == frozenset()  # WordPiece has no bare word-boundary token
    xlmr = make_xlmr_tokenizer(xlmr_vocab([("▁", -1.0), ("a", -2.0), ("Ġ", -3.0)]))
    assert marker_ids(xlmr) == {xlmr.convert_tokens_to_ids("▁"), xlmr.convert_tokens_to_ids("Ġ")}


def test_long_sentences_are_split_at_word_boundaries(tok):
    feat = Featurizer(tok, 6)  # room for 4 sub-tokens between <s> and </s>
    sent = TaggedSentence(["w1", "zz9", "w2", "w3", "w4", "w5"], ["O"] * 6)
    segs = feat.segments([sent], {"O": 0})
    assert [s.n_words for s in segs] == [1, 1, 4]  # zz9 (4 pieces) fits alone
    assert all(len(s.input_ids) <= 6 for s in segs)
    assert sum(lab == 0 for s in segs for lab in s.labels) == 6  # every word labelled once


# -- profiles ---------------------------------------------------------------------------------------------------
def test_profiles_and_overrides():
    ner, pos = TASKS.get("ner")(), TASKS.get("pos")()
    paper = ner.hyperparameters(TaskSettings(profile="paper"))
    assert (paper["epochs"], paper["lr"], paper["batch_size"], paper["max_length"]) == (10, 2e-5, 32, 256)
    assert (paper["adam_eps"], paper["weight_decay"], paper["warmup_steps"], paper["grad_clip"]) == (1e-8, 0, 0, 1.0)
    assert paper["eval_every"] == 1000 and paper["seed"] == 1
    assert pos.hyperparameters(TaskSettings(profile="paper"))["eval_every"] == 500
    cpu = ner.hyperparameters(TaskSettings(profile="cpu", seed=5, params={"epochs": 1}))
    assert cpu["epochs"] == 1 and cpu["seed"] == 5 and cpu["max_train_sentences"] == PROFILES["cpu"]["max_train_sentences"]
    with pytest.raises(ConfigError, match="unknown profile"):
        ner.hyperparameters(TaskSettings(profile="gpu"))
    with pytest.raises(ConfigError, match="unknown param"):
        ner.hyperparameters(TaskSettings(params={"learning_rate": 1e-3}))
    assert ner.hyperparameters(TaskSettings(params={"lr": "3e-5"}))["lr"] == 3e-5
    with pytest.raises(ConfigError, match="lr"):
        ner.hyperparameters(TaskSettings(params={"lr": "fast"}))
    with pytest.raises(ConfigError, match="epochs"):
        ner.hyperparameters(TaskSettings(params={"epochs": 0}))
    # which sub-token carries a word's label is a protocol setting, resolved with the others (and so logged and
    # part of the tagger's cache key)
    for prof in ("paper", "cpu"):
        assert ner.hyperparameters(TaskSettings(profile=prof))["label_subtoken"] == "first-nonmarker"
    assert pos.hyperparameters(TaskSettings(params={"label_subtoken": "first"}))["label_subtoken"] == "first"
    with pytest.raises(ConfigError, match="label_subtoken"):
        ner.hyperparameters(TaskSettings(params={"label_subtoken": "middle"}))


def test_tasks_are_registered_and_follow_the_contract():
    for name, metrics in (("ner", {"f1", "precision", "recall"}), ("pos", {"f1", "acc"})):
        t = TASKS.get(name)()
        assert isinstance(t, Task) and t.name == name and t.headline == "f1" and set(t.metrics) == metrics


# -- fine-tuning ------------------------------------------------------------------------------------------------
def test_ner_learns_the_rule_and_shuffled_labels_do_not(tmp_path, tok):
    world = make_world(tmp_path / "real")
    task = TASKS.get("ner")()
    assert task.languages(world) == list(sorted(LANGS))
    model = tiny_model(len(tok))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = torch.random.get_rng_state()
    res = task.evaluate(model, tok, world, list(LANGS), TaskSettings(params=FAST))
    assert torch.equal(state, torch.random.get_rng_state())  # the global RNG is untouched
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # the evaluated model too

    shuffled = make_world(tmp_path / "shuffled", shuffle_train_labels=True)
    res_sh = task.evaluate(tiny_model(len(tok)), tok, shuffled, list(LANGS), TaskSettings(params=FAST))
    best, best_sh = res.extras["best"]["f1"], res_sh.extras["best"]["f1"]
    assert best > 0.8, res.extras["dev_curve"]
    assert best_sh < 0.5 and best - best_sh > 0.4
    assert res.scores["f1"]["deu_Latn"] > 0.8  # zero-shot on the same rule
    assert set(res.scores) == {"f1", "precision", "recall"}

    curve = res.extras["dev_curve"]
    steps_per_epoch = -(-240 // 16)
    assert [p["step"] for p in curve] == sorted({*range(25, 4 * steps_per_epoch + 1, 25),
                                                 *(steps_per_epoch * e for e in range(1, 5))})
    assert res.extras["best"]["f1"] == max(p["dev_f1"] for p in curve)
    assert res.extras["n_sentences"] == {"eng_Latn": 60, "deu_Latn": 60}
    assert (res.extras["n_train"], res.extras["n_dev"], res.extras["train_language"]) == (240, 60, "eng_Latn")
    assert res.label_source == {"eng_Latn": "gold", "deu_Latn": "silver"}
    assert res.extras["hyperparameters"]["label_subtoken"] == "first-nonmarker"  # reported with the run


def test_selected_tagger_is_the_best_dev_checkpoint(tmp_path, tok):
    # a scripted dev score: the best point is the second of five evaluations, the tagger must end with its weights
    world = make_world(tmp_path, n_train=64)
    train = read_tagging_split(world, "ner", "eng_Latn", "train")
    dev = read_tagging_split(world, "ner", "eng_Latn", "dev")
    labels = sorted({t for s in train + dev for t in s.tags})
    tagger = tagging.build_tagger(tiny_model(len(tok)), len(labels), None, 1, torch.device("cpu"))
    script = iter([0.2, 0.9, 0.5, 0.9, 0.3])
    snapshots = []

    def score(pred, gold):
        snapshots.append({k: v.clone() for k, v in tagger.state_dict().items()})
        return {"f1": next(script)}

    hp = {**tagging.PROFILES["cpu"], **FAST, "epochs": 5, "eval_every": None, "seed": 1}
    fit = tagging.fine_tune(tagger, Featurizer(tok, 64), train, dev, labels, score, hp, seed=1, pad_id=1,
                            device=torch.device("cpu"))
    assert [p["dev_f1"] for p in fit.curve] == [0.2, 0.9, 0.5, 0.9, 0.3]
    assert fit.best["step"] == fit.curve[1]["step"] and fit.best["f1"] == 0.9  # the first of equal bests
    final = tagger.state_dict()
    assert all(torch.equal(final[k], v) for k, v in snapshots[1].items())
    assert not all(torch.equal(final[k], v) for k, v in snapshots[-1].items())
    assert not tagger.training


def test_pos_reports_the_papers_f1_and_token_accuracy(tmp_path, tok, monkeypatch):
    world = make_world(tmp_path)
    outputs = []
    real_predict = tagging.predict

    def spy(*a, **kw):
        outputs.append(real_predict(*a, **kw))
        return outputs[-1]

    monkeypatch.setattr(tagging, "predict", spy)
    task = TASKS.get("pos")()
    good = task.evaluate(tiny_model(len(tok)), tok, world, ["deu_Latn"], TaskSettings(params=FAST))
    assert set(good.scores) == {"f1", "acc"}
    assert good.scores["acc"]["deu_Latn"] > 0.8
    # an under-trained tagger: the two metrics part ways, each as defined
    outputs.clear()
    weak = task.evaluate(tiny_model(len(tok)), tok, world, ["deu_Latn"],
                         TaskSettings(params={**FAST, "epochs": 1, "lr": 2e-3}))
    gold = [s.tags for s in read_tagging_split(world, "pos", "deu_Latn", "test")]
    pred = outputs[-1]  # the test-set prediction comes after the dev evaluations
    assert len(pred) == len(gold)
    assert weak.scores["f1"]["deu_Latn"] == pytest.approx(pos_scores(pred, gold)["f1"])
    assert weak.scores["acc"]["deu_Latn"] == pytest.approx(token_accuracy(pred, gold))
    assert weak.scores["acc"]["deu_Latn"] < 1.0
    assert weak.scores["f1"]["deu_Latn"] != pytest.approx(weak.scores["acc"]["deu_Latn"])


def test_fine_tuning_is_deterministic(tmp_path, tok):
    world = make_world(tmp_path, n_train=64)
    task = TASKS.get("ner")()
    params = {**FAST, "epochs": 2}
    a = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), TaskSettings(params=params))
    b = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), TaskSettings(params=params))
    assert a.scores == b.scores
    assert a.extras["dev_curve"] == b.extras["dev_curve"]
    c = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), TaskSettings(seed=2, params=params))
    assert c.extras["dev_curve"] != a.extras["dev_curve"]  # the seed matters


def test_tagger_and_scores_are_cached(tmp_path, tok, monkeypatch):
    world = make_world(tmp_path, n_train=64)
    task = TASKS.get("ner")()
    params = {**FAST, "epochs": 2}
    settings = TaskSettings(params=params, cache_dir=tmp_path / "cache", model_key="tiny-model-1")
    first = task.evaluate(tiny_model(len(tok)), tok, world, ["eng_Latn"], settings)
    assert not first.extras["tagger_cached"] and first.extras["test_cached"] == []

    def boom(*a, **kw):
        raise AssertionError("recomputed")

    with monkeypatch.context() as mp:
        mp.setattr(tagging, "fine_tune", boom)
        mp.setattr(tagging, "predict", boom)
        again = task.evaluate(tiny_model(len(tok)), tok, world, ["eng_Latn"], settings)
    assert again.scores == first.scores and again.extras["tagger_cached"]
    assert again.extras["test_cached"] == ["eng_Latn"] and again.extras["dev_curve"] == first.extras["dev_curve"]

    # a quickly trained tagger keeps its record, not its weights: a new language fine-tunes it again, and it
    # scores as the freshly trained one does
    product = tmp_path / "cache" / "tagger" / first.extras["tagger_key"]
    assert (product / "tagger.json").is_file() and not (product / tagging.WEIGHTS).exists()
    more = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), settings)
    fresh = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), TaskSettings(params=params))
    assert more.scores == fresh.scores and more.extras["tagger_cached"]
    assert more.extras["test_cached"] == ["eng_Latn"]

    # a tagger that took long to train keeps its weights, and a new language reuses them (no fine-tuning)
    monkeypatch.setattr(tagging, "KEEP_WEIGHTS_SECONDS", 0.0)
    kept = TaskSettings(params=params, cache_dir=tmp_path / "cache", model_key="tiny-model-kept")
    first_kept = task.evaluate(tiny_model(len(tok)), tok, world, ["eng_Latn"], kept)
    assert (tmp_path / "cache" / "tagger" / first_kept.extras["tagger_key"] / tagging.WEIGHTS).is_file()
    with monkeypatch.context() as mp:
        mp.setattr(tagging, "fine_tune", boom)
        more_kept = task.evaluate(tiny_model(len(tok)), tok, world, list(LANGS), kept)
    assert more_kept.scores == fresh.scores

    # another model key, profile setting or seed is another tagger
    other = task.evaluate(tiny_model(len(tok)), tok, world, ["eng_Latn"],
                          TaskSettings(params={**params, "lr": 1e-3}, cache_dir=tmp_path / "cache",
                                       model_key="tiny-model-1"))
    assert not other.extras["tagger_cached"] and other.extras["tagger_key"] != first.extras["tagger_key"]


def test_train_language_param_and_missing_data(tmp_path, tok):
    world = make_world(tmp_path, n_train=32)
    task = TASKS.get("ner")()
    with pytest.raises(MissingResourceError, match="deu_Latn/train.jsonl"):
        task.evaluate(tiny_model(len(tok)), tok, world, ["eng_Latn"],
                      TaskSettings(params={**FAST, "train_language": "deu_Latn"}))
    with pytest.raises(MissingResourceError, match="fra_Latn"):
        task.evaluate(tiny_model(len(tok)), tok, world, ["fra_Latn"], TaskSettings(params=FAST))


def test_bert_models_and_wordpiece_tokenizers(tmp_path):
    from transformers import BertConfig, BertForMaskedLM, BertTokenizer

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *(f"w{i}" for i in range(N_WORDS)), "##x"]
    bert_tok = BertTokenizer(vocab={t: i for i, t in enumerate(vocab)})
    feat = Featurizer(bert_tok, 16)
    assert (feat.prefix, feat.suffix) == ([2], [3])
    (seg,) = feat.segments([TaggedSentence(["w1", "w2x"], ["O", "B-PER"])], {"O": 0, "B-PER": 1})
    assert seg.input_ids == [2, 6, 7, 65, 3] and seg.labels == [IGNORE, 0, 1, IGNORE, IGNORE]

    world = make_world(tmp_path, n_train=120)
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=64, max_position_embeddings=64))
    res = TASKS.get("ner")().evaluate(model, bert_tok, world, ["deu_Latn"], TaskSettings(params=FAST))
    assert res.scores["f1"]["deu_Latn"] > 0.8


def test_length_grouped_batches_cover_every_item_once_and_match_the_step_count():
    """The training batches of ``group_by_length``: every index once, similar lengths inside a batch, the same
    order for the same generator, and as many batches as ``batches_per_epoch`` promises the LR schedule."""
    rng = random.Random(3)
    for n, bs in ((1, 4), (7, 4), (200, 8), (401, 8), (1000, 32)):
        lengths = [rng.randint(1, 120) for _ in range(n)]
        batches = shuffled_length_batches(lengths, bs, torch.Generator().manual_seed(5), group=10)
        assert sorted(i for b in batches for i in b) == list(range(n))
        assert all(1 <= len(b) <= bs for b in batches)
        assert len(batches) == batches_per_epoch(n, bs, grouped=True, group=10)
        assert batches == shuffled_length_batches(lengths, bs, torch.Generator().manual_seed(5), group=10)
        assert batches_per_epoch(n, bs, grouped=False) == -(-n // bs)
    # inside a mega-batch the batches are cut from a length-sorted list: each batch spans a narrow range
    lengths = list(range(400))
    random.Random(0).shuffle(lengths)
    batches = shuffled_length_batches(lengths, 8, torch.Generator().manual_seed(1), group=50)
    assert max(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) <= 7
