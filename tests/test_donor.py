"""The world's donor model in ``omp``, ``clp`` and ``clp+``: a pretrained model that owns the target vocabulary, read
instead of training the helper (spec ``methods-2026.md`` §1.6 (a), §2).

Tiny donors of each family (Llama tied and untied, a Gemma-like Llama with padding rows beyond the tokenizer, a BERT
encoder), each for a tiny target tokenizer of another kind (byte-level BPE, Unigram with byte fallback, WordPiece),
built here in a second; the source a tokenizer of yet another kind with a random table. Checked: OMP's rows are the
least-squares fit of the anchors a textbook OMP picks in the donor's table (mergekit's rule; the parity test
``tests/parity/test_donor_omp.py`` runs mergekit's own ``batch_omp``), the untied donor's output table for the
source's output table; CLP's and CLP+'s rows recomputed by hand from the donor's table; no helper trained; padding
rows dropped; specials matched by role (OMP) and by text (CLP) and counted; a donor short of rows refused in one
line; the report and the run param that say which donor served; the board's note.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from harness.core.errors import ConfigError
from methods.base import InitContext, Provenance
from methods.clp import CLPInit, CLPPlusInit
from methods.omp import OMPInit
from methods.overlap import build_mapping, mapping_cache
from tests.test_omp import greedy_omp

WORDS = ["the", "cat", "dog", "sat", "on", "mat", "a", "house", "tree", "big", "small", "red", "blue", "green",
         "run", "ran", "walk", "talk", "book", "read", "water", "fire", "stone", "river", "hill", "bird", "fish"]
TEXT = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(9)) + " és ñu" for i in range(60)]
DIM = 16


# -- tokenizers of each kind -----------------------------------------------------------------------------------
def bytelevel_bpe() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def unigram_byte_fallback() -> PreTrainedTokenizerFast:
    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0)]
    pieces += [(f"<0x{b:02X}>", -20.0) for b in range(256)]
    pieces += [("▁" + w, -2.0) for w in WORDS[:20]] + [(w, -4.0) for w in WORDS[20:]]
    pieces += [("▁", -5.0)] + [(c, -6.0) for c in sorted(set("".join(WORDS)))]
    pieces = list(dict(pieces[::-1]).items())[::-1]  # each piece once
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def wordpiece() -> PreTrainedTokenizerFast:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS[5:] + ["##s", "##ed", "##er"]
    vocab += sorted(set("".join(WORDS))) + ["##" + c for c in sorted(set("".join(WORDS)))]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                   sep_token="[SEP]", mask_token="[MASK]")


TOKENIZERS = {"bpe": bytelevel_bpe, "unigram": unigram_byte_fallback, "wordpiece": wordpiece}


@pytest.fixture(scope="module")
def toks() -> dict[str, PreTrainedTokenizerFast]:
    return {k: make() for k, make in TOKENIZERS.items()}


# -- donors of each family -------------------------------------------------------------------------------------
def save_donor(folder: Path, family: str, rows: int) -> Path:
    """A tiny model of ``family`` with ``rows`` embedding rows, saved to ``folder`` (safetensors)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(sum(map(ord, family)))
        model = _tiny_model(family, rows)
    model.save_pretrained(folder)
    return folder


def _tiny_model(family: str, rows: int) -> Any:
    if family == "bert":
        from transformers import BertConfig, BertForMaskedLM

        return BertForMaskedLM(BertConfig(vocab_size=rows, hidden_size=DIM, num_hidden_layers=1,
                                           num_attention_heads=2, intermediate_size=32))
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(vocab_size=rows, hidden_size=DIM, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=32, tie_word_embeddings=family != "llama-untied"))


