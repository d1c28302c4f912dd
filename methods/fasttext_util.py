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

Compact form
------------
A model is cached in a compact form, ``<kind>-<key>.npz`` (:func:`compact_model`): fastText's file with the
input matrix's all-zero rows left out (the n-gram buckets no word of the corpus reached, most of them for a small
corpus; a bitmap says which rows are kept), the kept rows stored byte-plane by byte-plane and deflated, and the
output matrix left out (nothing here reads it: a word's vector is built from input rows only; the model read back
has zeros there). :func:`load_model` rebuilds the file in memory, checks it against the sha256 recorded at
compaction, and lets fastText read it: every input row, hence every ``get_word_vector``, is bit for bit the trained
model's. The ``.json`` records the compact file's size and sha256 (a damaged one is removed and trained again) and
the original ``.bin``'s. A ``.bin`` cached before (the full file) is still read as it is.
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

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.hashing import hash_obj

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
    """A fastText ``.bin`` model (trained by us or the user's ``cc.xx.300.bin``), or a cached model in compact
    form (a ``.npz`` written by :func:`compact_model`; also found for the ``.bin`` path it stands for)."""
    from fasttext import FastText as _ft

    p = Path(path).expanduser()
    if p.suffix == ".bin" and not p.is_file() and p.with_suffix(COMPACT_SUFFIX).is_file():
        p = p.with_suffix(COMPACT_SUFFIX)
    if not p.is_file():
        raise MissingResourceError(f"fastText model {p} does not exist; give the path of a fastText .bin file")
    if p.suffix == COMPACT_SUFFIX:
        return _load_compact(p)
    return _ft._FastText(model_path=str(p))


# -- compact form --------------------------------------------------------------------------------------------
class DamagedModelError(MissingResourceError):
    """A compact model that does not read back as it was recorded."""


COMPACT_SUFFIX = ".npz"
COMPACT_FORMAT = "fasttext-rows-v1"
_MAGIC = 793712314  # fastText's file signature
_ARGS_BYTES = 12 * 4 + 8  # Args::save: twelve int32 and one double


def _layout(data: bytes) -> tuple[int, int, int, int] | None:
    """(start of the input matrix's floats, its rows, its columns, start of the output matrix's floats) in a
    fastText ``.bin`` file's bytes, or None when the file is not one this module compacts (another version, a
    quantized model, bytes after the output matrix)."""
    import struct

    try:
        magic, version = struct.unpack_from("<ii", data, 0)
        if magic != _MAGIC or version != 12:
            return None
        pos = 8 + _ARGS_BYTES
        size, _nwords, _nlabels, _ntokens, prune = struct.unpack_from("<iiiqq", data, pos)
        pos += 28
        for _ in range(size):  # entry: the word, a NUL, int64 count, int8 type
            pos = data.index(b"\0", pos) + 1 + 8 + 1
        pos += max(prune, 0) * 8
        if data[pos] != 0:  # a quantized input matrix
            return None
        m, n = struct.unpack_from("<qq", data, pos + 1)
        start = pos + 1 + 16
        out = start + m * n * 4
        if data[out] != 0:  # a quantized output matrix
            return None
        m_out, n_out = struct.unpack_from("<qq", data, out + 1)
        if out + 17 + m_out * n_out * 4 != len(data):
            return None
        return start, int(m), int(n), out + 17
    except (struct.error, ValueError, IndexError):
        return None


