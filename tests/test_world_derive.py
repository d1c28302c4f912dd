"""``harness world derive``: a derived world from the synthetic world with tiny models made here (Llama, BERT,
XLM-R; byte-level BPE, Unigram with byte fallback, WordPiece), each in each role; its reading of the base world's
tasks and resources; its identity; ``world info`` and planning; every bad input refused in one line, nothing
written."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

WORDS = ["kala", "mesi", "tora", "nubi", "pela", "sunu", "rika", "fomo", "dela", "wani", "zuta", "hobe"]


def _text(n: int = 200, seed: int = 0) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 9))) for _ in range(n)]


def _bpe(out: Path) -> Path:
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    t = ByteLevelBPETokenizer()
    t.train_from_iterator(_text(), vocab_size=300, min_frequency=1, special_tokens=["<s>", "</s>", "<pad>", "<unk>"])
    PreTrainedTokenizerFast(tokenizer_object=t._tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                            unk_token="<unk>").save_pretrained(out)
    return out


def _unigram(out: Path) -> Path:
    """A SentencePiece-like Unigram (Metaspace, byte fallback): specials, the 256 byte pieces, the words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = [("<unk>", 0.0), ("<s>", 0.0), ("</s>", 0.0), ("<pad>", 0.0), ("<mask>", 0.0)]
    vocab += [(f"<0x{b:02X}>", -10.0) for b in range(256)]
    vocab += [(f"▁{w}", -2.0) for w in WORDS] + [(c, -5.0) for c in "abdefhiklmnoprstuwz▁"]
    t = Tokenizer(models.Unigram(vocab, unk_id=0, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>", mask_token="<mask>").save_pretrained(out)
    return out


def _wordpiece(out: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    letters = sorted(set("".join(WORDS)))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *(f"##{c}" for c in letters), *WORDS]
    t = Tokenizer(models.WordPiece({v: i for i, v in enumerate(vocab)}, unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(out)
    return out


TOKENIZERS = {"bpe": _bpe, "unigram": _unigram, "wordpiece": _wordpiece}


def _model(out: Path, arch: str, tok: str, *, tied: bool = True, extra_rows: int = 0) -> Path:
    """A tiny model of ``arch`` (llama, bert, xlmr) with tokenizer ``tok``, saved with its tokenizer at ``out``."""
    import torch
    from transformers import AutoTokenizer

    torch.manual_seed(0)
    TOKENIZERS[tok](out)
    n = len(AutoTokenizer.from_pretrained(out)) + extra_rows
    if arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        model = LlamaForCausalLM(LlamaConfig(vocab_size=n, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=tied,
                                             max_position_embeddings=64))
    elif arch == "bert":
        from transformers import BertConfig, BertForMaskedLM

        model = BertForMaskedLM(BertConfig(vocab_size=n, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, max_position_embeddings=64,
                                           tie_word_embeddings=tied))
    else:
        from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

        model = XLMRobertaForMaskedLM(XLMRobertaConfig(vocab_size=n, hidden_size=16, intermediate_size=32,
                                                       num_hidden_layers=1, num_attention_heads=2,
                                                       max_position_embeddings=80, tie_word_embeddings=tied))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("user-models")
    return {
        "llama-bpe-untied": _model(d / "llama-bpe-untied", "llama", "bpe", tied=False),
        "llama-bpe": _model(d / "llama-bpe", "llama", "bpe"),
        "bert-wordpiece": _model(d / "bert-wordpiece", "bert", "wordpiece"),
        "bert-wordpiece-untied": _model(d / "bert-wordpiece-untied", "bert", "wordpiece", tied=False),
        "xlmr-unigram": _model(d / "xlmr-unigram", "xlmr", "unigram"),
        "xlmr-unigram-padded": _model(d / "xlmr-unigram-padded", "xlmr", "unigram", tied=False, extra_rows=8),
    }


@pytest.fixture
def worlds(synthetic_world) -> Path:
    return synthetic_world.root.parent


def _listing(worlds: Path) -> list[str]:
    return sorted(p.name for p in worlds.iterdir())


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from harness.cli import main

    capsys.readouterr()  # what the test printed before (a model saved, its progress bar) is not the command's
    rc = main(list(args))
    out = capsys.readouterr()
    return rc, out.out, out.err


# -- each model in each role ---------------------------------------------------------------------------------------
ROLES = [  # (source, target tokenizer, donor): every model kind and tokenizer in every role, tied and untied heads
    ("llama-bpe-untied", ("file", "unigram"), "xlmr-unigram-padded"),
    ("bert-wordpiece", ("model", "llama-bpe"), "llama-bpe"),
    ("xlmr-unigram", ("folder", "wordpiece"), "bert-wordpiece-untied"),
    ("llama-bpe", ("file", "wordpiece"), None),
    ("bert-wordpiece-untied", ("model", "xlmr-unigram"), "xlmr-unigram"),
]


def _target(models: dict[str, Path], how: str, which: str, tmp_path: Path) -> str:
    if how == "model":
        return str(models[which])
    folder = TOKENIZERS[which](tmp_path / f"tok-{which}")
    return str(folder / "tokenizer.json") if how == "file" else str(folder)


@pytest.mark.parametrize("source,target,donor", ROLES, ids=[r[0] for r in ROLES])
def test_each_model_in_each_role(models, worlds, tmp_path, capsys, source, target, donor):
    from transformers import AutoTokenizer

    from harness.worlds import get_world

    name = f"d-{source}"
    tok = _target(models, *target, tmp_path)
    args = ["world", "derive", name, "--from", "synthetic", "--source", str(models[source]),
            "--target-tokenizer", tok]
    if donor:
        args += ["--donor", str(models[donor])]
    rc, out, err = _cli(capsys, *args)
    assert rc == 0, err
    world = get_world(name, build=False)
    base = get_world("synthetic", build=False)
    entry = world.manifest["sources"][source]
    assert world.sources == [source] and world.default_source == source
    assert world.source_objective(source) == ("clm" if source.startswith("llama") else "mlm")
    assert world.source_tied(source) is ("untied" not in source)
    assert entry["hidden_size"] == 16 and entry["num_layers"] == 1 and entry["vocab_size"] > 0
    assert set(entry["sha256"]) >= {"config.json", "model.safetensors"}
    assert world.manifest["derived_from"] == {"world": "synthetic", "folder": base.root.name, "hash": base.hash}
    target_len = len(AutoTokenizer.from_pretrained(world.target_tokenizer_dir))
    assert world.manifest["target_tokenizer"]["size"] == target_len
    if donor:
        assert world.donor_dir == world.root / "donor"
        assert world.manifest["donor"]["vocab"] == target_len and len(world.manifest["donor"]["identity"]) == 64
    else:
        assert world.donor_dir is None and "donor" not in world.manifest
    # the base world's tasks and resources, read in place
    assert world.tasks_available() == base.tasks_available()
    assert world.task_dir("ner") == base.task_dir("ner")
    assert world.resource_files("cpt_text") == base.resource_files("cpt_text")
    assert world.resource_files("word_vectors") == base.resource_files("word_vectors")
    assert not (world.root / "tasks").exists() and not (world.root / "resources").exists()


def test_files_are_hard_linked_and_the_world_is_its_users_bytes(models, worlds, capsys):
    from harness.worlds import get_world

    src = models["llama-bpe"]
    rc, _, err = _cli(capsys, "world", "derive", "d-linked", "--from", "synthetic", "--source", str(src))
    assert rc == 0, err
    world = get_world("d-linked", build=False)
    stored = world.source_dir("llama-bpe") / "model.safetensors"
    assert os.path.samefile(stored, src / "model.safetensors")  # hard-linked, not copied
    derivation = json.loads((world.root / "derivation.json").read_text())
    assert derivation["source"]["stored"]["model.safetensors"] == "linked"
    # the default target tokenizer is the base world's
    base = get_world("synthetic", build=False)
    assert (world.target_tokenizer_dir / "tokenizer.json").read_bytes() == \
        (base.target_tokenizer_dir / "tokenizer.json").read_bytes()
    rc, _, err = _cli(capsys, "world", "derive", "d-copied", "--from", "synthetic", "--source", str(src), "--copy")
    assert rc == 0, err
    copied = get_world("d-copied", build=False)
    assert not os.path.samefile(copied.source_dir("llama-bpe") / "model.safetensors", src / "model.safetensors")
    # same bytes, another world only by its name (paths and how files were stored are outside the identity)
    same = {**copied.manifest, "name": "d-linked"}
    from harness.core.hashing import hash_obj
    from harness.worlds.base import world_identity

    assert hash_obj(world_identity(same)) == world.hash


def test_a_user_text_adds_a_language_and_the_identity_covers_it(models, worlds, tmp_path, capsys):
    from harness.worlds import get_world

    text = tmp_path / "mine.txt"
    text.write_text("\n".join(_text(40, seed=3)) + "\n", encoding="utf-8")
    args = ["world", "derive", "d-text", "--from", "synthetic", "--source", str(models["xlmr-unigram"]),
            "--text", f"qzz_Latn={text}", "--langs", "qzz_Latn,qab_Latn"]
    rc, _, err = _cli(capsys, *args)
    assert rc == 0, err
    world = get_world("d-text", build=False)
    base = get_world("synthetic", build=False)
    kept = {"qzz_Latn", "qab_Latn", base.pivot}  # --langs: those languages and the pivot
    assert set(world.languages) == kept and world.kept_languages == kept
    cpt = {p.stem: p for p in world.resource_files("cpt_text")}
    assert set(cpt) == kept
    assert cpt["qzz_Latn"] == world.root / "resources" / "cpt" / "qzz_Latn.txt"
    assert cpt["qab_Latn"] == base.resource_path("cpt/qab_Latn.txt")
    assert len(cpt["qzz_Latn"].read_text().splitlines()) == 36
    held = world.task_dir("mlm")
    assert held == world.root / "tasks" / "mlm"
    assert world.task_languages("mlm") == sorted(kept)
    assert len((held / "qzz_Latn.txt").read_text().splitlines()) == 4
    assert (held / "qab_Latn.txt").is_symlink()  # the base world's held-out text, read in place
    assert (held / "qab_Latn.txt").read_bytes() == (base.task_dir("mlm") / "qab_Latn.txt").read_bytes()
    assert world.task_dir("sr-b") == base.task_dir("sr-b")
    # another text, another world
    text.write_text("\n".join(_text(40, seed=4)) + "\n", encoding="utf-8")
    rc, _, err = _cli(capsys, *[a.replace("d-text", "d-text2") for a in args])
    assert rc == 0, err
    other = get_world("d-text2", build=False)
    assert other.manifest["user_texts"]["qzz_Latn"]["sha256"] != world.manifest["user_texts"]["qzz_Latn"]["sha256"]
    assert {**other.manifest, "name": "d-text"} != world.manifest


def test_info_describes_it_and_planning_accepts_it(models, worlds, tmp_path, capsys):
    text = tmp_path / "mine.txt"
    text.write_text("\n".join(_text(30, seed=5)) + "\n", encoding="utf-8")
    rc, _, err = _cli(capsys, "world", "derive", "d-info", "--from", "synthetic", "--source",
                      str(models["llama-bpe"]), "--target-tokenizer", str(models["xlmr-unigram"]), "--donor",
                      str(models["xlmr-unigram"]), "--text", f"qzy_Latn={text}")
    assert rc == 0, err
    rc, out, err = _cli(capsys, "world", "info", "d-info")
    assert rc == 0, err
    assert "derived from world synthetic" in out
    assert "source llama-bpe (default): LlamaForCausalLM, objective clm" in out and "hidden size 16" in out
    assert "target tokenizer: model folder" in out
    assert "donor: XLMRobertaForMaskedLM (mlm)" in out
    assert "user text qzy_Latn: 30 lines (27 CPT and monolingual text, 3 held out" in out
    rc, out, err = _cli(capsys, "list")
    assert rc == 0 and "d-info" in out
    rc, out, err = _cli(capsys, "world", "check", "d-info")
    assert rc == 0 and "files match the sha256" in " ".join(out.split()), out + err
    rc, out, err = _cli(capsys, "world", "build", "d-info", "--force")  # never built: refused, the world kept
    assert rc == 2 and "is a derived world: it is not built" in err
    rc, out, err = _cli(capsys, "world", "info", "d-info")
    assert rc == 0 and "derived from world synthetic" in out
    from harness.plan import world_for_planning
    from harness.worlds import declared_world

    assert world_for_planning("d-info").sources == ["llama-bpe"]
    assert "qzy_Latn" in declared_world("d-info").languages
    rc, out, err = _cli(capsys, "plan", "--world", "d-info", "--methods", "random", "--tasks", "clm",
                        "--dims", "full", "--seeds", "1")
    assert rc == 0, err + out
    assert "llama-bpe" in out
    # the plan prices the derived world's own model and target vocabulary, not a reference model's
    from transformers import AutoTokenizer

    from harness.throughput import declared_shape

    target = len(AutoTokenizer.from_pretrained(declared_world("d-info").root / "target_tokenizer"))
    shape, why = declared_shape("d-info")
    assert shape["target_vocab"] == target and "of the reference model" not in why, why


# -- bad inputs: one line, exit 2, nothing written -----------------------------------------------------------------
def _refused(capsys, worlds: Path, *args: str) -> str:
    before = _listing(worlds)
    rc, out, err = _cli(capsys, "world", "derive", *args)
    assert rc == 2, out + err
    assert _listing(worlds) == before  # nothing written, no staging left
    line = " ".join(err.split())
    assert line.startswith("error:")
    return line


def test_bad_inputs_are_refused_in_one_line(models, worlds, tmp_path, capsys):
    src = str(models["llama-bpe"])
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n")
    assert "not a model" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", str(notes))
    assert "not a model" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", str(tmp_path))
    assert "unknown kind" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", src,
                                      "--target-tokenizer", str(notes))
    assert "is not the target tokenizer's" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source",
                                                       src, "--target-tokenizer", str(models["bert-wordpiece"]),
                                                       "--donor", src)
    assert "no data for it and no --text qxx_Latn=FILE" in _refused(
        capsys, worlds, "d-bad", "--from", "synthetic", "--source", src, "--langs", "qxx_Latn")
    assert "is a registered world" in _refused(capsys, worlds, "synthetic", "--from", "synthetic", "--source", src)
    rc, _, err = _cli(capsys, "world", "derive", "d-exists", "--from", "synthetic", "--source", src)
    assert rc == 0, err
    assert "exists already" in _refused(capsys, worlds, "d-exists", "--from", "synthetic", "--source", src)
    assert "not in the local Hugging Face cache" in _refused(capsys, worlds, "d-bad", "--from", "synthetic",
                                                             "--source", "nobody/no-such-model")


def test_a_donor_with_fewer_rows_than_the_target_is_refused(models, worlds, tmp_path, capsys):
    short = _model(tmp_path / "short", "xlmr", "unigram", extra_rows=-5)  # the target's vocabulary, 5 rows short
    line = _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", str(models["llama-bpe"]),
                    "--target-tokenizer", str(models["xlmr-unigram"]), "--donor", str(short))
    assert "fewer than the target tokenizer's" in line


def _gguf(path: Path, arch: str) -> Path:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _llama_gguf(path: Path, tokenizer_dir: Path) -> Path:
    """A tiny Llama GGUF (float32 tensors, llama.cpp's names) with the byte-level BPE of ``tokenizer_dir``."""
    import gguf
    import numpy as np

    tj = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    vocab = {**tj["model"]["vocab"], **{t["content"]: t["id"] for t in tj["added_tokens"]}}
    tokens = sorted(vocab, key=vocab.get)
    n, h, f = len(tokens), 16, 32
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(f)
    w.add_embedding_length(h)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_dimension_count(8)
    w.add_vocab_size(n)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in ("<s>", "</s>", "<pad>", "<unk>") else 1 for t in tokens])
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]])
    w.add_bos_token_id(vocab["<s>"])
    w.add_eos_token_id(vocab["</s>"])
    shapes = {"token_embd.weight": (n, h), **{f"blk.0.attn_{k}.weight": (h, h) for k in ("q", "k", "v", "output")},
              "blk.0.ffn_gate.weight": (f, h), "blk.0.ffn_up.weight": (f, h), "blk.0.ffn_down.weight": (h, f)}
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        w.add_tensor(name, np.ones(h, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_gguf_source_is_converted_to_a_model_folder(models, worlds, tmp_path, capsys):
    pytest.importorskip("gguf")
    from harness.core.hashing import sha256_file
    from harness.worlds import get_world

    path = _llama_gguf(tmp_path / "Tiny-Llama.Q8.gguf", models["llama-bpe"])
    rc, _, err = _cli(capsys, "world", "derive", "d-gguf", "--from", "synthetic", "--source", str(path))
    assert rc == 0, err
    world = get_world("d-gguf", build=False)
    assert world.sources == ["tiny-llama.q8"]
    entry = world.manifest["sources"]["tiny-llama.q8"]
    assert entry["architecture"] == "LlamaForCausalLM" and entry["objective"] == "clm" and entry["tied"]
    vocab = json.loads((models["llama-bpe"] / "tokenizer.json").read_text())["model"]["vocab"]
    assert entry["embedding_rows"] == len(vocab) and entry["hidden_size"] == 16
    folder = world.source_dir("tiny-llama.q8")
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    derivation = json.loads((world.root / "derivation.json").read_text())
    assert derivation["source"]["input"]["sha256"] == sha256_file(path)


def test_a_gguf_of_an_unknown_architecture_and_a_missing_gguf_package(models, worlds, tmp_path, capsys,
                                                                        monkeypatch):
    pytest.importorskip("gguf")
    bad = _gguf(tmp_path / "odd.gguf", "nonesucharch")
    line = _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", str(bad))
    assert "transformers cannot load this GGUF" in line
    import builtins

    real_import = builtins.__import__

    def no_gguf(name, *args, **kwargs):
        if name == "gguf":
            raise ImportError("no gguf")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    assert "pip install gguf" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", str(bad))


# -- more input kinds ------------------------------------------------------------------------------------------------
def test_a_tokenizer_json_and_a_sentencepiece_model_as_the_target(models, worlds, tmp_path, capsys):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from harness.worlds import get_world

    src = str(models["bert-wordpiece"])
    rc, _, err = _cli(capsys, "world", "derive", "d-tokjson", "--from", "synthetic", "--source", src,
                      "--target-tokenizer", str(models["llama-bpe"] / "tokenizer.json"))
    assert rc == 0, err
    tok = AutoTokenizer.from_pretrained(get_world("d-tokjson", build=False).target_tokenizer_dir)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<s>", "</s>", "<pad>")  # roles from a bare file
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_text(300, seed=7)) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / "sp"), vocab_size=320,
                                   model_type="unigram", byte_fallback=True, hard_vocab_limit=False,
                                   minloglevel=2)
    rc, _, err = _cli(capsys, "world", "derive", "d-spm", "--from", "synthetic", "--source", src,
                      "--target-tokenizer", str(tmp_path / "sp.model"))
    assert rc == 0, err
    world = get_world("d-spm", build=False)
    tok = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    proc = spm.SentencePieceProcessor(model_file=str(tmp_path / "sp.model"))
    assert len(tok) == proc.get_piece_size() == world.manifest["target_tokenizer"]["size"]
    for line in ["kala mesi tora", "zuta hobe qq ü"]:
        assert tok(line, add_special_tokens=False)["input_ids"] == proc.encode(line)
    assert world.manifest["target_tokenizer"]["kind"] == "SentencePiece model"


