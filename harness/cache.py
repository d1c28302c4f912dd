"""Content-addressed product cache with atomic completion.

A product (initialized model, CPT checkpoint, fine-tuned tagger, trained hypernetwork ...) lives in
``<home>/products/<kind>/<key>/``. It is built in a temporary sibling folder and renamed into place only when
complete, with a ``_DONE.json`` marker holding its inputs, so a run killed mid-build leaves no half product
behind, and a repeated run finds the finished one and recomputes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.hashing import hash_obj, stable_json
from harness.paths import harness_home

log = logging.getLogger(__name__)
DONE = "_DONE.json"


@dataclass(frozen=True)
class Product:
    kind: str
    key: str
    path: Path
    cached: bool  # True when it was found finished rather than built now

    @property
    def info(self) -> dict[str, Any]:
        return json.loads((self.path / DONE).read_text())


class ProductCache:
    def __init__(self, root: Path | None = None):
        self.root = (root or harness_home()) / "products"

    def path_for(self, kind: str, inputs: Any) -> tuple[str, Path]:
        key = hash_obj(inputs)
        return key, self.root / kind / key

    def lookup(self, kind: str, inputs: Any) -> Product | None:
        key, path = self.path_for(kind, inputs)
        if (path / DONE).is_file():
            return Product(kind, key, path, cached=True)
        return None

    def get_or_build(self, kind: str, inputs: Any, build: Callable[[Path], dict | None]) -> Product:
        """Return the finished product for ``inputs``, building it with ``build(tmp_dir)`` if needed.

        ``build`` writes into the folder it is given and may return a dict of extra info stored in the marker.
        """
        found = self.lookup(kind, inputs)
        if found is not None:
            log.info("%s %s: cached at %s", kind, found.key, found.path)
            return found
        key, path = self.path_for(kind, inputs)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".tmp-{key}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        t0 = time.time()
        try:
            extra = build(tmp) or {}
            marker = {"kind": kind, "key": key, "inputs": json.loads(stable_json(inputs)),
                      "seconds": round(time.time() - t0, 3), "created": time.time(), **extra}
            (tmp / DONE).write_text(json.dumps(marker, indent=1, ensure_ascii=False))
            if path.exists():  # a stale, unfinished folder (no marker) from an older layout
                shutil.rmtree(path)
            os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Product(kind, key, path, cached=False)

    def clean_stale(self, older_than_s: float = 3600) -> int:
        """Remove temporary folders left by killed builds."""
        n = 0
        if not self.root.exists():
            return 0
        for kind_dir in self.root.iterdir():
            for p in kind_dir.glob(".tmp-*"):
                if time.time() - p.stat().st_mtime > older_than_s:
                    shutil.rmtree(p, ignore_errors=True)
                    n += 1
        return n
