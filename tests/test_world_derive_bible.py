"""``harness world derive`` from the built bible world's real models, each in each role: SmolLM2 and Gemma 3 both
ways (the Gemma target and the SmolLM2 target trimmed with ``--trim``), the encoders mono and multi both ways; ``world
info`` on each. Slow (minutes: the world's text is tokenized with Gemma's 262,144-piece tokenizer), and skipped
where the home (``HARNESS_HOME`` when the tests start) holds no built bible world. It writes only new world folders,
named ``t-...``, and removes each at the end."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

HOME = os.environ.get("HARNESS_HOME")  # read at import, before any fixture points it at a test home

CASES = [  # (name, source, target tokenizer, donor, trim)
    ("t-smol-gemma", "smollm2", "gemma3", "gemma3", True),
    ("t-gemma-smol", "gemma3", "smollm2", "smollm2", True),
    ("t-mono-multi", "mono", "multi", "multi", False),
    ("t-multi-mono", "multi", "mono", "mono", False),
]


def _bible() -> Path:
    roots = sorted(Path(HOME).glob("worlds/bible-v*")) if HOME else []
    roots = [r for r in roots if (r / "manifest.json").is_file()]
    if not roots:
        pytest.skip("no built bible world in HARNESS_HOME (set HARNESS_HOME to a home where `harness world build "
                    "bible` ran)")
    return roots[-1]


def _remove(name: str) -> None:
    worlds = Path(HOME) / "worlds"
    shutil.rmtree(worlds / f"{name}-v1", ignore_errors=True)
    for suffix in (".lease", ".lock"):
        (worlds / f"{name}-v1{suffix}").unlink(missing_ok=True)


def _rows_of(folder: Path) -> tuple[str, object]:
    """The donor's input table (its name, the tensor), read from its safetensors."""
    from safetensors import safe_open

    with safe_open(str(next(folder.glob("*.safetensors"))), "pt") as f:
        key = next(k for k in f.keys() if k.endswith("embed_tokens.weight") or k.endswith("word_embeddings.weight"))
        return key, f.get_tensor(key)


def _check_trimmed(world, bible: Path, target: str, donor: str) -> None:
    import torch
    from transformers import AutoTokenizer

    from harness.worlds.trim import world_lines

    full = AutoTokenizer.from_pretrained(bible / "sources" / target)
    trimmed = AutoTokenizer.from_pretrained(world.target_tokenizer_dir)
    entry = world.manifest["target_tokenizer"]["trimmed"]
    assert entry["total"] == len(full) and entry["kept"] == len(trimmed) < len(full)
    lines = world_lines(world.base)[::997]
    assert [trimmed.tokenize(x) for x in lines] == [full.tokenize(x) for x in lines]
    assert set(full.all_special_tokens) <= set(trimmed.get_vocab())
    key, a = _rows_of(bible / "sources" / donor)
    _, b = _rows_of(world.donor_dir)
    vocab, full_vocab = trimmed.get_vocab(), full.get_vocab()
    assert b.shape[0] == len(trimmed)
    for piece in sorted(vocab)[:: max(1, len(vocab) // 500)]:
        assert torch.equal(b[vocab[piece]], a[full_vocab[piece]]), (key, piece)


@pytest.mark.slow  # minutes: Gemma 3's tokenizer over the bible world's text, the models loaded
@pytest.mark.parametrize("name,source,target,donor,trim", CASES, ids=[c[0] for c in CASES])
def test_derive_from_the_bible_worlds_models(monkeypatch, capsys, name, source, target, donor, trim):
    from harness.cli import main
    from harness.worlds import get_world

    bible = _bible()
    monkeypatch.setenv("HARNESS_HOME", HOME)
    _remove(name)
    sources = bible / "sources"
    args = ["world", "derive", name, "--from", "bible", "--source", str(sources / source), "--target-tokenizer",
            str(sources / target), "--donor", str(sources / donor), *(["--trim"] if trim else [])]
    try:
        start = time.monotonic()
        rc = main(args)
        took = time.monotonic() - start
        out = capsys.readouterr()
        assert rc == 0, out.err
        world = get_world(name, build=False)
        assert world.base is not None and world.base.root == bible
        assert world.source_objective(source) == ("clm" if source in ("smollm2", "gemma3") else "mlm")
        assert main(["world", "info", name]) == 0
        info = " ".join(capsys.readouterr().out.split())
        assert "derived from world bible" in info and f"source {source}" in info
        if trim:
            _check_trimmed(world, bible, target, donor)
            entry = world.manifest["target_tokenizer"]["trimmed"]
            assert f"{entry['kept']:,} of {entry['total']:,} pieces kept" in info and "donor trimmed" in info
        else:
            assert "trimmed" not in world.manifest["target_tokenizer"] and "pieces kept" not in info
        with capsys.disabled():
            print(f"\n{name}: derived in {took:.0f} s; " + (
                f"{entry['kept']:,} of {entry['total']:,} pieces kept ({entry['reasons']})" if trim else "untrimmed"))
    finally:
        _remove(name)