def test_a_hub_id_is_taken_from_the_local_cache(models, worlds, tmp_path, capsys, monkeypatch):
    import shutil

    import huggingface_hub.constants as hub

    cache = tmp_path / "hub"
    snap = cache / "models--someone--tiny-llama" / "snapshots" / "0123abcd"
    shutil.copytree(models["llama-bpe"], snap)
    (cache / "models--someone--tiny-llama" / "refs").mkdir()
    (cache / "models--someone--tiny-llama" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, _, err = _cli(capsys, "world", "derive", "d-hub", "--from", "synthetic", "--source", "someone/tiny-llama")
    assert rc == 0, err
    from harness.worlds import get_world

    world = get_world("d-hub", build=False)
    assert world.sources == ["tiny-llama"] and world.source_objective("tiny-llama") == "clm"
    line = _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", "someone/absent")
    assert "`hf download someone/absent`" in line


def test_more_bad_texts_and_names(models, worlds, tmp_path, capsys):
    src = str(models["llama-bpe"])
    text = tmp_path / "t.txt"
    text.write_text("\n".join(_text(20)) + "\n")
    assert "has data for qab_Latn already" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source",
                                                       src, "--text", f"qab_Latn={text}")
    assert "give LANG=FILE" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", src,
                                        "--text", str(text))
    short = tmp_path / "short.txt"
    short.write_text("one line\n")
    assert "at least 10 are needed" in _refused(capsys, worlds, "d-bad", "--from", "synthetic", "--source", src,
                                                "--text", f"qzq_Latn={short}")
    assert "lower-case letters" in _refused(capsys, worlds, "Bad/Name", "--from", "synthetic", "--source", src)
    assert "unknown world 'nowhere'" in _refused(capsys, worlds, "d-bad", "--from", "nowhere", "--source", src)


