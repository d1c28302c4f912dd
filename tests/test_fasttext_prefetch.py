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


def _cached_in_child(cache, job, out) -> None:
    import time

    def slow_write(f) -> int:
        time.sleep(1.0)  # both processes are past their first cache look-up before either has a model
        return job.write_corpus(f)

    got = cached_model(cache, job.kind, job.inputs, job.settings, slow_write)
    out.put(got.cached)


def test_two_processes_needing_one_model_train_it_once(tmp_path):
    from tests.conftest import in_two_children

    flags = in_two_children(_cached_in_child, tmp_path, _job("aa"), timeout=120)
    assert flags == [False, True]  # one trained it, the other waited and loaded it
    assert len(list((tmp_path / "fasttext").glob(".corpus-*"))) == 0


def test_prefetch_skips_a_model_another_process_is_training(tmp_path):
    from harness.core.locks import release, try_exclusive

    jobs = [_job(x) for x in ("aa", "bb", "cc")]
    _, held = model_path(tmp_path, jobs[0].kind, jobs[0].inputs, jobs[0].settings)
    fd = try_exclusive(held)  # as another process training "aa" would hold it
    assert fd is not None
    try:
        assert prefetch_models(tmp_path, jobs, workers=2) == 2
        assert not stored_file(held).is_file()
    finally:
        release(fd)
    assert prefetch_models(tmp_path, jobs, workers=2) == 0  # "aa" alone is left: nothing to run side by side
    assert not cached_model(tmp_path, jobs[0].kind, jobs[0].inputs, jobs[0].settings, jobs[0].write_corpus).cached


def test_a_lock_dies_with_the_process_that_held_it(tmp_path):
    import os
    import signal

    from harness.core.locks import release, try_exclusive

    target = tmp_path / "model.bin"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child takes the lock, says so, and waits to be killed
        os.close(r)
        fd = try_exclusive(target)
        os.write(w, b"1" if fd is not None else b"0")
        signal.pause()
        os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    assert try_exclusive(target) is None  # held by the child
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    fd = try_exclusive(target)
    assert fd is not None
    release(fd)
