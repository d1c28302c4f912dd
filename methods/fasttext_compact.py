"""fastText model files: reading them (:func:`load_model`) and the compact form a cached model is stored in.

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

import hashlib
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import MissingResourceError


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
        meta = json.loads(meta_file(path).read_text(encoding="utf-8"))
        return meta if isinstance(meta, dict) else None
    except (OSError, ValueError):
        return None


def meta_file(path: Path) -> Path:
    """The ``.json`` beside a cached model (``<kind>-<key>.bin`` or its compact form): what it records."""
    return path.with_suffix(".json")


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()
