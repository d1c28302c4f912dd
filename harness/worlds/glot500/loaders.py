"""Loaders for the real inputs of the `glot500` world, written against the sources' own schemas.

Every reader takes a local folder laid out like the source (a Hugging Face Hub snapshot from the local cache, a
``hf download --local-dir`` copy, or a user folder) and returns plain records; nothing here downloads anything.

* :func:`resolve_repo` finds a Hub repository locally: the user's ``path`` first, else the snapshot of the pinned
  revision in the Hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``).
* Tables (parquet, arrow, json lines) are read with ``datasets``, which restores the features written in the files
  (``ClassLabel`` names included); the readers check the columns and label names they rely on.
* WikiANN (:func:`read_wikiann`), Universal Dependencies from the Hub parquet conversion (:func:`read_ud_hub`) or
  from a CoNLL-U release (:func:`read_ud_conllu`, Glot500's fused-form conversion), Tatoeba (:func:`read_tatoeba`),
  the Parallel Bible Corpus (:func:`read_pbc_file`) or Glot500's aligned Bible files
  (:func:`read_glot500_bible_pair`), Glot500-c (:func:`iter_glot500c`, first-N sentences as HyperOFA did),
  ColexNet+ (:func:`read_keyed_vectors`, a restricted unpickler: no gensim and no foreign code), the Glot500-m
  tokenizer (:func:`load_target_tokenizer`) and the source models (:func:`source_model_files`).
"""

from __future__ import annotations

import logging
import os
import pickle
import re
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import ConfigError, MissingResourceError

log = logging.getLogger(__name__)

NER_LABELS: tuple[str, ...] = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
# The HF `universal_dependencies` UPOS ClassLabel, in its order; "_" marks multiword-token range lines.
UD_HF_UPOS: tuple[str, ...] = ("NOUN", "PUNCT", "ADP", "NUM", "SYM", "SCONJ", "ADJ", "PART", "DET", "CCONJ",
                               "PROPN", "PRON", "X", "_", "ADV", "INTJ", "VERB", "AUX")
UPOS: tuple[str, ...] = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
                         "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")
SPLITS = ("train", "dev", "test")
# our split name -> the names sources use for it
SPLIT_NAMES: dict[str, tuple[str, ...]] = {"train": ("train",), "dev": ("validation", "dev", "val"),
                                           "test": ("test",)}
TABLE_EXTS = (".parquet", ".arrow", ".jsonl", ".jsonl.gz", ".json", ".json.gz")


class SchemaError(MissingResourceError):
    """An input file does not have the schema its loader was written for."""


# -- finding local copies of Hub repositories --------------------------------------------------------------
@dataclass
class HubRef:
    """A Hub repository pinned at a revision, optionally replaced by a local copy (``path``)."""

    hub_id: str
    revision: str = "main"
    repo_type: str = "model"  # model | dataset
    path: Path | None = None

    @property
    def label(self) -> str:
        rev = self.revision[:12] if re.fullmatch(r"[0-9a-f]{40}", self.revision) else self.revision
        return f"{self.hub_id}@{rev}" + (" (dataset)" if self.repo_type == "dataset" else "")


