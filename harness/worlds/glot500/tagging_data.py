"""The tagging inputs of the `glot500` world: WikiANN (NER) and Universal Dependencies (POS), from the Hub parquet
conversion or from a CoNLL-U release (Glot500's fused-form conversion)."""


import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.core.errors import MissingResourceError
from harness.worlds.glot500.tables import (
    SchemaError,
    _has_table_ext,
    _require_columns,
    class_label_names,
    read_table,
    split_files,
)

NER_LABELS: tuple[str, ...] = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
# The HF `universal_dependencies` UPOS ClassLabel, in its order; "_" marks multiword-token range lines.
UD_HF_UPOS: tuple[str, ...] = ("NOUN", "PUNCT", "ADP", "NUM", "SYM", "SCONJ", "ADJ", "PART", "DET", "CCONJ",
                               "PROPN", "PRON", "X", "_", "ADV", "INTJ", "VERB", "AUX")
UPOS: tuple[str, ...] = ("ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON",
                         "PROPN", "PUNCT", "SCONJ", "SYM", "VERB", "X")

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