def donor_tables(folder: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """The donor's tables as transformers loads the model (the oracle of methods.donor's reading by name)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    archs = " ".join(AutoConfig.from_pretrained(folder).architectures)
    model = (AutoModelForCausalLM if "CausalLM" in archs else AutoModelForMaskedLM).from_pretrained(folder)
    inp = model.get_input_embeddings().weight
    out = model.get_output_embeddings().weight
    return inp.detach().numpy().copy(), None if out is inp else out.detach().numpy().copy()


# (donor family, target tokenizer, source tokenizer, padding rows beyond the tokenizer)
CASES = {"llama-tied": ("llama-tied", "bpe", "wordpiece", 0),
         "llama-untied": ("llama-untied", "bpe", "unigram", 0),
         "gemma-like": ("gemma-like", "unigram", "bpe", 8),
         "bert": ("bert", "wordpiece", "unigram", 0)}


@pytest.fixture(scope="module")
def donors(tmp_path_factory, toks) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("donors")
    return {name: save_donor(root / name, family, len(toks[target]) + pad)
            for name, (family, target, _src, pad) in CASES.items()}


class DonorWorld:
    """A world as the methods see it, with a donor (``donor_dir``) and no CPT text (a helper cannot be trained)."""

    name = "derived"

    def __init__(self, donor: Path | None) -> None:
        self.donor_dir = donor
        self.manifest = {"donor": {"identity": "d0n0r", "path": "donor"}}

    def resource_files(self, kind: str) -> list[Path]:
        return []


def ctx_for(toks, case: str, donor: Path | None, cache: Path | None = None, **params: Any) -> InitContext:
    _family, target, source, _pad = CASES[case]
    st, tt = toks[source], toks[target]
    g = torch.Generator().manual_seed(3)
    e_s = torch.randn((len(st), 12), generator=g)
    return InitContext(source_matrix=e_s, source_tokenizer=st, target_tokenizer=tt,
                       mapping_for=mapping_cache(st, tt, None), world=DonorWorld(donor), seed=1,
                       params=dict(params), cache_dir=cache)


@pytest.fixture(autouse=True)
def no_helper_training(monkeypatch):
    """A donor means no helper is trained: training one fails the test."""
    import methods.helper_model as hm

    def refuse(*a, **k):
        raise AssertionError("the helper model was trained although the world has a donor")

    monkeypatch.setattr(hm, "train_helper", refuse)


# -- OMP -----------------------------------------------------------------------------------------------------------
def check_omp_rows(res, ctx: InitContext, donor: np.ndarray, k: int) -> int:
    """Every new row is mergekit's: OMP over the anchors (copied tokens by target id) in ``donor``, its
    coefficients on the anchors' source rows. Returns how many rows were checked."""
    n_t = len(ctx.target_tokenizer)
    mapping = build_mapping(ctx.source_tokenizer, ctx.target_tokenizer, "exact", specials="role")
    assert res.copy == mapping.copy
    anchors = sorted(mapping.copy)
    a_d = donor[anchors].astype(np.float64)
    a_s = ctx.source_matrix.double().numpy()[[mapping.copy[t] for t in anchors]]
    new = [t for t in range(n_t) if t not in mapping.copy]
    assert (res.provenance[new] == Provenance.METHOD).all()
    for t in new:
        picked, c = greedy_omp(donor[t].astype(np.float64), a_d, k)
        np.testing.assert_allclose(res.matrix[t].double().numpy(), c @ a_s[picked], rtol=1e-3, atol=1e-4)
    return len(new)


@pytest.mark.parametrize("case", list(CASES))
def test_omp_reads_the_world_donor_with_mergekits_rule(toks, donors, tmp_path, case):
    ctx = ctx_for(toks, case, donors[case], tmp_path / "methods" / "omp", k=4)
    res = OMPInit().initialize(ctx)
    inp, out = donor_tables(donors[case])
    n_t = len(ctx.target_tokenizer)
    assert check_omp_rows(res, ctx, inp[:n_t], 4) > 0
    model = res.stats["donor_model"]
    assert model["donor"] == "world donor" and model["path"] == str(donors[case])
    assert model["rows"] == n_t + CASES[case][3] and model["dim"] == DIM
    assert model["tied"] is (out is None) and model["world_identity"] == "d0n0r"
    assert res.stats["donor"]["space"] == "the world donor's input table"
    # no helper product: the helper's cache folder was never made
    assert not (tmp_path / "methods" / "helper").exists()
    if out is not None:  # the source's untied output table: the donor's output table is the donor space
        head = OMPInit().initialize(dataclasses.replace(ctx, table="output"))
        check_omp_rows(head, ctx, out[:n_t], 4)
        assert head.stats["donor"]["space"] == "the world donor's output table"
    else:  # a tied donor serves the output table with its input table
        head = OMPInit().initialize(dataclasses.replace(ctx, table="output"))
        assert torch.equal(head.matrix, res.matrix)


def test_omp_rows_are_cached_under_the_donors_identity(toks, donors, tmp_path):
    cache = tmp_path / "methods" / "omp"
    OMPInit().initialize(ctx_for(toks, "llama-tied", donors["llama-tied"], cache, k=4))
    OMPInit().initialize(ctx_for(toks, "llama-tied", donors["llama-untied"], cache, k=4))
    assert len(list((cache / "rows").glob("omp-*.npz"))) == 2


# -- CLP / CLP+ ------------------------------------------------------------------------------------------------
def sparsemax_by_hand(z: np.ndarray) -> np.ndarray:
    s = np.sort(z)[::-1]
    cums = np.cumsum(s)
    k = np.arange(1, len(z) + 1)
    support = k[1 + k * s > cums].max()
    return np.maximum(z - (cums[support - 1] - 1) / support, 0)


@pytest.mark.parametrize("plus", [False, True])
@pytest.mark.parametrize("case", ["llama-tied", "gemma-like", "bert", "llama-untied"])
def test_clp_uses_the_donors_table(toks, donors, case, plus):
    ctx = ctx_for(toks, case, donors[case])
    res = (CLPPlusInit if plus else CLPInit)().initialize(ctx)
    n_t = len(ctx.target_tokenizer)
    inp, out = donor_tables(donors[case])
    mapping = build_mapping(ctx.source_tokenizer, ctx.target_tokenizer, "exact", specials="string")
    assert res.copy == mapping.copy and mapping.copy
    overlap = sorted(mapping.copy)
    e = ctx.source_matrix.double().numpy()[[mapping.copy[t] for t in overlap]]
    for table, r in ((inp, res), *(((out, CLPPlusInit().initialize(dataclasses.replace(ctx, table="output"))),)
                                   if plus and out is not None else ())):
        h = table[:n_t].astype(np.float64)
        norm = np.linalg.norm(h, axis=1)
        unit = h / np.where(norm > 0, norm, 1.0)[:, None]  # a row of zero norm (BERT's pad row) has cosines 0
        for t in [t for t in range(n_t) if t not in mapping.copy][::3]:
            cos = unit[overlap] @ unit[t]
            if not plus and cos.sum() == 0:  # CLP's zero sum keeps the fallback
                assert r.provenance[t] == Provenance.RANDOM
                continue
            w = sparsemax_by_hand(cos) if plus else cos / cos.sum()
            np.testing.assert_allclose(r.matrix[t].double().numpy(), w @ e, rtol=1e-5, atol=1e-6)
    assert res.stats["donor_model"]["donor"] == "world donor"
    assert res.stats["helper"]["identity"] == res.stats["donor_model"]["identity"]


def test_the_hand_computed_small_case(toks, tmp_path):
    """Two new tokens and three overlapping ones, the donor's rows set by hand: CLP's weights are the cosines
    over their sum, computed here on paper."""
    st = tt = toks["wordpiece"]
    n_t = len(tt)
    folder = save_donor(tmp_path / "donor", "bert", n_t)
    from safetensors.torch import load_file, save_file

    weights = load_file(folder / "model.safetensors")
    key = "bert.embeddings.word_embeddings.weight"
    table = torch.zeros((n_t, DIM))
    table[:, 0] = 1.0  # every token points the same way ...
    a, b = tt.convert_tokens_to_ids(["house", "tree"])
    assert tt.unk_token_id not in (a, b)
    table[a, :2] = torch.tensor([0.0, 1.0])  # ... but "house", orthogonal to them all but "tree"
    table[b, :2] = torch.tensor([1.0, 1.0])
    weights[key] = table
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    keep = {t: s for t, s in build_mapping(st, tt, "exact", specials="string").copy.items() if t != a}
    ctx = ctx_for(toks, "bert", folder)
    ctx = dataclasses.replace(ctx, source_tokenizer=st, source_matrix=torch.randn((len(st), 12)),
                              mapping_for=lambda rule, **o: dataclasses.replace(
                                  build_mapping(st, tt, rule, **o), copy=keep))
    res = CLPInit().initialize(ctx)
    # cos(house, o) = 1/sqrt(2) for "tree", 0 for every other overlapping token: house is exactly tree's source row
    np.testing.assert_allclose(res.matrix[a].numpy(), ctx.source_matrix[keep[b]].numpy(), rtol=1e-6)


# -- what every method shares: precedence, padding, specials, refusal ---------------------------------------------
def test_helper_model_param_comes_before_the_world_donor(toks, donors):
    ctx = ctx_for(toks, "llama-tied", donors["llama-tied"], helper_model=str(donors["llama-untied"]))
    res = CLPInit().initialize(ctx)
    assert res.stats["donor_model"]["donor"] == "helper_model param"
    assert res.stats["donor_model"]["path"] == str(donors["llama-untied"])


def test_padding_rows_beyond_the_tokenizer_are_dropped(toks, donors, tmp_path):
    from methods.donor import donor_digest, read_donor

    n_t = len(toks["unigram"])
    inp, out, info = read_donor(donors["gemma-like"], n_t, who="omp")
    full, _ = donor_tables(donors["gemma-like"])
    assert full.shape[0] == n_t + 8 and inp.shape == (n_t, DIM) and out is None
    np.testing.assert_array_equal(inp, full[:n_t])
    assert info["rows"] == n_t + 8 and info["identity"] == donor_digest(full[:n_t], None)


@pytest.mark.parametrize("layout", ["headless", "bin"])
def test_a_checkpoint_of_another_class_or_format_is_read_by_name(toks, donors, tmp_path, layout):
    """A donor saved from its base model (``embed_tokens.weight``, no ``model.`` prefix, no head) or as
    ``pytorch_model.bin``: the same table as transformers loads it."""
    from transformers import LlamaModel

    from methods.donor import read_donor

    n_t = len(toks["bpe"])
    full = LlamaForCausalLM_from(donors["llama-tied"])
    if layout == "headless":
        base = LlamaModel(full.config)
        base.load_state_dict(full.model.state_dict())
        base.config.architectures = ["LlamaModel"]
        base.save_pretrained(tmp_path / "d")
    else:
        full.config.save_pretrained(tmp_path / "d")  # (transformers 5 writes safetensors only)
        torch.save(full.state_dict(), tmp_path / "d" / "pytorch_model.bin")
    inp, out, info = read_donor(tmp_path / "d", n_t, who="clp")
    np.testing.assert_array_equal(inp, full.get_input_embeddings().weight.detach().numpy()[:n_t])
    assert out is None and info["tied"] is True


def LlamaForCausalLM_from(folder: Path) -> Any:  # noqa: N802 - named for what it returns
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder)


