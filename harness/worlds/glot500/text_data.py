"""The sentence inputs of the `glot500` world: Tatoeba (SR-T), the Parallel Bible Corpus or Glot500's aligned Bible
files (SR-B), and Glot500-c (CPT text and the MLM task; first-N sentences as HyperOFA did)."""


import re
from collections.abc import Iterator
from pathlib import Path

from harness.core.errors import ConfigError, MissingResourceError
from harness.worlds.glot500.tables import SchemaError, _require_columns, read_table, split_files


# -- retrieval data -----------------------------------------------------------------------------------------
def read_tatoeba(repo: Path, code3: str, layout: str = "mteb") -> list[tuple[str, str]]:
    """Tatoeba pairs ``(target sentence, English sentence)`` in file order.

    ``mteb``: ``mteb/tatoeba-bitext-mining`` config ``<xxx>-eng``, split test, ``sentence1`` = xxx,
    ``sentence2`` = English. ``xtreme``: ``google/xtreme`` config ``tatoeba.<xxx>``, split validation,
    ``source_sentence`` = xxx, ``target_sentence`` = English.
    """
    if layout == "mteb":
        config, split, src, tgt = f"{code3}-eng", "test", "sentence1", "sentence2"
    elif layout == "xtreme":
        config, split, src, tgt = f"tatoeba.{code3}", "dev", "source_sentence", "target_sentence"
    else:
        raise ConfigError(f"tatoeba layout must be 'mteb' or 'xtreme', not {layout!r}")
    files = split_files(repo, config, split)
    where = f"Tatoeba {config}"
    if not files:
        raise MissingResourceError(f"{where}: no data files under {repo / config}")
    ds = read_table(files)
    _require_columns(ds, [src, tgt], where)
    if layout == "xtreme" and "target_lang" in ds.column_names:
        langs = set(ds["target_lang"])
        if langs - {"eng", "en"}:
            raise SchemaError(f"{where}: target_lang is {sorted(langs)}, expected English")
    return [(str(a).strip(), str(b).strip()) for a, b in zip(ds[src], ds[tgt], strict=True)
            if str(a).strip() and str(b).strip()]


_VERSE_RE = re.compile(r"^(\d{8})\t(.*)$")


def read_pbc_file(path: Path) -> dict[str, str]:
    """A Parallel Bible Corpus file: ``#`` comment lines, then ``BBCCCVVV<TAB>verse``; empty verses are skipped."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            m = _VERSE_RE.match(line)
            if not m:
                raise SchemaError(f"{path} line {n}: expected '<8-digit verse id><TAB><text>'")
            text = " ".join(m.group(2).split())
            if text:
                out[m.group(1)] = text
    return out


def pbc_files(folder: Path) -> dict[str, list[Path]]:
    """PBC files of a folder by ISO 639-3 code (file names ``<iso3>-x-bible-<edition>.txt``)."""
    out: dict[str, list[Path]] = {}
    for p in sorted(folder.glob("*-x-bible-*.txt")):
        out.setdefault(p.name[:3], []).append(p)
    return out


def read_glot500_bible_pair(folder: Path, code: str, pivot: str = "eng_Latn") -> list[tuple[str, str]]:
    """Glot500's evaluation layout: ``bible.<code>-<pivot>.<code>`` and ``.<pivot>``, aligned line by line."""
    a = folder / f"bible.{code}-{pivot}.{code}"
    b = folder / f"bible.{code}-{pivot}.{pivot}"
    if not a.is_file() or not b.is_file():
        raise MissingResourceError(f"Bible files {a.name} / {b.name} missing in {folder}")
    xs = a.read_text(encoding="utf-8").splitlines()
    es = b.read_text(encoding="utf-8").splitlines()
    if len(xs) != len(es):
        raise SchemaError(f"{a} has {len(xs)} lines but {b.name} has {len(es)}; they must be aligned")
    return [(x.strip(), e.strip()) for x, e in zip(xs, es, strict=True) if x.strip() and e.strip()]


# -- Glot500-c --------------------------------------------------------------------------------------------------
def glot500c_rows(repo: Path, config: str, split: str = "train") -> int:
    """Number of rows of a Glot500-c split (from the arrow shards, without reading the text)."""
    files = split_files(repo, config, split)
    if not files:
        return 0
    return len(read_table(files))


def iter_glot500c(repo: Path, config: str, split: str = "train", *, start: int = 0,
                  stop: int | None = None) -> Iterator[str]:
    """Rows ``[start, stop)`` of a Glot500-c split, in file order, each ``text`` stripped (HyperOFA's first-N
    subsampling: ``stop`` = 5,000,000). Empty lines are skipped (they are not sentences)."""
    files = split_files(repo, config, split)
    where = f"Glot500-c {config}/{split}"
    if not files:
        raise MissingResourceError(f"{where}: no data files under {repo / config}")
    ds = read_table(files)
    _require_columns(ds, ["text"], where)
    end = len(ds) if stop is None else min(stop, len(ds))
    batch = 10_000
    for i in range(start, end, batch):
        for t in ds[i: min(i + batch, end)]["text"]:
            s = " ".join(str(t).split("\n")).strip()
            if s:
                yield s
