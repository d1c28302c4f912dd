"""``harness world derive ... --trim``: the target tokenizer trimmed to the pieces the synthetic world's text uses
(byte-level BPE, Unigram with byte fallback), the donor's rows re-indexed to it; the world's tokenization unchanged,
specials and byte pieces kept, the world's identity covering the trimming, ``world info`` saying it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<mask>"]
FOREIGN = ["აბგდ ევზთ იკლმ", "ნოპჟ რსტუ ფქღყ", "ყღქფ უტსრ ჟპონ", "მლკი თზვე დგბა"]  # pieces the world lacks


def _lines(world) -> list[str]:
    from harness.worlds.trim import world_lines

    return world_lines(world)


def _bpe(out: Path, lines: list[str]) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    t = ByteLevelBPETokenizer()
    t.train_from_iterator(lines + FOREIGN * 300, vocab_size=900, min_frequency=1, special_tokens=SPECIALS)
    PreTrainedTokenizerFast(tokenizer_object=t._tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>", mask_token="<mask>").save_pretrained(out)
    return out


def _unigram(out: Path, lines: list[str]) -> Path:
    """A SentencePiece-like Unigram with byte fallback: the specials, the 256 byte pieces, the trained pieces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.Unigram())
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(lines + FOREIGN * 300, trainers.UnigramTrainer(vocab_size=600, special_tokens=SPECIALS,
                                                                   unk_token="<unk>"))
    spec = json.loads(t.to_str())
    vocab = spec["model"]["vocab"]
    spec["model"]["vocab"] = vocab[:5] + [[f"<0x{b:02X}>", -30.0] for b in range(256)] + vocab[5:]
    spec["model"]["byte_fallback"] = True
    for tok in spec["added_tokens"]:
        tok["id"] = SPECIALS.index(tok["content"])
    t = Tokenizer.from_str(json.dumps(spec))
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>", mask_token="<mask>").save_pretrained(out)
    return out


