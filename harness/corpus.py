"""The CPT corpus: tokenized once, memory-mapped by every cell, torchrun rank and data-loader worker.

A corpus is a product of the cache (:class:`harness.core.cache.ProductCache`, kind ``corpus``: built in a
temporary folder, renamed into place with a marker that records every file's sha256, so a killed build leaves
nothing a later run uses) keyed by what its token ids depend on: the sha256 of each language's CPT text file, the
tokenizer's digest, the languages in their order, the cap on sentences per language and the block size. Every
method, seed and cell of a world shares it: the second cell on the same world starts its CPT without tokenizing.

On disk: ``tokens.bin``, the token ids of every full block, languages in the given order, in the smallest unsigned
integer type that holds the vocabulary (uint16 for a vocabulary up to 65,536 ids, uint32 above: XLM-R's 250k),
and ``index.json``, the block index (each language's first block and block count, the dtype, the block size).
A NumPy memmap, not the ``datasets`` library's Arrow files: every block has the same length, so the index is
arithmetic (block ``i`` is ids ``[i * block_size, (i + 1) * block_size)``), a block is read with one slice of the
mapped file and no decoding, the file is plain bytes that the cache's checksums cover as they are, and nothing
depends on the datasets cache's own fingerprints and folders.

The build streams: each language's file is read line by line in chunks of lines (never its whole text), the
chunks are tokenized in worker processes, one per core, each with a single-threaded copy of the fast tokenizer,
a bounded number of chunks in flight, and the ids are appended to ``tokens.bin`` as they come back, in order. Its
memory does not grow with the corpus. A small corpus (the toy worlds) is tokenized in this process.

The blocks are those of :func:`harness.cpt.cpt_blocks` (the reference path), in the same order: each line
tokenized on its own with the tokenizer's special tokens, a language's ids concatenated and cut into full blocks,
and the blocks of all languages shuffled together by ``random.Random(seed).shuffle``: here a permutation of the
block indices, :func:`block_order` (the data never move). The training set is :class:`CorpusDataset`, a view that
holds the file's path and the order's, opens both lazily in each process and pickles as paths.

Language sampling (``[cpt] language_sampling``): ``"shuffled"`` (the default, above) or ``"smoothed"``, the
per-language sampling of XLM-R and Glot500-m: each position of the training order draws a language with
probability q_i proportional to p_i ** alpha (p_i its share of the blocks; ``sampling_alpha``, default 0.3 as
Glot500-m), then that language's next block in a seeded order of its own (re-shuffled when exhausted), so
low-resource languages are seen more often and high-resource ones less.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import random
import weakref
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

KIND = "corpus"
TOKENS = "tokens.bin"
INDEX = "index.json"
CHUNK_LINES = 2048  # lines per tokenization task
INLINE_BYTES = 8 << 20  # a corpus smaller than this is tokenized in this process (no worker start-up) ...
INLINE_LINES = 100_000  # ... and so is one capped to this many lines in all
WORKERS_ENV = "HARNESS_CORPUS_WORKERS"  # how many tokenizing processes (default: every core this process may use)
SAMPLING = ("shuffled", "smoothed")
DEFAULT_ALPHA = 0.3


# -- keys ------------------------------------------------------------------------------------------------------
_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a text file: the one its world's ``checksums.json`` records for it while the file's times are
    those recorded (the world's load checked them: :func:`harness.worlds.check_world_files`), else hashed, once
    per process for a given (path, size, mtime)."""
    from harness.core.hashing import sha256_file

    st = Path(path).stat()
    memo = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = _world_recorded_sha256(Path(path), st) or sha256_file(Path(path))
    return _DIGESTS[memo]


