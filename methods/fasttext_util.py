"""fastText for FOCUS, WECHSEL and Tik-to-Tok: a content-addressed model cache, training side by side, vectors.

Training itself (seeded, single-threaded, zero-filled allocations: bit-for-bit reproducible) is
:mod:`methods.fasttext_train`; the model files and the compact form a cached model is stored in are
:mod:`methods.fasttext_compact`. Their public names are importable from here too.

Cache
-----
A trained model lives at ``<cache_dir>/fasttext/<kind>-<key>.bin`` with a ``.json`` beside it, where ``key`` is
the hash of everything that went into it (the content hashes of its input files, the tokenizer fingerprint, the
corpus recipe and every training setting). It is written to a temporary file and renamed into place, so a killed
run leaves no half model behind; the ``.json`` records the ``.bin``'s size and sha256, and a cached model that does
not match them (or has no ``.json``) is reported, removed and trained again, never loaded (:func:`usable`). A
model is trained under its lock (``<kind>-<key>.bin.lock``, :mod:`harness.core.locks`) and read under its lease
(``.bin.lease``): ``harness cache prune`` leaves it while either is held. Models are large: ``(words + bucket) x dim`` floats (fastText's default
``bucket`` of 2,000,000 at dim 300 is 2.4 GB); the ``bucket`` setting of each method makes them smaller.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import MissingResourceError
from harness.core.hashing import hash_obj
from harness.core.locks import exclusive, release, try_exclusive
from methods import own_cost
from methods.fasttext_compact import (
    COMPACT_FORMAT,
    COMPACT_SUFFIX,
    DamagedModelError,
    compact_model,
    full_model_file,
    load_model,
    meta_file,
    sha256_of,
)
from methods.fasttext_train import TRAIN_KEYS, train_model, zeroed_allocations

__all__ = [
    "COMPACT_FORMAT", "COMPACT_SUFFIX", "FASTTEXT_VERSION", "TRAIN_KEYS", "CachedModel", "DamagedModelError",
    "TrainJob", "cached_model", "clean_stale_corpora", "compact_model", "default_workers", "full_model_file",
    "in_vocabulary", "load_model", "meta_file", "model_path", "prefetch_models", "read_text_lines", "sha256_of",
    "split_words", "stored_file", "tokenizer_fingerprint", "train_model", "usable", "word_vectors",
    "zeroed_allocations",
]

log = logging.getLogger(__name__)

FASTTEXT_VERSION = 1  # bump when training or corpus writing changes: cached models are then retrained


def tokenizer_fingerprint(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class CachedModel:
    model: Any
    path: Path | None  # None when trained without a cache
    key: str
    cached: bool  # found in the cache rather than trained now
    corpus_lines: int | None = None


def cached_model(cache_dir: Path | None, kind: str, inputs: dict[str, Any], settings: dict[str, Any],
                 write_corpus: Callable[[Any], int], *, keep_corpus: Path | None = None) -> CachedModel:
    """The model trained on the corpus ``write_corpus(file)`` writes (it returns the number of lines), with
    ``settings``; looked up in / stored into ``cache_dir`` under the hash of ``(kind, inputs, settings)``.

    ``inputs`` must identify the corpus completely (content hashes, tokenizer fingerprint, recipe options).
    ``keep_corpus``: also write the corpus to that path (e.g. for inspection or for another tool).
    """
    key, path = model_path(cache_dir, kind, inputs, settings)
    if path is not None and keep_corpus is None and (found := _load_cached(path)) is not None:
        log.info("fastText %s: cached at %s", kind, stored_file(path))
        own_cost.shared(f"fastText {kind}", built=False)
        return CachedModel(found, stored_file(path), key, cached=True)
    t0 = time.perf_counter()
    if path is None:
        cm = _train(None, kind, key, inputs, settings, write_corpus, keep_corpus)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        # one process trains a model at a time; another that needs it waits, then finds it in the cache
        with exclusive(path, waiting=f"fastText {kind}: another process is training this model, waiting for it"):
            own_cost.exclude(own_cost.WAITING, time.perf_counter() - t0)  # (its training: the other's cell's)
            t0 = time.perf_counter()
            cm = _train(path, kind, key, inputs, settings, write_corpus, keep_corpus)
    own_cost.shared(f"fastText {kind}", built=not cm.cached,
                    seconds=None if cm.cached else time.perf_counter() - t0)
    return cm


def _train(path: Path | None, kind: str, key: str, inputs: dict[str, Any], settings: dict[str, Any],
           write_corpus: Callable[[Any], int], keep_corpus: Path | None) -> CachedModel:
    workdir = path.parent if path is not None else Path(tempfile.gettempdir())
    workdir.mkdir(parents=True, exist_ok=True)
    if path is not None:
        clean_stale_corpora(workdir, own=path)
        if keep_corpus is None and (found := _load_cached(path)) is not None:  # trained while this one waited
            log.info("fastText %s: cached at %s", kind, stored_file(path))
            return CachedModel(found, stored_file(path), key, cached=True)
    corpus = workdir / f".corpus-{kind}-{key}-{uuid.uuid4().hex[:8]}.txt"
    try:
        with open(corpus, "w", encoding="utf-8") as f:
            n_lines = write_corpus(f)
        if keep_corpus is not None:
            Path(keep_corpus).parent.mkdir(parents=True, exist_ok=True)
            Path(keep_corpus).write_bytes(corpus.read_bytes())
        if n_lines == 0:
            raise MissingResourceError(f"fastText {kind}: the training corpus is empty")
        if path is not None and (found := _load_cached(path)) is not None:
            return CachedModel(found, stored_file(path), key, cached=True, corpus_lines=n_lines)
        from harness.core.progress import activity

        with activity(f"fastText {kind}: training on {n_lines} lines"):
            model = train_model(corpus, settings)
    finally:
        corpus.unlink(missing_ok=True)
    if not model.get_words():
        raise MissingResourceError(f"fastText {kind}: no word reached minCount={settings.get('minCount')}; "
                                   f"give more text or a lower minCount")
    if path is not None:
        _store(model, path, {"kind": kind, "key": key, "inputs": inputs, "settings": settings, "lines": n_lines})
        path = stored_file(path)
    return CachedModel(model, path, key, cached=False, corpus_lines=n_lines)


def model_path(cache_dir: Path | None, kind: str, inputs: dict[str, Any],
               settings: dict[str, Any]) -> tuple[str, Path | None]:
    """The cache key and file of the model :func:`cached_model` trains for these arguments (the ``.bin`` name;
    :func:`stored_file` says which file holds it)."""
    key = hash_obj({"v": FASTTEXT_VERSION, "kind": kind, "inputs": inputs, "settings": settings})
    return key, (Path(cache_dir) / "fasttext" / f"{kind}-{key}.bin" if cache_dir is not None else None)


def clean_stale_corpora(folder: Path, own: Path | None = None) -> int:
    """Remove training corpora (``.corpus-<kind>-<key>-<id>.txt``) left in ``folder`` by a process killed while
    training: those whose model's lock (``<kind>-<key>.bin``, held from before the corpus is written until the
    model is stored) is free, whatever their age. A corpus still waiting for its training, however long, stays.
    ``own``: the model whose lock the caller holds and has written no corpus for yet (its corpora are stale too)."""
    from harness.core.cache import builders_of
    from harness.core.locks import held

    n = 0
    for p in folder.glob(".corpus-*"):
        try:
            if not any(held(b) for b in builders_of(p) if b != own):
                p.unlink()
                n += 1
        except OSError:
            pass
    return n


def stored_file(path: Path) -> Path:
    """The file that holds the cached model named ``path`` (``<kind>-<key>.bin``): its compact form when there is
    one, else the ``.bin`` itself."""
    compact = Path(path).with_suffix(COMPACT_SUFFIX)
    return compact if compact.is_file() else Path(path)


def usable(path: Path) -> bool:
    """The cached model ``path`` (its compact form, or a full ``.bin`` cached before) exists and matches the size
    and sha256 its ``.json`` records. A damaged one (a truncated or changed file, an unreadable ``.json``, a file
    without its ``.json``) is reported in one warning line and removed, so that it is trained again; it is never
    loaded. (A ``.json`` written before these checks, without a sha256, is trusted for a ``.bin``.)"""
    path = Path(path)
    target = stored_file(path)
    if not target.is_file():
        return False
    meta_path = meta_file(path)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        problem = None
        if not isinstance(meta, dict):
            problem = f"{meta_path.name} is not an object"
        elif target.suffix == COMPACT_SUFFIX and meta.get("format") != COMPACT_FORMAT:
            problem = f"{meta_path.name} does not describe a compact model"
        elif "sha256" in meta:
            size = target.stat().st_size
            if size != meta.get("size"):
                problem = f"{size} bytes, {meta.get('size')} expected"
            elif sha256_of(target) != meta["sha256"]:
                problem = "it does not match its sha256"
    except FileNotFoundError:
        problem = f"{meta_path.name} is missing"
    except (OSError, ValueError) as exc:
        problem = f"{meta_path.name} is unreadable ({type(exc).__name__})"
    if problem is None:
        return True
    log.warning("fastText model %s is damaged (%s); removing it and training it again", target, problem)
    for p in (target, path, meta_path):
        p.unlink(missing_ok=True)
    return False


def _load_cached(path: Path) -> Any | None:
    """The cached model ``path`` if it is usable and reads back as recorded, else None (a damaged one removed). It is
    leased while it is checked and read (``<kind>-<key>.bin.lease``, :func:`harness.core.cache.lease`): no
    ``harness cache prune`` removes it meanwhile; once read, the model is in memory and the lease is dropped."""
    from harness.core.cache import lease, release_lease

    if not stored_file(path).is_file():
        return None
    lease(path)
    try:
        if not usable(path):
            return None
        return load_model(path)
    except DamagedModelError as exc:
        log.warning("fastText model %s is damaged (%s); removing it and training it again", stored_file(path), exc)
        for p in (stored_file(path), path, meta_file(path)):
            p.unlink(missing_ok=True)
        return None
    finally:
        release_lease(path)


def _store(model: Any, path: Path, meta: dict[str, Any]) -> None:
    """Store a trained model under ``path`` in compact form (the full ``.bin`` when it cannot be compacted):
    written to temporary files, the ``.json`` next, the model file renamed into place last (its presence means
    the model is complete)."""
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.bin")
    tmp_compact = tmp.with_suffix(COMPACT_SUFFIX)
    try:
        model.save_model(str(tmp))
        meta = {**meta, "words": len(model.get_words())}
        compact = compact_model(tmp, tmp_compact)
        if compact is not None:
            meta.update(compact)
            final, written = path.with_suffix(COMPACT_SUFFIX), tmp_compact
        else:
            meta.update(size=tmp.stat().st_size, sha256=sha256_of(tmp))
            final, written = path, tmp
        meta_tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.json")
        meta_tmp.write_text(json.dumps(meta, indent=1, ensure_ascii=False, default=str), encoding="utf-8")
        os.replace(meta_tmp, meta_file(path))
        os.replace(written, final)
    finally:
        tmp.unlink(missing_ok=True)
        tmp_compact.unlink(missing_ok=True)
    log.info("fastText %s: trained on %d lines, %d words; cached at %s (%d bytes)", meta["kind"], meta["lines"],
             meta["words"], final, meta["size"])


@dataclass
class TrainJob:
    """One model for :func:`prefetch_models`: the arguments :func:`cached_model` would get."""

    kind: str
    inputs: dict[str, Any]
    settings: dict[str, Any]
    write_corpus: Callable[[Any], int]


def default_workers() -> int:
    from harness.core.hosts import available_cpus

    return max(1, available_cpus())


def prefetch_models(cache_dir: Path | None, jobs: list[TrainJob], workers: int | None = None,
                    progress: Callable[[int], None] | None = None) -> int:
    """Train the models of ``jobs`` that are not cached yet, up to ``workers`` at a time, each in its own forked
    process with its own settings (one fastText thread each), so every model is bit-for-bit the one
    :func:`cached_model` would train alone; the later ``cached_model`` calls then find them in the cache. The
    corpora are written here, in this process (their writers may use tokenizers that must not run after a fork);
    only training happens in the children. A child that fails leaves nothing behind, and the caller's own
    ``cached_model`` call trains (and reports) that model. Returns the number of models trained."""
    workers = default_workers() if workers is None else int(workers)
    if cache_dir is None or workers <= 1 or not hasattr(os, "fork"):
        return 0
    todo = []
    for job in jobs:
        key, path = model_path(cache_dir, job.kind, job.inputs, job.settings)
        if path is not None and not usable(path) and all(path != t[1] for t in todo):
            todo.append((job, path, key))
    if len(todo) < 2:
        return 0  # nothing to run side by side
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    running: list[tuple[Any, Path, int, tuple[str, float]]] = []  # (.., its model's kind and when it started)
    trained = 0

    def reap(block: bool) -> None:
        nonlocal trained
        for proc, corpus, fd, started in list(running):
            if block or not proc.is_alive():
                proc.join()
                corpus.unlink(missing_ok=True)
                release(fd)
                running.remove((proc, corpus, fd, started))
                trained += _trained(started, proc.exitcode)
                if progress is not None:
                    progress(1)
                if block:
                    return

    try:
        for job, path, key in todo:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = try_exclusive(path)  # held (by this process and the child) until the child is reaped
            if fd is None:
                continue  # another process is training it; the caller's cached_model waits for it
            if usable(path):  # trained by another process since the list was made
                release(fd)
                continue
            corpus = path.parent / f".corpus-{job.kind}-{key}-{uuid.uuid4().hex[:8]}.txt"
            try:
                with open(corpus, "w", encoding="utf-8") as f:
                    n_lines = job.write_corpus(f)
            except BaseException:
                release(fd)
                raise
            if n_lines == 0:
                corpus.unlink(missing_ok=True)
                release(fd)
                continue
            while len(running) >= workers:
                reap(block=True)
            meta = {"kind": job.kind, "key": key, "inputs": job.inputs, "settings": job.settings, "lines": n_lines}
            proc = ctx.Process(target=_train_child, args=(corpus, job.settings, path, meta, os.getpid()),
                               daemon=True)
            try:
                proc.start()
            except BaseException:
                release(fd)
                raise
            running.append((proc, corpus, fd, (job.kind, time.perf_counter())))
        while running:
            reap(block=True)
    except BaseException:  # stopped (SIGINT/SIGTERM) or failed here: the children stop too, no model is stored
        from harness.core.processes import stop_processes

        stop_processes([proc for proc, *_ in running])
        for _, corpus, fd, _ in running:
            corpus.unlink(missing_ok=True)
            release(fd)
        raise
    return trained


def _trained(started: tuple[str, float], exitcode: int | None) -> int:
    """1 when a side-by-side training succeeded (then noted as a product this cell built, :mod:`methods.own_cost`:
    its training is this cell's cost), else 0."""
    if exitcode != 0:
        return 0
    own_cost.shared(f"fastText {started[0]}", True, time.perf_counter() - started[1])
    return 1


def _train_child(corpus: Path, settings: dict[str, Any], path: Path, meta: dict[str, Any],
                 parent_pid: int | None = None) -> None:
    from harness.core.faults import install_fault_hook
    from harness.core.processes import die_with_parent

    die_with_parent(parent_pid)  # never stores a model once the process that asked for it is gone
    install_fault_hook()
    try:
        model = train_model(corpus, settings)
        if not model.get_words():
            os._exit(3)
        _store(model, path, meta)
    except BaseException:  # noqa: BLE001 - the parent retrains and reports
        os._exit(1)
    os._exit(0)


def word_vectors(model: Any, words: Iterable[str]) -> np.ndarray:
    """``get_word_vector`` of each word (fastText's subword composition for out-of-vocabulary words; zeros when
    no n-gram of the word is known) as a float32 matrix."""
    words = list(words)
    out = np.zeros((len(words), model.get_dimension()), dtype=np.float32)
    for i, w in enumerate(words):
        out[i] = model.get_word_vector(w)
    return out


def in_vocabulary(model: Any, words: Iterable[str]) -> np.ndarray:
    """Whether each word is in the model's vocabulary (it reached minCount)."""
    return np.array([model.get_word_id(w) != -1 for w in words], dtype=bool)


_WORD_RE = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]", re.UNICODE)


def split_words(line: str) -> list[str]:
    """The word tokenizer used to train word-level vectors on a world's text: runs of word characters (with
    inner apostrophes and hyphens), and every other non-space character on its own. (WECHSEL's helper uses
    NLTK's ``word_tokenize``, which needs per-language Punkt data; this needs nothing.)"""
    return _WORD_RE.findall(line)


def read_text_lines(path: Path, max_lines: int | None = None) -> Iterable[str]:
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if max_lines is not None and i >= max_lines:
                break
            line = line.strip()
            if line:
                yield line
