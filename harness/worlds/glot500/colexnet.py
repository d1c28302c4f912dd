"""ColexNet+ word vectors (a gensim KeyedVectors pickle) read with a restricted unpickler: no gensim and no foreign
code; written out as word2vec text."""


import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import MissingResourceError
from harness.worlds.glot500.tables import SchemaError


# -- ColexNet+ (gensim KeyedVectors) ---------------------------------------------------------------------------
class _PickledObject:
    """Stands in for a pickled gensim object: only its attributes are kept; no gensim code runs."""

    gensim_class = "object"


def _stub(name: str) -> type:
    return type(name, (_PickledObject,), {"gensim_class": name})


_GENSIM_CLASSES = {name: _stub(name) for name in ("KeyedVectors", "Word2VecKeyedVectors", "Vocab",
                                                   "FastTextKeyedVectors", "BaseKeyedVectors")}


def _allowed_globals() -> dict[tuple[str, str], Any]:
    import builtins
    import codecs
    import collections
    import copyreg

    from numpy._core import multiarray

    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("collections", "defaultdict"): collections.defaultdict,
        ("copyreg", "_reconstructor"): copyreg._reconstructor, ("builtins", "object"): object,
        ("_codecs", "encode"): codecs.encode,  # protocol-2 pickles carry array bytes through it
    }
    for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(mod, "_reconstruct")] = multiarray._reconstruct
        allowed[(mod, "scalar")] = multiarray.scalar
    for name in ("int", "float", "str", "list", "dict", "tuple", "set", "frozenset", "bytes"):
        allowed[("builtins", name)] = getattr(builtins, name)
    for mod in ("gensim.models.keyedvectors", "gensim.models.deprecated.keyedvectors",
                "gensim.models.fasttext"):
        for name, cls in _GENSIM_CLASSES.items():
            allowed[(mod, name)] = cls
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Resolves only the globals a gensim KeyedVectors pickle needs; anything else is refused."""

    _allowed = None

    def find_class(self, module: str, name: str) -> Any:
        if RestrictedUnpickler._allowed is None:
            RestrictedUnpickler._allowed = _allowed_globals()
        try:
            return RestrictedUnpickler._allowed[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refusing to load global {module}.{name}: not part of a gensim KeyedVectors file") from None


@dataclass
class KeyedVectorsFile:
    keys: list[str]
    vectors: np.ndarray  # (n, dim), possibly memory-mapped
    gensim_class: str
    files: list[Path]


def read_keyed_vectors(path: Path) -> KeyedVectorsFile:
    """Read a gensim ``KeyedVectors.save()`` file without gensim and without running code from the file.

    The ``.wv`` file is a pickle; large arrays sit beside it as ``<file>.<attribute>.npy`` (gensim's SaveLoad), read
    with ``allow_pickle=False`` and memory-mapped. Keys: ``index_to_key`` (gensim 4) or ``index2word`` /
    ``index2entity`` / ``vocab`` (gensim 3).
    """
    if not path.is_file():
        raise MissingResourceError(f"ColexNet+ file {path} does not exist")
    with open(path, "rb") as f:
        try:
            obj = RestrictedUnpickler(f).load()
        except pickle.UnpicklingError as exc:
            raise SchemaError(f"{path}: {exc}") from exc
        except Exception as exc:  # truncated or not a pickle at all
            raise SchemaError(f"{path} is not a gensim KeyedVectors file: {exc}") from exc
    if not isinstance(obj, _PickledObject):
        raise SchemaError(f"{path}: the pickle holds {type(obj).__name__}, not a gensim KeyedVectors object")
    state = vars(obj)
    files = [path]
    vectors = state.get("vectors")
    numpys = state.get("_SaveLoad__numpys") or []
    if vectors is None and "vectors" in numpys:
        npy = Path(f"{path}.vectors.npy")
        if not npy.is_file():
            raise MissingResourceError(f"{path} keeps its vectors in {npy.name}, which is missing; download it too")
        vectors = np.load(npy, mmap_mode="r", allow_pickle=False)
        files.append(npy)
    if not isinstance(vectors, np.ndarray) or vectors.ndim != 2:
        raise SchemaError(f"{path}: no 2-d 'vectors' array in the KeyedVectors object")
    keys = state.get("index_to_key") or state.get("index2word") or state.get("index2entity")
    if keys is None:
        mapping = state.get("key_to_index") or state.get("vocab")
        if isinstance(mapping, dict):
            def _index(v: Any) -> int:
                return int(v) if isinstance(v, (int, np.integer)) else int(vars(v)["index"])
            keys = [k for k, _ in sorted(mapping.items(), key=lambda kv: _index(kv[1]))]
    if not keys:
        raise SchemaError(f"{path}: no key list (index_to_key / index2word / key_to_index) in the object")
    if len(keys) != vectors.shape[0]:
        raise SchemaError(f"{path}: {len(keys)} keys but {vectors.shape[0]} vectors")
    return KeyedVectorsFile([str(k) for k in keys], vectors, obj.gensim_class, files)


def write_word2vec_text(kv: KeyedVectorsFile, out: Path, *, progress: Any = None, chunk: int = 20_000) -> dict:
    """The harness's word-vector layout: ``<n> <dim>`` header, then ``key v1 ... vd`` per line (keys verbatim;
    whitespace inside a key, which ColexNet+ writes as ``$``, is replaced by ``$``)."""
    n, dim = kv.vectors.shape
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    fixed = 0
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f"{n} {dim}\n")
        for i in range(0, n, chunk):
            block = np.asarray(kv.vectors[i: i + chunk], dtype=np.float32)
            lines = []
            for key, row in zip(kv.keys[i: i + chunk], block, strict=True):
                if any(c.isspace() for c in key):
                    key = "$".join(key.split())
                    fixed += 1
                lines.append(key + " " + " ".join(f"{x:.6g}" for x in row.tolist()))
            f.write("\n".join(lines) + "\n")
            if progress is not None:
                progress(len(block))
    os.replace(tmp, out)
    return {"words": int(n), "dim": int(dim), "keys_with_whitespace": fixed}