def _world_recorded_sha256(path: Path, st: os.stat_result) -> str | None:
    """The sha256 the ``checksums.json`` of the world that holds ``path`` records for it, when its size and times
    are the recorded ones; None otherwise (no world around it, a record without digests, a file changed since)."""
    from harness.worlds import CHECKSUMS

    path = path.resolve()
    for root in list(path.parents)[:4]:
        if not (root / CHECKSUMS).is_file():
            continue
        try:
            record = json.loads((root / CHECKSUMS).read_text())
            rel = path.relative_to(root).as_posix()
            rec, size = (record.get("files") or {}).get(rel), (record.get("sizes") or {}).get(rel)
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(rec, dict) and size == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns \
                and rec.get("ctime_ns") == st.st_ctime_ns and isinstance(rec.get("sha256"), str):
            return rec["sha256"]
        return None
    return None


_TOKENIZER_DIGESTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_digest(tokenizer: Any) -> str:
    """sha256 of what decides a tokenizer's ids: the fast tokenizer's full definition (``to_str``: vocabulary,
    normalizer, pre-tokenizer, model, post-processor), its class and length; for a tokenizer without a backend,
    its vocabulary and special tokens. Computed once per tokenizer object."""
    try:
        size, digest = _TOKENIZER_DIGESTS[tokenizer]
        if size == len(tokenizer):  # (a token added since is a new digest)
            return digest
    except (KeyError, TypeError):
        pass
    digest = _tokenizer_digest(tokenizer)
    try:
        _TOKENIZER_DIGESTS[tokenizer] = (len(tokenizer), digest)
    except TypeError:  # not weakly referenceable
        pass
    return digest


def _tokenizer_digest(tokenizer: Any) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        text = backend.to_str()
    else:
        text = json.dumps([sorted(tokenizer.get_vocab().items()), getattr(tokenizer, "special_tokens_map", {})],
                          sort_keys=True, default=str)
    h = hashlib.sha256(f"{type(tokenizer).__name__}\n{len(tokenizer)}\n".encode())
    h.update(text.encode("utf-8"))
    return h.hexdigest()


def id_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds the ids ``0 .. vocab_size - 1``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.uint64)


def cpt_files(world: Any, languages: list[str]) -> dict[str, Path]:
    """{language: its CPT text file} for the ``languages`` that have one, in their order."""
    files = {p.stem: p for p in world.resource_files("cpt_text")}
    return {lang: files[lang] for lang in languages if lang in files}


def corpus_inputs(files: dict[str, Path], tokenizer: Any, block_size: int, max_sentences: int | None) -> dict:
    """The cache key's inputs of a corpus (file names do not enter it: only their contents)."""
    return {"texts": [[lang, file_sha256(p)] for lang, p in files.items()],
            "tokenizer": tokenizer_digest(tokenizer), "block_size": int(block_size),
            "max_sentences_per_language": int(max_sentences) if max_sentences else None, "format": 1}


# -- the corpus on disk ----------------------------------------------------------------------------------------
class Corpus:
    """A finished corpus product: its folder, its block index and (opened on first use) its memmapped ids."""

    def __init__(self, path: Path, built: bool = False):
        self.path = Path(path)
        self.built = built
        self.index = json.loads((self.path / INDEX).read_text())
        self._tokens: np.memmap | None = None

    @property
    def n_blocks(self) -> int:
        return int(self.index["n_blocks"])

    @property
    def block_size(self) -> int:
        return int(self.index["block_size"])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.index["dtype"])

    def tokens(self) -> np.ndarray:
        """The ids as a read-only (n_blocks, block_size) memmap."""
        if self._tokens is None:
            self._tokens = open_tokens(self.path / TOKENS, self.dtype, self.n_blocks, self.block_size)
        return self._tokens

    def language_blocks(self) -> dict[str, tuple[int, int]]:
        """{language: (first block, number of blocks)}."""
        return {x["lang"]: (int(x["first_block"]), int(x["blocks"])) for x in self.index["languages"]}


def open_tokens(path: Path, dtype: Any, n_blocks: int, block_size: int) -> np.ndarray:
    if n_blocks == 0:
        return np.zeros((0, block_size), dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(n_blocks, block_size))