# -- a derived world over time: its base world built again, its own files edited ----------------------------------
@pytest.fixture
def own_home(synthetic_world, tmp_path, monkeypatch) -> Path:
    """A home of its own holding a copy of the synthetic world (times kept)."""
    import shutil

    home = tmp_path / "home"
    shutil.copytree(synthetic_world.root, home / "worlds" / synthetic_world.root.name, symlinks=True)
    monkeypatch.setenv("HARNESS_HOME", str(home))
    return home


def test_a_base_world_built_again_to_other_bytes_or_an_edited_file_refuses_it(models, own_home, tmp_path, capsys):
    import shutil

    from harness.core.errors import MissingResourceError
    from harness.worlds import get_world, write_checksums

    src = tmp_path / "mine"
    shutil.copytree(models["llama-bpe"], src)
    rc, _, err = _cli(capsys, "world", "derive", "d-time", "--from", "synthetic", "--source", str(src))
    assert rc == 0, err
    assert get_world("d-time", build=False).base is not None
    # the user writes over their weights in place: the hard-linked file changes, and the world refuses itself
    weights = src / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    with open(weights, "r+b") as f:
        f.write(bytes(data))
    with pytest.raises(MissingResourceError, match="damaged .* derive it again"):
        get_world("d-time", build=False)
    # a copied world is its own: the same edit leaves it
    rc, _, err = _cli(capsys, "world", "derive", "d-time2", "--from", "synthetic", "--source", str(src), "--copy")
    assert rc == 0, err
    with open(weights, "r+b") as f:
        f.write(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    get_world("d-time2", build=False)
    # the base world built again to other bytes: the derived world is refused in one line
    base = get_world("synthetic", build=False).root
    manifest = json.loads((base / "manifest.json").read_text())
    (base / "manifest.json").write_text(json.dumps({**manifest, "rebuilt": True}, indent=1))
    write_checksums(base)
    with pytest.raises(MissingResourceError, match="built again since"):
        get_world("d-time2", build=False)


@pytest.mark.slow  # an end-to-end run (about 45 s here)
def test_harness_run_runs_a_derived_world_with_a_user_language(models, worlds, tmp_path, capsys, run_cli,
                                                               tracking_uri):
    from mlflow.tracking import MlflowClient

    text = tmp_path / "mine.txt"
    text.write_text("\n".join(_text(60, seed=9)) + "\n", encoding="utf-8")
    rc, _, err = _cli(capsys, "world", "derive", "d-run", "--from", "synthetic", "--source",
                      str(models["llama-bpe"]), "--text", f"qzr_Latn={text}")
    assert rc == 0, err
    run_cli("run", "--world", "d-run", "--methods", "random", "--tasks", "clm", "--langs", "qzr_Latn,qab_Latn",
            "--cpt-steps", "2", "--experiment", "t-derived", check=True)
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("t-derived")
    metrics = {}
    for r in c.search_runs([exp.experiment_id]):
        metrics.update(r.data.metrics)
    assert any("qzr_Latn" in k for k in metrics), sorted(metrics)
