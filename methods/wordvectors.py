"""Multilingual static word vectors in word2vec text format, keys ``iso3:word`` (the ColexNet+ layout).

File layout: an optional header line ``<count> <dim>``, then one line per word: the key, a space, and ``dim``
numbers separated by spaces. ColexNet+ key conventions (spec ``methods.md`` §2.2): a key ``xxx:word`` has an
ISO 639-3 prefix; a key without a ``:`` at index 3 is English; ``$`` inside a word stands for a space.

Reading a large file is a one-off cost: with a ``cache_dir`` the parsed matrix is kept as ``.npy`` + keys and
memory-mapped on later reads (keyed by the file's path, size and modification time).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.core.errors import MissingResourceError
from harness.core.hashing import hash_obj

log = logging.getLogger(__name__)
READER_VERSION = 1


@dataclass
class WordVectors:
    keys: list[str]  # as in the file, e.g. "swh:paka"
    vectors: np.ndarray  # (n, dim) float32

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    def __len__(self) -> int:
        return len(self.keys)


def split_key(key: str) -> tuple[str, str]:
    """``(iso3, word)`` for a ColexNet+ key: ``"deu:haus" -> ("deu", "haus")``, ``"house" -> ("eng", "house")``.

    The word keeps its ``$`` markers (see :func:`surface`). Same test as the reference code: a language prefix
    exists when the key is longer than 4 characters and has ``:`` at index 3.
    """
    if len(key) > 4 and key[3] == ":":
        return key[:3], key[4:]
    return "eng", key


def surface(word: str) -> str:
    """The word as text: ``$`` stands for a space."""
    return word.replace("$", " ")


def _parse_lines(lines: Iterable[str], path: Path, start_line: int, dim: int | None
                 ) -> tuple[list[str], np.ndarray, int | None]:
    keys: list[str] = []
    rows: list[str] = []
    for offset, line in enumerate(lines):
        line = line.rstrip("\n").rstrip("\r").rstrip(" ")
        if not line:
            continue
        key, sep, rest = line.partition(" ")
        if not sep:
            raise MissingResourceError(f"{path}:{start_line + offset}: a word vector line needs a key and numbers")
        keys.append(key)
        rows.append(rest)
    if not rows:
        return keys, np.zeros((0, dim or 0), dtype=np.float32), dim
    flat = np.array(" ".join(rows).split(), dtype=np.float32)
    d = dim if dim is not None else len(rows[0].split())
    if d == 0 or flat.size != d * len(rows):
        bad = next((i for i, r in enumerate(rows) if len(r.split()) != d), 0)
        raise MissingResourceError(f"{path}:{start_line + bad}: expected {d} numbers per word vector, got "
                                   f"{len(rows[bad].split())}")
    return keys, flat.reshape(len(rows), d), d


def read_word2vec_text(path: Path, *, max_words: int | None = None, chunk_lines: int = 200_000,
                       progress: Callable[[int], None] | None = None) -> WordVectors:
    """Parse a word2vec text file (header optional). Duplicate keys: the first occurrence is kept."""
    path = Path(path)
    if not path.is_file():
        raise MissingResourceError(f"word vectors file {path} does not exist")
    keys: list[str] = []
    blocks: list[np.ndarray] = []
    dim: int | None = None
    with open(path, encoding="utf-8") as f:
        first = f.readline()
        parts = first.split()
        line_no = 2
        pending: list[str] = []
        if len(parts) == 2 and all(p.isdigit() for p in parts):
            dim = int(parts[1])
        else:
            pending.append(first)
            line_no = 1
        done = False
        while not done:
            while len(pending) < chunk_lines:
                line = f.readline()
                if not line:
                    done = True
                    break
                pending.append(line)
            if max_words is not None:
                room = max_words - len(keys)
                if len(pending) >= room:
                    pending = pending[:room]
                    done = True
            k, v, dim = _parse_lines(pending, path, line_no, dim)
            line_no += len(pending)
            keys.extend(k)
            blocks.append(v)
            if progress is not None:
                progress(len(k))
            pending = []
    if not keys:
        raise MissingResourceError(f"word vectors file {path} holds no vectors")
    vectors = np.concatenate(blocks, axis=0) if len(blocks) > 1 else blocks[0]
    seen: dict[str, int] = {}
    for i, k in enumerate(keys):
        seen.setdefault(k, i)
    if len(seen) != len(keys):
        log.warning("%s: %d duplicate keys ignored (first occurrence kept)", path, len(keys) - len(seen))
        idx = np.array(sorted(seen.values()), dtype=np.int64)
        keys = [keys[i] for i in idx]
        vectors = vectors[idx]
    return WordVectors(keys=keys, vectors=np.ascontiguousarray(vectors, dtype=np.float32))


def shared_vectors_dir(method_cache_dir: Path | None) -> Path | None:
    """The ``.npy`` cache of parsed word vectors that every method uses (``word-vectors/`` beside the methods'
    own cache folders), so OFA and HyperOFA parse a world's vectors file once."""
    return None if method_cache_dir is None else Path(method_cache_dir).parent / "word-vectors"


def load_word_vectors(paths: list[Path], *, cache_dir: Path | None = None, max_words: int | None = None,
                      progress: Callable[[int], None] | None = None) -> WordVectors:
    """Read (and concatenate, first key wins) the files in ``paths``, through the ``.npy`` cache if given."""
    if not paths:
        raise MissingResourceError("no word vectors file given")
    ident = {"v": READER_VERSION, "max_words": max_words,
             "files": [(str(Path(p).resolve()), os.stat(p).st_size, os.stat(p).st_mtime_ns) for p in paths]}
    key = hash_obj(ident)
    if cache_dir is not None:
        base = Path(cache_dir) / f"wordvectors-{key}"
        npy, kjs = base.with_suffix(".npy"), base.with_suffix(".keys.json")
        if npy.is_file() and kjs.is_file():
            return WordVectors(keys=json.loads(kjs.read_text(encoding="utf-8")),
                               vectors=np.load(npy, mmap_mode="r", allow_pickle=False))
    parts = [read_word2vec_text(p, max_words=max_words, progress=progress) for p in paths]
    if len(parts) == 1:
        wv = parts[0]
    else:
        if len({p.dim for p in parts}) != 1:
            raise MissingResourceError(f"word vectors files {paths} have different dimensions")
        keys: list[str] = []
        rows: list[np.ndarray] = []
        seen: set[str] = set()
        for p in parts:
            keep = [i for i, k in enumerate(p.keys) if k not in seen]
            seen.update(p.keys[i] for i in keep)
            keys.extend(p.keys[i] for i in keep)
            rows.append(p.vectors[keep])
        wv = WordVectors(keys=keys, vectors=np.concatenate(rows)[: max_words])
        wv.keys = wv.keys[: max_words]
    if cache_dir is not None:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        tag = uuid.uuid4().hex[:8]
        tmp_npy = npy.with_name(f".{npy.name}.{tag}.npy")
        tmp_k = kjs.with_name(f".{kjs.name}.{tag}")
        np.save(tmp_npy, wv.vectors, allow_pickle=False)
        tmp_k.write_text(json.dumps(wv.keys, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp_k, kjs)
        os.replace(tmp_npy, npy)
    return wv