@pytest.mark.parametrize("case", ["bert", "llama-untied"])
def test_specials_matched_by_role_for_omp_and_by_text_for_clp_and_counted(toks, donors, case):
    ctx = ctx_for(toks, case, donors[case])
    omp_res = OMPInit().initialize(dataclasses.replace(ctx, params={"k": 4}))
    clp_res = CLPInit().initialize(ctx)
    tt, st = ctx.target_tokenizer, ctx.source_tokenizer
    if case == "bert":  # a WordPiece target, a Unigram source
        cls, sep, unk = tt.convert_tokens_to_ids(["[CLS]", "[SEP]", "[UNK]"])
        # by role: [CLS] copies the source's <s> (bos), [SEP] its </s> (eos), [UNK] its <unk>; [PAD] and [MASK] have
        # no counterpart. By text none: "[CLS]" is no source token
        assert {t: omp_res.copy.get(t) for t in tt.all_special_ids} == {
            cls: st.bos_token_id, sep: st.eos_token_id, unk: st.unk_token_id, tt.pad_token_id: None,
            tt.mask_token_id: None}
        assert not set(tt.all_special_ids) & set(clp_res.copy)
        want = {"role": 3, "string": 0}
    else:  # a byte-level BPE target, a Unigram source: <s> and </s> by role and by text alike; <pad> by neither
        for res in (omp_res, clp_res):
            assert res.copy[tt.bos_token_id] == st.bos_token_id and res.copy[tt.eos_token_id] == st.eos_token_id
            assert tt.pad_token_id not in res.copy
        want = {"role": 2, "string": 2}
    n_t = len(tt)
    for res, by in ((omp_res, "role"), (clp_res, "string")):
        m = res.stats["matches"]
        specials = set(tt.all_special_ids)
        assert m["specials_by"] == by and m["target"] == n_t
        assert m["special"] == len(specials & set(res.copy)) == want[by]
        assert m["exact"] == len(set(res.copy) - specials) and m["exact"] > 0
        assert m["new"] == n_t - len(res.copy) == res.counts()["method"] + res.counts()["random"]


