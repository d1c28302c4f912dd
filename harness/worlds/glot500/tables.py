"""Tables of Hub datasets (parquet, arrow, json lines), read with ``datasets``, which restores the features written in
the files (``ClassLabel`` names included); the readers check the columns and label names they rely on."""


from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.core.errors import MissingResourceError

SPLITS = ("train", "dev", "test")
# our split name -> the names sources use for it
SPLIT_NAMES: dict[str, tuple[str, ...]] = {"train": ("train",), "dev": ("validation", "dev", "val"),
                                           "test": ("test",)}
TABLE_EXTS = (".parquet", ".arrow", ".jsonl", ".jsonl.gz", ".json", ".json.gz")


class SchemaError(MissingResourceError):
    """An input file does not have the schema its loader was written for."""


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