def hub_cache_dir() -> Path:
    """The Hub cache folder, honouring ``HF_HUB_CACHE`` and ``HF_HOME`` as huggingface_hub does."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "huggingface" / "hub"


def repo_cache_folder(ref: HubRef) -> Path:
    return hub_cache_dir() / f"{ref.repo_type}s--{ref.hub_id.replace('/', '--')}"


def cached_snapshot(ref: HubRef) -> Path | None:
    """The snapshot folder of ``ref.revision`` in the Hub cache (a commit hash, or a branch/tag via ``refs/``)."""
    folder = repo_cache_folder(ref)
    if re.fullmatch(r"[0-9a-f]{40}", ref.revision):
        commit = ref.revision
    else:
        refs = folder / "refs" / ref.revision
        if not refs.is_file():
            return None
        commit = refs.read_text().strip()
    snap = folder / "snapshots" / commit
    return snap if snap.is_dir() else None


def resolve_repo(ref: HubRef) -> Path | None:
    """The local folder for ``ref``: its ``path`` when given (it must exist), else the cached snapshot."""
    if ref.path is not None:
        return ref.path if ref.path.exists() else None
    return cached_snapshot(ref)


def snapshot_commit(folder: Path) -> str | None:
    """The commit of a Hub-cache snapshot folder (its name), None for other folders."""
    if folder.parent.name == "snapshots" and re.fullmatch(r"[0-9a-f]{40}", folder.name):
        return folder.name
    return None


def hf_download_command(ref: HubRef, files: Sequence[str] = (), include: Sequence[str] = ()) -> str:
    """The exact command that puts ``ref`` (or the given files / patterns of it) into the Hub cache."""
    parts = ["hf download", ref.hub_id, *files]
    if ref.repo_type != "model":
        parts.append(f"--repo-type {ref.repo_type}")
    if ref.revision != "main":
        parts.append(f"--revision {ref.revision}")
    parts += [f"--include '{p}'" for p in include]
    return " ".join(parts)


def file_sha256(path: Path) -> str:
    """sha256 of a file; for a Hub-cache symlink into ``blobs/`` named by its sha256 (LFS files), that name."""
    from harness.hashing import sha256_file

    real = path.resolve()
    if path.is_symlink() and real.parent.name == "blobs" and re.fullmatch(r"[0-9a-f]{64}", real.name):
        return real.name
    return sha256_file(real)


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.resolve().stat().st_size
    return sum(p.resolve().stat().st_size for p in path.rglob("*") if p.is_file())


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


# -- tables ---------------------------------------------------------------------------------------------------
def _has_table_ext(p: Path) -> bool:
    return any(p.name.endswith(e) for e in TABLE_EXTS)


def split_files(repo: Path, config: str, split: str) -> list[Path]:
    """The data files of ``config`` / ``split`` (our names: train, dev, test) in a repository folder.

    Layouts found on the Hub: ``<config>/<split>-00000-of-00001.parquet`` (data files in the main branch),
    ``<config>/<split>/0000.parquet`` (parquet conversion, save_to_disk arrow shards), and
    ``<config>/<name>-<split>.parquet`` (older parquet conversions).
    """
    base = repo / config
    if not base.is_dir():
        return []
    names = SPLIT_NAMES.get(split, (split,))
    out: list[Path] = []
    for name in names:
        found = sorted(p for p in base.glob(f"{name}-*") if p.is_file() and _has_table_ext(p))
        found += sorted(p for p in base.glob(f"{name}.*") if p.is_file() and _has_table_ext(p))
        sub = base / name
        if sub.is_dir():
            found += sorted(p for p in sub.iterdir() if p.is_file() and _has_table_ext(p))
        found += sorted(p for p in base.glob(f"*-{name}.*") if p.is_file() and _has_table_ext(p))
        found = [p for p in found if p.name not in _METADATA_FILES]
        if any(not p.name.endswith((".json", ".json.gz", ".jsonl", ".jsonl.gz")) for p in found):
            found = [p for p in found if p.name.endswith((".parquet", ".arrow"))]  # binary shards win over json
        if found:
            out = list(dict.fromkeys(found))
            break
    return out


_METADATA_FILES = {"state.json", "dataset_info.json", "dataset_dict.json", "dataset_infos.json"}


def has_split(repo: Path, config: str, split: str) -> bool:
    return bool(split_files(repo, config, split))


def read_table(files: Sequence[Path]) -> Any:
    """One ``datasets.Dataset`` from parquet, arrow (save_to_disk shards) or json-lines files.

    Parquet and arrow files are read with pyarrow (arrow shards memory-mapped); the ``datasets`` features stored in
    their schema metadata (``ClassLabel`` names included) are restored. Nothing is written to a cache.
    """
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not files:
        raise MissingResourceError("read_table: no data files")
    exts = {next(e for e in TABLE_EXTS if f.name.endswith(e)) for f in files}
    if exts <= {".parquet"}:
        tables = [pq.read_table(f) for f in files]
        return datasets.Dataset(pa.concat_tables(tables) if len(tables) > 1 else tables[0])
    if exts <= {".arrow"}:
        parts = [datasets.Dataset.from_file(str(f)) for f in files]
        return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    if exts <= {".jsonl", ".jsonl.gz", ".json", ".json.gz"}:
        return datasets.Dataset.from_list([row for f in files for row in _read_json_rows(f)])
    raise SchemaError(f"mixed data file formats {sorted(exts)} in {files[0].parent}")


def _read_json_rows(path: Path) -> list[dict[str, Any]]:
    import gzip
    import json

    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    stripped = text.lstrip()
    if stripped.startswith("["):
        rows = json.loads(stripped)
    else:
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not all(isinstance(r, dict) for r in rows):
        raise SchemaError(f"{path}: expected JSON objects, one per row")
    return rows


def _require_columns(ds: Any, cols: Sequence[str], where: str) -> None:
    missing = [c for c in cols if c not in ds.column_names]
    if missing:
        raise SchemaError(f"{where}: column(s) {', '.join(missing)} missing (has {', '.join(ds.column_names)}); "
                          f"the file is not in the expected schema")


def class_label_names(ds: Any, column: str, where: str) -> list[str]:
    """The ClassLabel names of a sequence-of-ClassLabel column (the features stored in the file)."""
    import datasets

    feat = ds.features[column]
    inner = getattr(feat, "feature", None)
    if isinstance(inner, datasets.ClassLabel):
        return list(inner.names)
    raise SchemaError(f"{where}: column {column!r} is {feat!r}, expected a list of ClassLabel; the file has lost "
                      f"its features (read it from the Hub files, not a re-export)")


# -- tagging data ---------------------------------------------------------------------------------------------
@dataclass
class Tagged:
    tokens: list[str]
    tags: list[str]

    def row(self) -> dict[str, list[str]]:
        return {"tokens": self.tokens, "tags": self.tags}


def read_wikiann(repo: Path, config: str, split: str) -> list[Tagged]:
    """WikiANN ``config`` / ``split`` (train, dev, test) as IOB2 string tags."""
    files = split_files(repo, config, split)
    where = f"WikiANN {config}/{split}"
    if not files:
        raise MissingResourceError(f"{where}: no data files under {repo / config}")
    ds = read_table(files)
    _require_columns(ds, ["tokens", "ner_tags"], where)
    names = class_label_names(ds, "ner_tags", where)
    if tuple(names) != NER_LABELS:
        raise SchemaError(f"{where}: ner_tags labels are {names}, expected {list(NER_LABELS)}")
    out = []
    for tokens, tags in zip(ds["tokens"], ds["ner_tags"], strict=True):
        if len(tokens) != len(tags):
            raise SchemaError(f"{where}: a sentence has {len(tokens)} tokens and {len(tags)} tags")
        if tokens:
            out.append(Tagged([str(t) for t in tokens], [names[i] for i in tags]))
    return out


def clean_ud_sentence(tokens: list[str], tags: list[str]) -> Tagged | None:
    """Glot500's UD post-processing (evaluation/download_data/utils_preprocess.py ``udpos_preprocess``): drop
    sentences whose words are (nearly) all ``_`` (treebanks without text), remove ZWNJ and spaces inside words."""
    n_empty = sum(1 for w in tokens if w == "_")
    if not tokens or not (n_empty == 0 or n_empty < len(tokens) - 1):
        return None
    words = ["".join(w.replace("\u200c", "").split(" ")) for w in tokens]
    keep = [(w, t) for w, t in zip(words, tags, strict=True) if w]
    if not keep:
        return None
    return Tagged([w for w, _ in keep], [t for _, t in keep])


def ud_configs(repo: Path) -> dict[str, list[str]]:
    """UD treebank configs present in a repository folder, grouped by language prefix (``en`` -> [en_ewt, ...])."""
    from harness.worlds.glot500.langcodes import ud_prefix

    out: dict[str, list[str]] = {}
    if not repo.is_dir():
        return out
    for d in sorted(p for p in repo.iterdir() if p.is_dir() and "_" in p.name and not p.name.startswith(".")):
        if any(_has_table_ext(f) for f in d.rglob("*") if f.is_file()):
            out.setdefault(ud_prefix(d.name), []).append(d.name)
    return out


def read_ud_hub(repo: Path, configs: Sequence[str], split: str) -> list[Tagged]:
    """All treebanks ``configs`` of one language, ``split`` concatenated (Glot500 merges treebanks per language).

    Rows of the Hub conversion hold multiword-token range lines as tokens with UPOS ``_`` (and enhanced-UD empty
    nodes, if any, as tokens without a basic head); both are dropped, so a sentence is its syntactic words (UD 2.11 CoNLL-U with :func:`read_ud_conllu` gives Glot500's fused forms).
    """
    out: list[Tagged] = []
    for cfg in sorted(configs):
        files = split_files(repo, cfg, split)
        if not files:
            continue
        where = f"UD {cfg}/{split}"
        ds = read_table(files)
        _require_columns(ds, ["tokens", "upos"], where)
        names = class_label_names(ds, "upos", where)
        unknown = set(names) - set(UPOS) - {"_"}
        if unknown:
            raise SchemaError(f"{where}: unexpected UPOS labels {sorted(unknown)}")
        heads = ds["head"] if "head" in ds.column_names else [None] * len(ds)
        for tokens, upos, head in zip(ds["tokens"], ds["upos"], heads, strict=True):
            # a word has a basic head; range lines (UPOS "_") and enhanced-UD empty nodes have none ("None")
            has_head = [True] * len(tokens) if head is None else [h not in ("None", "_", None) for h in head]
            pairs = [(str(t), names[u]) for t, u, h in zip(tokens, upos, has_head, strict=True)
                     if names[u] != "_" and h]
            sent = clean_ud_sentence([t for t, _ in pairs], [u for _, u in pairs])
            if sent is not None:
                out.append(sent)
    return out


# CoNLL-U with fused forms (ud-conversion-tools conllu_to_conll.py --replace_subtokens_with_fused_forms, as run by
# cisnlp/Glot500 download_data.sh): a multiword token becomes one word with the UPOS of its span head: the
# subtoken closest to the root, ties broken by this precedence (the tool's default list; es/fr/it have their own).
POS_PRECEDENCE: dict[str, tuple[str, ...]] = {
    "default": ("VERB", "NOUN", "PROPN", "PRON", "ADJ", "NUM", "ADV", "INTJ", "AUX", "ADP", "DET", "PART", "CCONJ",
                "SCONJ", "X", "PUNCT", "SYM"),
    "es": ("VERB", "AUX", "PRON", "ADP", "DET"),
    "fr": ("VERB", "AUX", "PRON", "NOUN", "ADJ", "ADV", "ADP", "DET", "PART", "SCONJ", "CONJ"),
    "it": ("VERB", "AUX", "ADV", "PRON", "ADP", "DET", "INTJ"),
}


@dataclass
class _Word:
    id: int
    form: str
    upos: str
    head: int


@dataclass
class _Sentence:
    words: list[_Word] = field(default_factory=list)
    multi: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, fused form)


def _depth(words: dict[int, _Word], i: int) -> int:
    d, seen = 0, set()
    while i in words and words[i].head != 0 and i not in seen:
        seen.add(i)
        i = words[i].head
        d += 1
    return d


def parse_conllu(text: str, where: str = "CoNLL-U") -> list[_Sentence]:
    sents: list[_Sentence] = []
    cur = _Sentence()
    for n, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip():
            if cur.words:
                sents.append(cur)
            cur = _Sentence()
            continue
        if line.startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise SchemaError(f"{where} line {n}: {len(cols)} columns, CoNLL-U has 10")
        tid = cols[0]
        if "." in tid:  # empty node of enhanced UD: not a word
            continue
        if "-" in tid:
            a, b = tid.split("-", 1)
            cur.multi.append((int(a), int(b), cols[1]))
            continue
        head = int(cols[6]) if cols[6].isdigit() else 0
        cur.words.append(_Word(int(tid), cols[1], cols[3], head))
    if cur.words:
        sents.append(cur)
    return sents


def fused_words(sent: _Sentence, lang_prefix: str = "") -> tuple[list[str], list[str]]:
    """Words and UPOS of a sentence with multiword tokens replaced by their fused form (span-head UPOS)."""
    order = POS_PRECEDENCE.get(lang_prefix, POS_PRECEDENCE["default"])
    by_id = {w.id: w for w in sent.words}
    starts = {a: (a, b, form) for a, b, form in sent.multi}
    tokens, tags = [], []
    i = 1
    last = max(by_id) if by_id else 0
    while i <= last:
        if i in starts:
            a, b, form = starts[i]
            span = [by_id[k] for k in range(a, b + 1) if k in by_id]
            if span:
                depths = [_depth(by_id, w.id) for w in span]
                top = [w for w, d in zip(span, depths, strict=True) if d == min(depths)]
                if len(top) > 1:
                    top.sort(key=lambda w: order.index(w.upos) if w.upos in order else len(order))
                tokens.append(form)
                tags.append(top[0].upos)
            i = b + 1
            continue
        if i in by_id:
            tokens.append(by_id[i].form)
            tags.append(by_id[i].upos)
        i += 1
    return tokens, tags


def conllu_files(root: Path, prefix: str, split: str) -> list[Path]:
    """``<prefix>_<treebank>-ud-<split>.conllu`` files of a UD release folder (split: train, dev, test)."""
    return sorted(p for p in root.rglob(f"{prefix}_*-ud-{split}.conllu") if p.is_file())


def read_ud_conllu(root: Path, prefix: str, split: str) -> list[Tagged]:
    out: list[Tagged] = []
    for path in conllu_files(root, prefix, split):
        for sent in parse_conllu(path.read_text(encoding="utf-8"), where=str(path)):
            tokens, tags = fused_words(sent, prefix)
            bad = set(tags) - set(UPOS)
            if bad:
                raise SchemaError(f"{path}: unknown UPOS {sorted(bad)}")
            cleaned = clean_ud_sentence(tokens, tags)
            if cleaned is not None:
                out.append(cleaned)
    return out


def ud_conllu_prefixes(root: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for p in sorted(root.rglob("*-ud-*.conllu")):
        out.setdefault(p.name.split("_", 1)[0], []).append(p)
    return out


def extract_tgz(archive: Path, dest: Path) -> Path:
    """Extract a UD release archive with path checks (no absolute paths, no ``..``, no links outside)."""
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tarfile.open(archive) as tf:
        for m in tf.getmembers():
            target = (dest / m.name).resolve()
            if not str(target).startswith(str(root) + os.sep) and target != root:
                raise MissingResourceError(f"{archive}: member {m.name!r} would be written outside {dest}")
            if m.issym() or m.islnk() or m.isdev():
                continue
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif m.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                assert src is not None
                with open(target, "wb") as f:
                    while chunk := src.read(1 << 20):
                        f.write(chunk)
    return dest


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


# -- tokenizer and models ------------------------------------------------------------------------------------------
def load_target_tokenizer(folder: Path) -> Any:
    """The Glot500-m tokenizer from its Hub files: ``tokenizer.json`` when present, else ``sentencepiece.bpe.model``
    through transformers' own XLM-R conversion (fairseq offset: ``<s> <pad> </s> <unk>``, pieces, ``<mask>``)."""
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    if (folder / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(folder)
    elif (folder / "sentencepiece.bpe.model").is_file():
        tok = XLMRobertaTokenizer.from_pretrained(folder)
    else:
        raise MissingResourceError(f"{folder} has neither tokenizer.json nor sentencepiece.bpe.model")
    check_xlmr_layout(tok, str(folder))
    return tok


def check_xlmr_layout(tok: Any, where: str) -> None:
    if tok.convert_tokens_to_ids("<unk>") != 3 or tok.mask_token_id != len(tok) - 1 or tok.pad_token_id != 1:
        raise SchemaError(f"{where}: tokenizer is not in the XLM-R layout (<s>=0 <pad>=1 </s>=2 <unk>=3, <mask> "
                          f"last); got unk={tok.unk_token_id} pad={tok.pad_token_id} mask={tok.mask_token_id} "
                          f"of {len(tok)}")


def source_model_files(folder: Path) -> list[Path]:
    """The files of a source model folder that the world copies: config, safetensors weights, tokenizer files.

    Pickled weights (``pytorch_model.bin``) are refused: the harness loads safetensors only."""
    if not (folder / "config.json").is_file():
        raise MissingResourceError(f"{folder}: config.json missing")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        extra = " (it has pytorch_model.bin: pickled weights are not loaded; fetch model.safetensors)" \
            if (folder / "pytorch_model.bin").exists() else ""
        raise MissingResourceError(f"{folder}: no model.safetensors{extra}")
    names = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "sentencepiece.bpe.model", "vocab.json", "merges.txt", "model.safetensors.index.json")
    files = [folder / n for n in names if (folder / n).is_file()] + weights
    return files


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link ``src`` (resolved) to ``dst``; copy when linking is not possible (other file system)."""
    import shutil

    real = src.resolve()
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(real, dst)
    except OSError:
        shutil.copyfile(real, dst)
