"""fastText for FOCUS, WECHSEL and Tik-to-Tok: deterministic training, a content-addressed model cache, vectors.

Determinism
-----------
Training is single-threaded (``thread=1``) and seeded (fastText's own ``seed`` argument, which the Python
wrapper's ``train_unsupervised`` does not accept; :func:`train_model` passes it through the same argument builder).
That alone is not enough: fastText initializes its input matrix in ten blocks, one per thread, and with fewer than
ten threads only the first block(s) are drawn (fastText issue #1061); the other rows keep whatever the allocator
returns. For a large matrix that is fresh zeroed pages, for a small one it can be leftover heap memory (observed:
values of 1e23, different on every run). :func:`zeroed_allocations` makes glibc hand out zero-filled memory
while fastText trains (``mallopt(M_PERTURB, 255)``), so the rows outside the first tenth start at exactly zero,
which is what fastText does with fresh memory and fewer than ten threads; training then is bit-for-bit
reproducible. On a platform without glibc the trainer warns that results may vary between runs.

The price: n-gram rows that start at zero make training converge more slowly. On a tiny corpus (the synthetic
world's 10k tokens per language) a few epochs leave the vectors nearly parallel (median cosine 0.999 at 3 epochs,
where a fully initialized model gives 0.89; at 10 epochs both give about 0.37). Every method therefore takes a
``threads`` parameter: 10 or more initializes every row (as the reference code does on a machine with 10+
cores) at the cost of reproducibility.

Cache
-----
A trained model lives at ``<cache_dir>/fasttext/<kind>-<key>.bin`` with a ``.json`` beside it, where ``key`` is
the hash of everything that went into it (the content hashes of its input files, the tokenizer fingerprint, the
corpus recipe and every training setting). It is written to a temporary file and renamed into place, so a killed
run leaves no half model behind; the ``.json`` records the ``.bin``'s size and sha256, and a cached model that does
not match them (or has no ``.json``) is reported, removed and trained again, never loaded (:func:`usable`). Models are large: ``(words + bucket) x dim`` floats (fastText's default
``bucket`` of 2,000,000 at dim 300 is 2.4 GB); the ``bucket`` setting of each method makes them smaller.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, MissingResourceError
from harness.hashing import hash_obj

log = logging.getLogger(__name__)

FASTTEXT_VERSION = 1  # bump when training or corpus writing changes: cached models are then retrained
M_PERTURB = -6  # glibc mallopt parameter
_ALLOC_LOCK = threading.Lock()

# settings a method may pass (fastText's names); everything else is an error
TRAIN_KEYS = ("model", "dim", "epoch", "minCount", "minn", "maxn", "neg", "ws", "lr", "bucket", "t",
              "lrUpdateRate", "wordNgrams", "loss", "seed", "thread")


def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        return lib if hasattr(lib, "mallopt") else None
    except OSError:
        return None


@contextmanager
def zeroed_allocations():
    """While inside, glibc's ``malloc`` returns zero-filled memory (see the module docstring)."""
    lib = _libc()
    with _ALLOC_LOCK:
        if lib is None or not lib.mallopt(M_PERTURB, 255):
            log.warning("fastText: cannot make allocations zero-filled on this platform (no glibc mallopt); "
                        "models trained with fewer than 10 threads may differ between runs")
            yield
            return
        try:
            yield
        finally:
            lib.mallopt(M_PERTURB, 0)


def train_model(corpus: Path, settings: dict[str, Any]) -> Any:
    """Train an unsupervised fastText model on ``corpus`` (one text per line, tokens separated by spaces),
    seeded, with zero-filled allocations; single-threaded unless ``settings["thread"]`` says otherwise (more than
    one thread is not reproducible: fastText's threads update the model without locks). ``settings`` use
    fastText's names."""
    from fasttext import FastText as _ft

    unknown = set(settings) - set(TRAIN_KEYS)
    if unknown:
        raise ConfigError(f"fastText settings {sorted(unknown)} are not supported; use {list(TRAIN_KEYS)}")
    args = dict(_ft.unsupervised_default)
    args.update({k: v for k, v in settings.items() if v is not None})
    args.update(input=str(corpus), verbose=0, pretrainedVectors="")
    args["thread"] = int(settings.get("thread") or 1)
    for key in ("dim", "epoch", "minCount", "minn", "maxn", "neg", "ws", "bucket", "seed", "lrUpdateRate",
                "wordNgrams"):
        args[key] = int(args[key])
    for key in ("lr", "t"):
        args[key] = float(args[key])
    built = _ft._build_args(args, set(args))
    model = _ft._FastText(args=built)
    with zeroed_allocations():
        _ft.fasttext.train(model.f, built)  # the pybind module, as train_unsupervised calls it
    model.set_args(model.f.getArgs())
    return model