def ensure_corpus(tokenizer: Any, world: Any, languages: list[str], block_size: int,
                  max_sentences: int | None, cache: Any = None, workers: int | None = None) -> Corpus:
    """The corpus of ``languages``' CPT text of ``world`` under ``tokenizer``, built now if no process built it
    before (one process builds, another that needs it meanwhile waits: the cache's lock). ``.built`` says which."""
    from harness.core.cache import ProductCache

    cache = cache or ProductCache()
    files = cpt_files(world, languages)
    inputs = corpus_inputs(files, tokenizer, block_size, max_sentences)
    built = []

    def build(tmp: Path) -> dict:
        built.append(True)
        info = build_corpus(tmp, tokenizer, files, block_size, max_sentences, workers=workers)
        return {"world": getattr(world, "name", None), "n_blocks": info["n_blocks"], "tokens": info["tokens"]}

    product = cache.get_or_build(KIND, inputs, build)
    return Corpus(product.path, built=bool(built))


# -- the build -------------------------------------------------------------------------------------------------
def read_line_chunks(path: Path, max_lines: int | None, chunk: int | None = None) -> Iterator[list[str]]:
    """The non-blank lines of ``path`` (as :func:`harness.worlds.base.read_lines` gives them, the first
    ``max_lines`` when set) in chunks of ``chunk`` lines, read as they are needed."""
    chunk = chunk or CHUNK_LINES
    n = 0
    out: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if max_lines and n >= max_lines:
                break
            out.append(line.rstrip("\n"))
            n += 1
            if len(out) >= chunk:
                yield out
                out = []
    if out:
        yield out


class _Encoder:
    """Token ids of a list of lines as one flat array: the fast tokenizer's own encoder (single-threaded, no
    truncation or padding), or, for a tokenizer whose call differs from its backend, the tokenizer's call."""

    def __init__(self, mode: str, payload: Any, dtype: str):
        self.mode, self.dtype = mode, np.dtype(dtype)
        if mode == "backend":
            from tokenizers import Tokenizer

            self.tok = Tokenizer.from_str(payload)
            self.tok.no_truncation()
            self.tok.no_padding()
        else:
            import pickle

            self.tok = pickle.loads(payload)

    def ids(self, lines: list[str]) -> list[list[int]]:
        if self.mode == "backend":
            enc = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
            return [e.ids for e in enc(lines, add_special_tokens=True)]
        return self.tok(lines, truncation=False)["input_ids"]

    def __call__(self, lines: list[str]) -> np.ndarray:
        seqs = self.ids(lines)
        flat = np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=sum(map(len, seqs)))
        if flat.size and (flat.min() < 0 or flat.max() > np.iinfo(self.dtype).max):
            raise ValueError(f"token id {int(flat.max())} does not fit {self.dtype}")
        return flat.astype(self.dtype)


_WORKER: _Encoder | None = None


def _init_worker(mode: str, payload: Any, dtype: str) -> None:
    global _WORKER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: the processes are the parallelism
    _WORKER = _Encoder(mode, payload, dtype)


def _encode_in_worker(lines: list[str]) -> np.ndarray:
    assert _WORKER is not None
    return _WORKER(lines)


def encoder_spec(tokenizer: Any, sample: list[str]) -> tuple[str, Any]:
    """How to tokenize in a worker: the backend's definition when it gives the tokenizer call's ids on
    ``sample`` (the first lines of every language), else the pickled tokenizer."""
    import pickle

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and sample:
        spec = ("backend", backend.to_str())
        if _Encoder(*spec, "int64").ids(sample) == tokenizer(sample, truncation=False)["input_ids"]:
            return spec
        log.info("the tokenizer's call differs from its backend's encoder; the corpus uses the call")
    return "call", pickle.dumps(tokenizer)