def compact_model(bin_path: Path, out_path: Path) -> dict[str, Any] | None:
    """Write the compact form of the fastText file ``bin_path`` to ``out_path`` (see the module docstring);
    returns what the ``.json`` records about it, or None (nothing written) when the file cannot be compacted."""
    data = Path(bin_path).read_bytes()
    layout = _layout(data)
    if layout is None:
        return None
    start, m, n, out_start = layout
    matrix = np.frombuffer(data, dtype=np.uint32, count=m * n, offset=start).reshape(m, n)
    kept = (matrix != 0).any(axis=1)  # bitwise: a -0.0 is kept
    rows = matrix[kept]
    planes = rows.view(np.uint8).reshape(-1, 4).T  # byte 0 of every float, then byte 1 ...: deflates better
    head = np.frombuffer(data, dtype=np.uint8, count=start)
    tail_head = np.frombuffer(data, dtype=np.uint8, count=17, offset=out_start - 17)
    read = hashlib.sha256()
    for block in _rebuilt_blocks(head.tobytes(), kept, rows, n, tail_head.tobytes()):
        read.update(block)
    tmp = out_path.with_name(f".{out_path.name}.{uuid.uuid4().hex[:8]}.tmp.npz")
    try:
        _write_npz(tmp, {"format": np.array(COMPACT_FORMAT), "head": head, "kept": np.packbits(kept),
                         "shape": np.array([m, n, int(kept.sum())], np.int64), "tail_head": tail_head,
                         # the low bytes of a float are noise to deflate: stored; the high ones (sign, exponent)
                         # deflate to a fraction
                         "rows_low": np.ascontiguousarray(planes[:2]), "rows_high": np.ascontiguousarray(planes[2:])},
                   deflated={"head", "kept", "rows_high"})
        info = {"format": COMPACT_FORMAT, "size": tmp.stat().st_size, "sha256": sha256_of(tmp),
                "read_sha256": read.hexdigest(), "rows_kept": int(kept.sum()), "rows": m,
                "bin_size": len(data), "bin_sha256": hashlib.sha256(data).hexdigest()}
        os.replace(tmp, out_path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return info


def _write_npz(path: Path, arrays: dict[str, np.ndarray], deflated: set[str]) -> None:
    """An ``.npz`` (``np.load`` reads it) whose members in ``deflated`` are deflated and the others stored."""
    import zipfile

    with zipfile.ZipFile(path, "w", allowZip64=True) as zf:
        for name, arr in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            member.compress_type = zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED
            with zf.open(member, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)


def _rebuilt_blocks(head: bytes, kept: np.ndarray, rows: np.ndarray, n: int, tail_head: bytes):
    """The bytes of the file the compact form stands for, in blocks: the head, the input matrix (kept rows in
    place, zeros elsewhere), the output matrix's header and its zeros."""
    import struct

    yield head
    matrix = np.zeros((len(kept), n), dtype=np.uint32)
    matrix[kept] = rows
    yield memoryview(matrix).cast("B")
    del matrix
    yield tail_head
    m_out, n_out = struct.unpack_from("<qq", tail_head, 1)
    chunk = bytes(1 << 20)
    left = m_out * n_out * 4
    while left > 0:
        yield chunk[:min(left, len(chunk))]
        left -= len(chunk)


def _read_compact(path: Path) -> tuple[bytes, np.ndarray, np.ndarray, int, bytes]:
    """(head, kept-row mask, kept rows as uint32, columns, output header) of a compact model file."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["format"]) != COMPACT_FORMAT:
                raise DamagedModelError(f"fastText model {path}: unknown compact format {z['format']}")
            m, n, k = (int(v) for v in z["shape"])
            planes = np.concatenate([z["rows_low"], z["rows_high"]])
            rows = np.ascontiguousarray(planes.T).view(np.uint32).reshape(k, n)
            kept = np.unpackbits(z["kept"], count=m).astype(bool)
            return z["head"].tobytes(), kept, rows, n, z["tail_head"].tobytes()
    except (OSError, ValueError, KeyError) as exc:  # not a readable .npz
        raise DamagedModelError(f"fastText model {path} is unreadable ({type(exc).__name__})") from exc


def _load_compact(path: Path) -> Any:
    from fasttext import FastText as _ft

    meta = _read_meta(path)
    head, kept, rows, n, tail_head = _read_compact(path)
    digest = hashlib.sha256()
    fd, name = _scratch_file()
    try:
        with os.fdopen(fd, "wb", closefd=False) as f:
            for block in _rebuilt_blocks(head, kept, rows, n, tail_head):
                digest.update(block)
                f.write(block)
        want = (meta or {}).get("read_sha256")
        if want is not None and digest.hexdigest() != want:
            raise DamagedModelError(f"fastText model {path}: the rebuilt model does not match its sha256")
        return _ft._FastText(model_path=name)
    finally:
        os.close(fd)
        if not name.startswith("/proc/"):
            Path(name).unlink(missing_ok=True)


def full_model_file(path: Path | str, folder: Path) -> Path:
    """A fastText ``.bin`` file of the model at ``path`` for a tool that reads fastText files itself (the
    reference implementations): ``path`` when it is one, else the compact model rebuilt into ``folder``."""
    p = Path(path)
    if p.suffix != COMPACT_SUFFIX:
        return p
    out = Path(folder) / p.with_suffix(".bin").name
    if not out.is_file():
        head, kept, rows, n, tail_head = _read_compact(p)
        tmp = out.with_name(f".{out.name}.{uuid.uuid4().hex[:8]}")
        with open(tmp, "wb") as f:
            for block in _rebuilt_blocks(head, kept, rows, n, tail_head):
                f.write(block)
        os.replace(tmp, out)
    return out


def _scratch_file() -> tuple[int, str]:
    """A file for the rebuilt model: in memory where the platform has ``memfd_create``, else a temporary file."""
    if hasattr(os, "memfd_create"):
        try:
            fd = os.memfd_create("fasttext-model")
            return fd, f"/proc/self/fd/{fd}"
        except OSError:
            pass
    fd, name = tempfile.mkstemp(suffix=".bin")
    return fd, name


def _read_meta(path: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads(_meta_path(path).read_text(encoding="utf-8"))
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".json")


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
    if path is not None and keep_corpus is None and (found := _load_cached(path)) is not None:
        log.info("fastText %s: cached at %s", kind, stored_file(path))
        return CachedModel(found, stored_file(path), key, cached=True)
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
    meta_path = _meta_path(path)
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
    """The cached model ``path`` if it is usable and reads back as recorded, else None (a damaged one removed)."""
    if not usable(path):
        return None
    try:
        return load_model(path)
    except DamagedModelError as exc:
        log.warning("fastText model %s is damaged (%s); removing it and training it again", stored_file(path), exc)
        for p in (stored_file(path), path, _meta_path(path)):
            p.unlink(missing_ok=True)
        return None


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
        os.replace(meta_tmp, _meta_path(path))
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
        from harness.core.lifecycle import stop_processes

        stop_processes([proc for proc, _ in running])
        for _, corpus in running:
            corpus.unlink(missing_ok=True)
        raise
    return trained


def _train_child(corpus: Path, settings: dict[str, Any], path: Path, meta: dict[str, Any],
                 parent_pid: int | None = None) -> None:
    from harness.core.lifecycle import die_with_parent, install_fault_hook

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
