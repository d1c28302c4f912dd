"""Side-by-side fastText training gives the same models as training them one after the other."""

from __future__ import annotations

import random

import numpy as np

from methods.fasttext_util import TrainJob, cached_model, model_path, prefetch_models, stored_file

SETTINGS = {"model": "skipgram", "dim": 8, "epoch": 2, "minCount": 1, "minn": 2, "maxn": 3, "bucket": 2000,
            "lr": 0.05, "seed": 0, "thread": 1}


def _job(lang: str) -> TrainJob:
    rng = random.Random(lang)
    words = [f"{lang}{i}" for i in range(40)]
    lines = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(300)]

    def write(f) -> int:
        f.write("\n".join(lines) + "\n")
        return len(lines)

    return TrainJob(f"test-{lang}", {"lang": lang}, dict(SETTINGS), write)


def test_prefetch_matches_sequential_training(tmp_path):
    jobs = [_job(x) for x in ("aa", "bb", "cc")]
    par, seq = tmp_path / "par", tmp_path / "seq"
    progress: list[int] = []
    assert prefetch_models(par, jobs, workers=2, progress=progress.append) == 3
    assert len(progress) == 3
    for job in jobs:
        _, path = model_path(par, job.kind, job.inputs, job.settings)
        assert path is not None and stored_file(path).suffix == ".npz" and path.with_suffix(".json").is_file()
        got = cached_model(par, job.kind, job.inputs, job.settings, job.write_corpus)
        assert got.cached  # found, not retrained
        ref = cached_model(seq, job.kind, job.inputs, job.settings, job.write_corpus)
        assert not ref.cached
        assert np.array_equal(got.model.get_input_matrix(), ref.model.get_input_matrix())
        assert got.model.get_words() == ref.model.get_words()
    assert not list(par.rglob(".corpus-*"))  # the corpora are removed
    # nothing left to train; one worker or no cache: nothing is done here
    assert prefetch_models(par, jobs, workers=2) == 0
    assert prefetch_models(tmp_path / "one", jobs, workers=1) == 0
    assert prefetch_models(None, jobs, workers=2) == 0