def _model(out: Path, arch: str, tok_dir: Path, *, tied: bool) -> Path:
    """A tiny model of ``arch`` (llama, xlmr) owning the vocabulary of the tokenizer at ``tok_dir``."""
    import torch
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    n = len(tok)
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(vocab_size=n, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied,
                                             max_position_embeddings=64, bos_token_id=tok.bos_token_id,
                                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    else:
        from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

        model = XLMRobertaForMaskedLM(XLMRobertaConfig(vocab_size=n, hidden_size=16, intermediate_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2, pad_token_id=3,
                                                       max_position_embeddings=80, tie_word_embeddings=tied))
        with torch.no_grad():
            model.lm_head.bias.copy_(torch.randn(n))  # a bias that tells rows apart
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def inputs(synthetic_world, tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("trim-inputs")
    lines = _lines(synthetic_world)
    bpe, uni = _bpe(d / "tok-bpe", lines), _unigram(d / "tok-unigram", lines)
    return {"bpe": bpe, "unigram": uni, "llama-bpe": _model(d / "llama-bpe", "llama", bpe, tied=False),
            "xlmr-unigram": _model(d / "xlmr-unigram", "xlmr", uni, tied=True),
            "source": _model(d / "source", "llama", bpe, tied=True)}


def _derive(capsys, name: str, inputs: dict[str, Path], tok: str, donor: str | None, *extra: str) -> str:
    from harness.cli import main

    args = ["world", "derive", name, "--from", "synthetic", "--source", str(inputs["source"]), "--target-tokenizer",
            str(inputs[tok]), *(["--donor", str(inputs[donor])] if donor else []), *extra]
    capsys.readouterr()
    rc = main(args)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def _rows(folder: Path) -> dict[str, object]:
    """The vocabulary tensors of the model at ``folder``: input table, output table, output bias (where any)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    cls = AutoModelForCausalLM if "llama" in json.loads((folder / "config.json").read_text())["model_type"] \
        else AutoModelForMaskedLM
    m = cls.from_pretrained(folder, dtype=torch.float32)
    out = {"input": m.get_input_embeddings().weight.detach(), "output": m.get_output_embeddings().weight.detach()}
    bias = getattr(m.get_output_embeddings(), "bias", None)
    if bias is not None:
        out["bias"] = bias.detach()
    return out


CASES = [("bpe", "llama-bpe"), ("unigram", "xlmr-unigram")]


@pytest.mark.parametrize("tok,donor", CASES, ids=[c[0] for c in CASES])
def test_trim_keeps_the_worlds_tokenization_and_reindexes_the_donor(inputs, synthetic_world, capsys, tok, donor):
    import torch
    from transformers import AutoTokenizer

    from harness.worlds import get_world

    out = _derive(capsys, f"t-trim-{tok}", inputs, tok, donor, "--trim")
    assert "pieces kept" in out
    world = get_world(f"t-trim-{tok}", build=False)
    full, trimmed = AutoTokenizer.from_pretrained(inputs[tok]), AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    entry = world.manifest["target_tokenizer"]["trimmed"]
    assert entry["total"] == len(full) and entry["kept"] == len(trimmed) < len(full) - 50
    assert world.manifest["target_tokenizer"]["size"] == len(trimmed)
    # the world's text: the same pieces, every line
    lines = _lines(synthetic_world)
    assert [trimmed.tokenize(x) for x in lines] == [full.tokenize(x) for x in lines]
    # the specials and the byte pieces kept; any text still tokenizes (bytes), and decodes back
    vocab, full_vocab = trimmed.get_vocab(), full.get_vocab()
    assert set(trimmed.all_special_tokens) == set(full.all_special_tokens) <= set(vocab)
    alphabet = [f"<0x{b:02X}>" for b in range(256)] if tok == "unigram" else [
        p for p in full_vocab if len(p) == 1]
    assert len(alphabet) == 256 and set(alphabet) <= set(vocab)
    odd = "Ωmega 語 ✓ zz"
    assert trimmed.unk_token_id not in trimmed(odd)["input_ids"]
    ids = trimmed(odd, add_special_tokens=False)["input_ids"]
    assert trimmed.decode(ids) == full.decode(full(odd, add_special_tokens=False)["input_ids"])
    kept = json.loads((world.root / "trimming.json").read_text())["kept_ids"]
    assert kept == sorted(full_vocab[p] for p in vocab) and [vocab[p] for p in sorted(vocab, key=vocab.get)] == \
        list(range(len(vocab)))
    # the donor: row of piece p in the trimmed donor == row of p in the full donor (input, output, bias)
    a, b = _rows(inputs[donor]), _rows(world.donor_dir)
    assert set(a) == set(b)
    for key in a:
        assert b[key].shape[0] == len(trimmed)
        for piece, i in vocab.items():
            assert torch.equal(b[key][i], a[key][full_vocab[piece]]), (key, piece)
    donor_cfg = json.loads((world.donor_dir / "config.json").read_text())
    assert donor_cfg["vocab_size"] == len(trimmed) and donor_cfg.get("pad_token_id") == trimmed.pad_token_id
    assert world.manifest["donor"]["trimmed_from"]["embedding_rows"] == len(full)
    assert world.manifest["donor"]["vocab"] == len(trimmed)
    assert not (world.root / "donor-full").exists() and not (world.root / "target-full").exists()


def test_trim_is_in_the_worlds_identity_and_its_info(inputs, capsys):
    from harness.cli import main
    from harness.worlds import get_world

    _derive(capsys, "t-full-id", inputs, "bpe", "llama-bpe")
    _derive(capsys, "t-trim-id", inputs, "bpe", "llama-bpe", "--trim")
    full, trimmed = get_world("t-full-id", build=False), get_world("t-trim-id", build=False)
    assert full.hash != trimmed.hash and "trimmed" not in full.manifest["target_tokenizer"]
    assert trimmed.manifest["donor"]["identity"] != full.manifest["donor"]["identity"]
    capsys.readouterr()
    assert main(["world", "info", "t-trim-id"]) == 0
    info = capsys.readouterr().out
    entry = trimmed.manifest["target_tokenizer"]["trimmed"]
    assert f"{entry['kept']:,} of {entry['total']:,} pieces kept" in " ".join(info.split())
    assert "identity covers the trimming" in " ".join(info.split()) and "donor trimmed" in info
    from harness.worlds.derived_world import derived_builder

    assert f"trimmed to {entry['kept']:,} of {entry['total']:,} pieces" in derived_builder("t-trim-id").description
    assert "trimmed" not in derived_builder("t-full-id").description


def test_trim_keeps_the_users_text(inputs, synthetic_world, capsys, tmp_path):
    """A user's text brings its own pieces: its tokenization is unchanged too (pieces the world alone drops)."""
    from transformers import AutoTokenizer

    from harness.worlds import get_world

    text = tmp_path / "georgian.txt"
    text.write_text("\n".join(FOREIGN * 3) + "\n", encoding="utf-8")
    _derive(capsys, "t-trim-text", inputs, "bpe", None, "--trim", "--text", f"kat_Geor={text}")
    _derive(capsys, "t-trim-notext", inputs, "bpe", None, "--trim")
    full = AutoTokenizer.from_pretrained(inputs["bpe"])
    with_text = AutoTokenizer.from_pretrained(get_world("t-trim-text", build=False).target_tokenizer_dir)
    without = AutoTokenizer.from_pretrained(get_world("t-trim-notext", build=False).target_tokenizer_dir)
    assert [with_text.tokenize(x) for x in FOREIGN[:4]] == [full.tokenize(x) for x in FOREIGN[:4]]
    assert [without.tokenize(x) for x in FOREIGN[:4]] != [full.tokenize(x) for x in FOREIGN[:4]]
    assert len(with_text) > len(without)


def test_bpe_keeps_a_merge_chains_intermediates():
    """A piece only ever built on the way to another (``ab`` on the way to ``abc``) stays, or ``abc`` is never
    built; a merge whose part is dropped goes."""
    from tokenizers import Tokenizer, models

    from harness.worlds.trim import check_identity, kept_pieces, trimmed_spec, used_ids

    vocab = {"a": 0, "b": 1, "c": 2, "d": 3, "ab": 4, "abc": 5, "cd": 6, "abcd": 7}
    merges = [("a", "b"), ("ab", "c"), ("c", "d"), ("abc", "d")]
    full = Tokenizer(models.BPE(vocab, merges))
    spec = json.loads(full.to_str())
    lines = ["abc", "abcabc"]
    kept, counts = kept_pieces(spec, used_ids(full, lines))
    assert [p for p, i in sorted(vocab.items(), key=lambda kv: kv[1]) if i in kept] == ["a", "b", "c", "ab", "abc"]
    assert counts["intermediates"] == 4  # a, b, c and ab: none of them emitted
    new = trimmed_spec(spec, kept)
    assert new["model"]["merges"] == [["a", "b"], ["ab", "c"]]
    trimmed = Tokenizer.from_str(json.dumps(new))
    assert check_identity(full, trimmed, lines) == 2


def test_a_trimming_that_changes_the_tokenization_is_refused_in_one_line():
    from tokenizers import Tokenizer, models

    from harness.core.errors import ConfigError
    from harness.worlds.trim import check_identity, trimmed_spec

    vocab = {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}
    full = Tokenizer(models.BPE(vocab, [("a", "b"), ("ab", "c")]))
    spec = json.loads(full.to_str())
    dropped = Tokenizer.from_str(json.dumps(trimmed_spec(spec, [0, 1, 2, 4])))  # "ab", the intermediate, dropped
    with pytest.raises(ConfigError, match=r"^--trim: the trimmed tokenizer tokenizes 'abc' otherwise") as err:
        check_identity(full, dropped, ["abc"])
    assert "\n" not in str(err.value)


def test_langs_keeps_those_languages_and_trims_to_their_text(inputs, synthetic_world, capsys):
    """``--langs``: the derived world holds the named languages and the pivot only (language table, every task's
    languages, CPT text, dictionaries), its identity covers them, and ``--trim`` keeps the pieces of their text only:
    their tokenization unchanged, the other scripts' pieces dropped."""
    from transformers import AutoTokenizer

    from harness.cli import main
    from harness.worlds import get_world
    from harness.worlds.trim import world_lines

    _derive(capsys, "t-langs", inputs, "bpe", "llama-bpe", "--trim", "--langs", "qad_Cyrl")
    _derive(capsys, "t-langs-all", inputs, "bpe", "llama-bpe", "--trim")
    world, every = get_world("t-langs", build=False), get_world("t-langs-all", build=False)
    kept = {"qaa_Latn", "qad_Cyrl"}
    assert world.kept_languages == kept and every.kept_languages is None
    assert set(world.languages) == kept and set(every.languages) == set(synthetic_world.languages)
    for task in synthetic_world.tasks_available():
        assert set(world.task_languages(task)) == set(synthetic_world.task_languages(task)) & kept, task
    assert {p.stem for p in world.resource_files("cpt_text")} == kept
    assert all(set(p.stem.split("-")) <= kept for p in world.resource_files("dictionary"))
    assert world.resource_files("dictionary") and world.resource_files("word_vectors")
    assert world.hash != every.hash
    # the trimming: the kept languages' text tokenizes as before; fewer pieces than a trimming to every language
    full = AutoTokenizer.from_pretrained(inputs["bpe"])
    trimmed = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    lines = world_lines(synthetic_world, kept=frozenset(kept))
    assert [trimmed.tokenize(x) for x in lines] == [full.tokenize(x) for x in lines]
    assert len(trimmed) < len(AutoTokenizer.from_pretrained(every.target_tokenizer_dir))
    greek = [x for x in world_lines(synthetic_world) if any("\u0370" <= c <= "\u03ff" for c in x)][:50]
    assert greek and [trimmed.tokenize(x) for x in greek] != [full.tokenize(x) for x in greek]
    capsys.readouterr()
    assert main(["world", "info", "t-langs"]) == 0
    assert "languages kept (--langs): qaa_Latn, qad_Cyrl" in " ".join(capsys.readouterr().out.split())
