"""The world writer: the one place where a builder writes a world's metadata files.

Every builder (``synthetic``, ``bible``, ``glot500``) writes its ``manifest.json``, ``languages.json`` and
``tasks/<task>/meta.json`` through :class:`WorldWriter`, so they share one encoding (UTF-8 JSON, one-space indent,
non-ASCII characters as they are, no trailing newline) and :mod:`harness.worlds.base` stays their only reader.
The layout itself is described in :mod:`harness.worlds.base`.

The bytes matter: a world's identity is the hash of its manifest, and ``checksums.json`` records the sha256 of every
file the build wrote (the manifest and the language table included), so this format must not change without a bump
of every builder's version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
LANGUAGES = "languages.json"
TASK_META = "meta.json"


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as the world's metadata files are written (the parent folder is made if needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, ensure_ascii=False), encoding="utf-8")


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Task data: one JSON object a line, UTF-8 (read back with :func:`harness.worlds.base.read_jsonl`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_lines(path: Path, lines: list[str]) -> None:
    """Text data: one sentence a line, UTF-8; a newline inside a sentence becomes a space."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for x in lines:
            f.write(x.replace("\n", " ") + "\n")


class WorldWriter:
    """Writes the metadata of one world folder (``root``) and remembers what it wrote."""

    def __init__(self, root: Path):
        self.root = root
        self.task_metas: dict[str, dict[str, Any]] = {}  # task -> the meta.json written for it

    def task_meta(self, task: str, meta: dict[str, Any]) -> None:
        """``tasks/<task>/meta.json``: ``{"languages": {code: {...}}, "description": ..., ...}``."""
        write_json(self.root / "tasks" / task / TASK_META, meta)
        self.task_metas[task] = meta

    def task_languages(self, task: str) -> list[str]:
        """The languages of a task meta written by this writer, in the order written."""
        return list(self.task_metas[task]["languages"])

    def languages(self, languages: dict[str, dict[str, Any]]) -> None:
        """``languages.json``: ``{code: {script, seen, resource_level, text_chars, ...}}``."""
        write_json(self.root / LANGUAGES, languages)

    def manifest(self, manifest: dict[str, Any]) -> None:
        """``manifest.json``: the world's identity (name, version, inputs, sources, pivot language, notes)."""
        write_json(self.root / MANIFEST, manifest)