def load_model(path: Path | str) -> Any:
    """A fastText ``.bin`` model (trained by us or the user's ``cc.xx.300.bin``)."""
    from fasttext import FastText as _ft

    p = Path(path).expanduser()
    if not p.is_file():
        raise MissingResourceError(f"fastText model {p} does not exist; give the path of a fastText .bin file")
    return _ft._FastText(model_path=str(p))


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


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
    if path is not None and usable(path) and keep_corpus is None:
        log.info("fastText %s: cached at %s", kind, path)
        return CachedModel(load_model(path), path, key, cached=True)
    workdir = path.parent if path is not None else Path(tempfile.gettempdir())
    workdir.mkdir(parents=True, exist_ok=True)
    if path is not None:
        clean_stale_corpora(workdir)
    corpus = workdir / f".corpus-{kind}-{key}-{uuid.uuid4().hex[:8]}.txt"
    try:
        with open(corpus, "w", encoding="utf-8") as f:
            n_lines = write_corpus(f)
        if keep_corpus is not None:
            Path(keep_corpus).parent.mkdir(parents=True, exist_ok=True)
            Path(keep_corpus).write_bytes(corpus.read_bytes())
        if n_lines == 0:
            raise MissingResourceError(f"fastText {kind}: the training corpus is empty")
        if path is not None and usable(path):
            return CachedModel(load_model(path), path, key, cached=True, corpus_lines=n_lines)
        from harness.progress import activity

        with activity(f"fastText {kind}: training on {n_lines} lines"):
            model = train_model(corpus, settings)
    finally:
        corpus.unlink(missing_ok=True)
    if not model.get_words():
        raise MissingResourceError(f"fastText {kind}: no word reached minCount={settings.get('minCount')}; "
                                   f"give more text or a lower minCount")
    if path is not None:
        _store(model, path, {"kind": kind, "key": key, "inputs": inputs, "settings": settings, "lines": n_lines})
    return CachedModel(model, path, key, cached=False, corpus_lines=n_lines)


def model_path(cache_dir: Path | None, kind: str, inputs: dict[str, Any],
               settings: dict[str, Any]) -> tuple[str, Path | None]:
    """The cache key and file of the model :func:`cached_model` trains for these arguments."""
    key = hash_obj({"v": FASTTEXT_VERSION, "kind": kind, "inputs": inputs, "settings": settings})
    return key, (Path(cache_dir) / "fasttext" / f"{kind}-{key}.bin" if cache_dir is not None else None)


def clean_stale_corpora(folder: Path, older_than_s: float = 3600) -> int:
    """Remove training corpora (``.corpus-*``) left in ``folder`` by a process killed while training."""
    import time

    n = 0
    for p in folder.glob(".corpus-*"):
        try:
            if time.time() - p.stat().st_mtime > older_than_s:
                p.unlink()
                n += 1
        except OSError:
            pass
    return n


def usable(path: Path) -> bool:
    """The cached model ``path`` exists and matches the size and sha256 its ``.json`` records. A damaged one (a
    truncated or changed ``.bin``, an unreadable ``.json``, a ``.bin`` without its ``.json``) is reported in one
    warning line and removed, so that it is trained again; it is never loaded. (A ``.json`` written before these
    checks, without a sha256, is trusted.)"""
    if not path.is_file():
        return False
    meta_path = path.with_suffix(".json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        problem = None
        if not isinstance(meta, dict):
            problem = f"{meta_path.name} is not an object"
        elif "sha256" in meta:
            size = path.stat().st_size
            if size != meta.get("size"):
                problem = f"{size} bytes, {meta.get('size')} expected"
            elif sha256_of(path) != meta["sha256"]:
                problem = "it does not match its sha256"
    except FileNotFoundError:
        problem = f"{meta_path.name} is missing"
    except (OSError, ValueError) as exc:
        problem = f"{meta_path.name} is unreadable ({type(exc).__name__})"
    if problem is None:
        return True
    log.warning("fastText model %s is damaged (%s); removing it and training it again", path, problem)
    for p in (path, meta_path):
        p.unlink(missing_ok=True)
    return False


def _store(model: Any, path: Path, meta: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.bin")
    model.save_model(str(tmp))
    meta = {**meta, "words": len(model.get_words()), "size": tmp.stat().st_size, "sha256": sha256_of(tmp)}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, ensure_ascii=False, default=str),
                                         encoding="utf-8")
    os.replace(tmp, path)  # the .bin last: its presence means the model is complete
    log.info("fastText %s: trained on %d lines, %d words; cached at %s", meta["kind"], meta["lines"],
             meta["words"], path)


@dataclass
class TrainJob:
    """One model for :func:`prefetch_models`: the arguments :func:`cached_model` would get."""

    kind: str
    inputs: dict[str, Any]
    settings: dict[str, Any]
    write_corpus: Callable[[Any], int]


def default_workers() -> int:
    from harness.hosts import available_cpus

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
    running: list[tuple[Any, Path]] = []
    trained = 0

    def reap(block: bool) -> None:
        nonlocal trained
        for proc, corpus in list(running):
            if block or not proc.is_alive():
                proc.join()
                corpus.unlink(missing_ok=True)
                running.remove((proc, corpus))
                trained += proc.exitcode == 0
                if progress is not None:
                    progress(1)
                if block:
                    return

    try:
        for job, path, key in todo:
            path.parent.mkdir(parents=True, exist_ok=True)
            corpus = path.parent / f".corpus-{job.kind}-{key}-{uuid.uuid4().hex[:8]}.txt"
            with open(corpus, "w", encoding="utf-8") as f:
                n_lines = job.write_corpus(f)
            if n_lines == 0:
                corpus.unlink(missing_ok=True)
                continue
            while len(running) >= workers:
                reap(block=True)
            meta = {"kind": job.kind, "key": key, "inputs": job.inputs, "settings": job.settings, "lines": n_lines}
            proc = ctx.Process(target=_train_child, args=(corpus, job.settings, path, meta, os.getpid()),
                               daemon=True)
            proc.start()
            running.append((proc, corpus))
        while running:
            reap(block=True)
    except BaseException:  # stopped (SIGINT/SIGTERM) or failed here: the children stop too, no model is stored
        from harness.lifecycle import stop_processes

        stop_processes([proc for proc, _ in running])
        for _, corpus in running:
            corpus.unlink(missing_ok=True)
        raise
    return trained


def _train_child(corpus: Path, settings: dict[str, Any], path: Path, meta: dict[str, Any],
                 parent_pid: int | None = None) -> None:
    from harness.lifecycle import die_with_parent, install_fault_hook

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