def test_a_donor_short_of_rows_is_refused_in_one_line(toks, tmp_path):
    n_t = len(toks["bpe"])
    folder = save_donor(tmp_path / "short", "llama-tied", n_t - 3)
    for method, params in ((OMPInit(), {"k": 4}), (CLPInit(), {}), (CLPPlusInit(), {})):
        with pytest.raises(ConfigError) as err:
            method.initialize(ctx_for(toks, "llama-tied", folder, **params))
        assert "\n" not in str(err.value)
        assert f"has {n_t - 3} input rows, fewer than the target tokenizer's {n_t} tokens" in str(err.value)
    with pytest.raises(ConfigError, match="not a model folder"):
        CLPInit().initialize(ctx_for(toks, "llama-tied", tmp_path))


def test_without_a_donor_the_helper_serves(toks, tmp_path):
    """A world without ``donor_dir`` trains the helper as before: here the refusal of the fixture."""
    text = tmp_path / "xxx_Latn.txt"
    text.write_text("\n".join(TEXT), encoding="utf-8")
    ctx = ctx_for(toks, "llama-tied", None, helper_objective="clm")
    ctx = dataclasses.replace(ctx, world=SimpleNamespace(name="plain", resource_files=lambda kind: [text]))
    with pytest.raises(AssertionError, match="helper model was trained"):
        CLPInit().initialize(ctx)


