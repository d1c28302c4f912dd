"""Cached fastText models in compact form: every vector a method reads is bit for bit the trained model's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from methods.fasttext_util import (
    DamagedModelError,
    cached_model,
    compact_model,
    full_model_file,
    load_model,
    model_path,
    stored_file,
    usable,
    word_vectors,
)
from tests.test_fasttext_prefetch import _job

QUERIES = ["gg1", "gg17", "gg3x", "xyz", "g", "", "ǵǵ1", "gg1 gg2", "unseen-word"]  # vocabulary and not


def _reference(tmp_path, job):
    """The model as fastText writes it (trained without a cache) and its ``.bin`` file."""
    plain = cached_model(None, job.kind, job.inputs, job.settings, job.write_corpus).model
    full = tmp_path / "full.bin"
    plain.save_model(str(full))
    return plain, full


def test_compact_model_reads_back_bit_for_bit(tmp_path):
    job = _job("gg")
    plain, full = _reference(tmp_path, job)
    info = compact_model(full, tmp_path / "compact.npz")
    assert info is not None and info["size"] < full.stat().st_size
    assert info["rows_kept"] < info["rows"]  # most n-gram buckets are never reached
    back = load_model(tmp_path / "compact.npz")
    assert back.get_words() == plain.get_words() and back.get_dimension() == plain.get_dimension()
    assert np.array_equal(back.get_input_matrix().view(np.uint32), plain.get_input_matrix().view(np.uint32))
    words = plain.get_words() + QUERIES
    assert np.array_equal(word_vectors(back, words).view(np.uint32), word_vectors(plain, words).view(np.uint32))
    assert not back.get_output_matrix().any()  # left out: nothing reads it
    # a tool that reads fastText files itself gets the rebuilt file: the original but for the output matrix
    import fasttext

    (tmp_path / "out").mkdir()
    rebuilt = full_model_file(tmp_path / "compact.npz", tmp_path / "out")
    original = full.read_bytes()
    out_bytes = plain.get_output_matrix().nbytes
    assert rebuilt.read_bytes()[:-out_bytes] == original[:-out_bytes]
    assert np.array_equal(fasttext.load_model(str(rebuilt)).get_input_matrix(), plain.get_input_matrix())


def test_the_cache_stores_the_compact_form_and_a_method_reads_the_same_vectors(tmp_path):
    job = _job("hh")
    plain, _ = _reference(tmp_path, job)
    first = cached_model(tmp_path / "c", job.kind, job.inputs, job.settings, job.write_corpus)
    assert first.path.suffix == ".npz" and not first.path.with_suffix(".bin").exists()
    meta = json.loads(first.path.with_suffix(".json").read_text())
    assert meta["format"] == "fasttext-rows-v1" and meta["size"] == first.path.stat().st_size
    again = cached_model(tmp_path / "c", job.kind, job.inputs, job.settings, job.write_corpus)
    assert again.cached and again.path == first.path
    words = plain.get_words() + QUERIES
    for m in (first.model, again.model):
        assert np.array_equal(word_vectors(m, words).view(np.uint32), word_vectors(plain, words).view(np.uint32))
    # the .bin name it stands for still loads it
    _, bin_path = model_path(tmp_path / "c", job.kind, job.inputs, job.settings)
    assert np.array_equal(load_model(bin_path).get_input_matrix(), plain.get_input_matrix())


def test_a_full_bin_cached_before_still_loads(tmp_path):
    """A home written before the compact form: its ``.bin`` (with or without a sha256 in its .json) is used."""
    import hashlib

    job = _job("ii")
    plain, full = _reference(tmp_path, job)
    _, path = model_path(tmp_path, job.kind, job.inputs, job.settings)
    path.parent.mkdir(parents=True)
    path.write_bytes(full.read_bytes())
    path.with_suffix(".json").write_text(json.dumps({"kind": job.kind, "size": full.stat().st_size,
                                                    "sha256": hashlib.sha256(full.read_bytes()).hexdigest()}))
    got = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
    assert got.cached and got.path == path and stored_file(path) == path
    assert np.array_equal(got.model.get_input_matrix(), plain.get_input_matrix())


@pytest.mark.parametrize("damage", ["truncated", "rows-changed", "json-says-bin"])
def test_a_damaged_compact_model_is_discarded_and_trained_again(tmp_path, caplog, damage):
    job = _job("jj")
    first = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
    good = first.path.read_bytes()
    meta_path = first.path.with_suffix(".json")
    if damage == "truncated":
        first.path.write_bytes(good[: len(good) // 2])
    elif damage == "rows-changed":  # a consistent file and .json, but not the rows that were compacted
        import zipfile

        with np.load(first.path) as z:
            arrays = {k: z[k] for k in z.files}
        arrays["rows_high"] = arrays["rows_high"].copy()
        arrays["rows_high"][0, 0] ^= 1
        np.savez_compressed(first.path, **arrays)
        assert zipfile.is_zipfile(first.path)
        from methods.fasttext_util import sha256_of

        meta = json.loads(meta_path.read_text())
        meta.update(size=first.path.stat().st_size, sha256=sha256_of(first.path))
        meta_path.write_text(json.dumps(meta))
    else:
        meta = json.loads(meta_path.read_text())
        del meta["format"]
        meta_path.write_text(json.dumps(meta))
    if damage == "rows-changed":  # the file matches its .json: the rebuilt model does not match its sha256
        assert usable(model_path(tmp_path, job.kind, job.inputs, job.settings)[1])
        with pytest.raises(DamagedModelError, match="does not match"):
            load_model(first.path)
    with caplog.at_level("WARNING", logger="methods.fasttext_util"):
        again = cached_model(tmp_path, job.kind, job.inputs, job.settings, job.write_corpus)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1 and "damaged" in warned[0]
    assert not again.cached and again.path.read_bytes() == good  # trained again: the same compact file
    assert np.array_equal(again.model.get_input_matrix(), first.model.get_input_matrix())