def default_workers() -> int:
    forced = os.environ.get(WORKERS_ENV)
    if forced:
        return max(1, int(forced))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _chunk_ids(encode: Any, chunks: Iterator[list[str]], pool: Any, window: int) -> Iterator[np.ndarray]:
    """The ids of each chunk, in order: in this process, or in ``pool`` with at most ``window`` chunks in
    flight (the rest of the file is not read before it is needed)."""
    if pool is None:
        saved = os.environ.get("TOKENIZERS_PARALLELISM")
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        try:
            for lines in chunks:
                yield encode(lines)
        finally:
            if saved is None:
                os.environ.pop("TOKENIZERS_PARALLELISM", None)
            else:
                os.environ["TOKENIZERS_PARALLELISM"] = saved
        return
    pending: deque = deque()
    for lines in chunks:
        pending.append(pool.submit(_encode_in_worker, lines))
        if len(pending) >= window:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def build_corpus(folder: Path, tokenizer: Any, files: dict[str, Path], block_size: int,
                 max_sentences: int | None, workers: int | None = None) -> dict[str, Any]:
    """Write ``tokens.bin`` and ``index.json`` of the corpus into ``folder`` (see the module's docstring)."""
    folder = Path(folder)
    block_size = int(block_size)
    dtype = id_dtype(len(tokenizer))
    sample = [line for p in files.values() for line in next(read_line_chunks(p, max_sentences, 64), [])]
    mode, payload = encoder_spec(tokenizer, sample)
    workers = default_workers() if workers is None else max(1, int(workers))
    total_bytes = sum(p.stat().st_size for p in files.values())
    if total_bytes < INLINE_BYTES or (max_sentences and max_sentences * len(files) <= INLINE_LINES):
        workers = 1
    pool = None
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawned, not forked: this process may hold threads (torch, the tokenizer's own pool)
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_init_worker, initargs=(mode, payload, dtype.str))
    encode = _Encoder(mode, payload, dtype.str) if pool is None else None
    langs, n_blocks, total_tokens = [], 0, 0
    try:
        with open(folder / TOKENS, "wb", buffering=0) as out:  # (each chunk's blocks are one large write)
            for lang, path in files.items():
                carry = np.zeros(0, dtype=dtype)
                first_block, tokens = n_blocks, 0
                for ids in _chunk_ids(encode, read_line_chunks(path, max_sentences), pool, 2 * workers):
                    tokens += ids.size
                    buf = np.concatenate([carry, ids]) if carry.size else ids
                    full = buf.size // block_size * block_size
                    append_blocks(out, buf[:full])
                    n_blocks += full // block_size
                    carry = buf[full:]
                total_tokens += tokens
                langs.append({"lang": lang, "first_block": first_block, "blocks": n_blocks - first_block,
                              "tokens": tokens})
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    index = {"block_size": block_size, "dtype": dtype.name, "n_blocks": n_blocks, "vocab_size": len(tokenizer),
             "languages": langs, "tokens": total_tokens, "encoder": mode, "workers": workers}
    (folder / INDEX).write_text(json.dumps(index, indent=1))
    return index


def append_blocks(out: Any, ids: np.ndarray) -> None:
    """Append one chunk's full blocks to ``tokens.bin`` (the point a test's fault, :mod:`harness.core.faults`,
    names to kill a build midway). ``out`` is unbuffered: a write may take part of the bytes."""
    view = memoryview(ids.tobytes())
    while view:
        view = view[out.write(view):]


# -- the training order ----------------------------------------------------------------------------------------
def order_dtype(n: int) -> np.dtype:
    return np.dtype(np.uint32) if n <= np.iinfo(np.uint32).max else np.dtype(np.int64)