# -- the run's record and the board ----------------------------------------------------------------------------
def test_the_record_logs_init_donor_only_for_another_donor_than_the_trained_helper():
    from harness.core.record import TRAINED_HELPER, RunRecord
    from methods.helper_model import DONOR_TRAINED

    assert TRAINED_HELPER == DONOR_TRAINED
    logged: dict[str, Any] = {}
    tracker = SimpleNamespace(
        log_metrics=lambda *a, **k: None, log_dict=lambda *a, **k: None, mark_done=lambda *a, **k: None,
        log_params=lambda run, params: logged.update(params), log_artifact=lambda *a, **k: None)
    record = RunRecord.__new__(RunRecord)
    record.tracker = tracker
    record.done = lambda parent, what: False
    for donor, want in (("world donor", {"init.donor": "world donor"}), (DONOR_TRAINED, {}), (None, {})):
        logged.clear()
        stats = {"donor_model": {"donor": donor}} if donor else {}
        record.log_init("run", {"method_stats": stats}, {}, wall_seconds=0.0, cached=False)
        assert logged == want


def test_the_board_notes_the_donor():
    from leaderboard.cpt_notes import donor_note

    cells = {"a": SimpleNamespace(params={"init.donor": "world donor"}, init_report={
        "method_stats": {"donor_model": {"donor": "world donor", "path": "/d/gemma"}}}),
        "b": SimpleNamespace(params={}, init_report={})}
    data = SimpleNamespace(parent=lambda r: cells[r])
    groups = {"k1": ["a"], "k2": ["b"]}
    labels = {"k1": "omp d=full", "k2": "focus d=full"}
    assert donor_note(groups, labels, data) == "donor model: omp d=full: world donor (/d/gemma)"
    assert donor_note({"k2": ["b"]}, labels, data) is None
