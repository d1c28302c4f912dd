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