def block_order(n: int, seed: int) -> np.ndarray:
    """The permutation ``random.Random(seed).shuffle(list(range(n)))`` gives (so ``blocks[order[j]]`` is the j-th
    block that shuffling the list of blocks gives), as a compact array: the same swaps as ``shuffle``, made on the
    array itself (4 bytes a block, no list of Python ints)."""
    order = np.arange(n, dtype=order_dtype(n))
    randbelow = random.Random(seed)._randbelow
    for i in range(n - 1, 0, -1):
        j = randbelow(i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def sampling_probabilities(counts: list[int], alpha: float) -> np.ndarray:
    """q_i proportional to p_i ** alpha, p_i = counts_i / sum(counts) (languages with no block get 0)."""
    c = np.asarray(counts, dtype=np.float64)
    p = c / c.sum()
    q = np.where(c > 0, p ** float(alpha), 0.0)
    return q / q.sum()


def smoothed_order(corpus: Corpus, seed: int, alpha: float, length: int | None = None) -> np.ndarray:
    """A training order of ``length`` blocks (default: all of them) that draws each position's language with
    :func:`sampling_probabilities` and takes that language's next block in a seeded order of its own."""
    spans = [(first, n) for first, n in corpus.language_blocks().values() if n > 0]
    n = corpus.n_blocks if length is None else int(length)
    rng = np.random.default_rng(seed)
    q = sampling_probabilities([c for _, c in spans], alpha)
    choice = rng.choice(len(spans), size=n, p=q)
    out = np.empty(n, dtype=order_dtype(corpus.n_blocks))
    for li, (first, count) in enumerate(spans):
        where = np.flatnonzero(choice == li)
        reps = -(-where.size // count) if where.size else 0
        picks = np.concatenate([rng.permutation(count) for _ in range(reps)])[: where.size] if reps else []
        out[where] = first + np.asarray(picks, dtype=np.int64)
    return out


def sampling_settings(settings: dict[str, Any]) -> tuple[str, float]:
    """(language sampling, alpha) named by a CPT settings dict; ("shuffled", alpha unused) when absent."""
    from harness.core.errors import ConfigError

    how = str(settings.get("language_sampling") or "shuffled")
    if how not in SAMPLING:
        raise ConfigError(f"cpt.language_sampling must be one of {', '.join(SAMPLING)}, not {how!r}")
    alpha = float(settings.get("sampling_alpha") if settings.get("sampling_alpha") is not None else DEFAULT_ALPHA)
    if not 0 < alpha <= 1:
        raise ConfigError(f"cpt.sampling_alpha must be in (0, 1], not {alpha}")
    return how, alpha


def write_order(corpus: Corpus, settings: dict[str, Any], seed: int, folder: Path) -> Path:
    """The training order of a CPT (its language sampling, its seed) written as ``.order-*.npy`` in ``folder``
    (atomically: ranks of a torchrun CPT write the same file)."""
    how, alpha = sampling_settings(settings)
    order = block_order(corpus.n_blocks, seed) if how == "shuffled" else smoothed_order(corpus, seed, alpha)
    name = f".order-{how}-{seed}" + (f"-{alpha}" if how == "smoothed" else "") + ".npy"
    path = Path(folder) / name
    tmp = path.with_name(f"{name}.{os.getpid()}.tmp.npy")
    np.save(tmp, order)
    os.replace(tmp, path)
    return path


class CorpusDataset:
    """The CPT training set as the Trainer sees it: item ``j`` is ``{"input_ids": [ids of block order[j]]}``
    (Python ints, as the collator got them from the list of blocks). Holds paths only: the memmaps open in the
    process that reads the first item, and a pickle (a spawned loader worker) carries the paths, never the data."""

    def __init__(self, corpus: Corpus, order_path: Path):
        self.tokens_path = str(corpus.path / TOKENS)
        self.dtype, self.n_blocks, self.block_size = corpus.dtype.str, corpus.n_blocks, corpus.block_size
        self.order_path = str(order_path)
        self._length = int(np.load(order_path, mmap_mode="r").shape[0])
        self._tokens: np.ndarray | None = None
        self._order: np.ndarray | None = None

    def __len__(self) -> int:
        return self._length

    def _open(self) -> None:
        from harness.core.cache import lease

        lease(Path(self.tokens_path).parent)  # this process (a loader worker) reads it: no prune removes it
        self._tokens = open_tokens(Path(self.tokens_path), np.dtype(self.dtype), self.n_blocks, self.block_size)
        self._order = np.load(self.order_path, mmap_mode="r")

    def __getitem__(self, j: int) -> dict[str, list[int]]:
        if self._tokens is None:
            self._open()
        if not -self._length <= j < self._length:
            raise IndexError(j)
        return {"input_ids": self._tokens[int(self._order[j])].tolist()}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None, "_order": None}
