"""Every file a world build fetches from a registry is checked against a sha256 recorded in the repository.

The pinned inputs of the bible world are checked by its fetcher (``harness/worlds/bible/fetch.py``, tested with a
tampered file in ``tests/test_world_bible_fetch.py``); the packages of the spaCy build environment are installed from
``harness/worlds/bible/spacy-lock.json`` with ``pip --require-hashes``. These tests check the lock and that a file
with another sha256 stops the install with a clear error (a local wheel stands in for the registry).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import zipfile

import pytest

from harness.core.errors import MissingResourceError
from harness.worlds.bible import tagging
from harness.worlds.bible.fetch import PINS, SPACY_REQUIREMENT


def test_the_lock_pins_every_file_of_the_spacy_environment():
    data = json.loads(tagging.LOCK_FILE.read_text())
    assert data["requirement"] == SPACY_REQUIREMENT
    assert data["platforms"], "no platform is locked"
    for platform, entries in data["platforms"].items():
        names = {e["name"].lower().replace("_", "-") for e in entries}
        assert {"spacy", "thinc", "numpy", "srsly", "pydantic"} <= names, platform
        for e in entries:
            assert re.fullmatch(r"[0-9a-f]{64}", e["sha256"]), e
            assert e["version"] and e["file"].endswith(".whl"), e  # wheels only: nothing is built from source
        spacy = next(e for e in entries if e["name"].lower() == "spacy")
        major, minor = (int(x) for x in spacy["version"].split(".")[:2])
        assert (3, 7) <= (major, minor) < (3, 9)


def test_the_registry_pins_have_sha256s():
    assert PINS and all(re.fullmatch(r"[0-9a-f]{64}", p.sha256) for p in PINS.values())


def test_an_unlocked_platform_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(tagging, "platform_key", lambda: "cp399-plan9-mips")
    with pytest.raises(MissingResourceError, match=r"no sha256 lock for this platform \(cp399-plan9-mips.*--lock"):
        tagging.locked_files()


def _wheel(folder, name="demo_pkg", version="1.0") -> tuple:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        z.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}/RECORD", f"{name}/__init__.py,,\n{dist}/METADATA,,\n{dist}/WHEEL,,\n{dist}/RECORD,,\n")
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_with_another_sha256_stops_the_install(tmp_path):
    index = tmp_path / "index"
    index.mkdir()
    wheel, digest = _wheel(index)
    entry = {"name": "demo_pkg", "version": "1.0", "file": wheel.name, "sha256": digest}
    local = ("--no-index", "--find-links", str(index))
    target = tmp_path / "ok"
    tagging.install_locked(sys.executable, [entry], extra_args=(*local, "--target", str(target)))
    assert (target / "demo_pkg" / "__init__.py").is_file()
    # the registry now serves other bytes under the same name
    wheel.write_bytes(wheel.read_bytes() + b"\0")
    bad = tmp_path / "bad"
    with pytest.raises(MissingResourceError, match="does not match the sha256 recorded in spacy-lock.json"):
        tagging.install_locked(sys.executable, [entry], extra_args=(*local, "--target", str(bad)))
    assert not (bad / "demo_pkg").exists()
