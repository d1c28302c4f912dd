"""Tests of the `bible` world's fetcher on packages made here: verified downloads, a refetch of a damaged file, a
refused tampered one, safe extraction of wheels and Debian packages, the pins, and ``check``."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import MissingResourceError
from harness.core.hashing import sha256_file
from harness.worlds.bible import fetch as fetchmod
from tests._bible_inputs import _deb_bytes, _zip_bytes


# -- fetching and safe extraction ---------------------------------------------------------------------------
def _pin(tmp_path: Path, name: str, filename: str, content: bytes) -> fetchmod.Pin:
    src = tmp_path / "src" / filename
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(content)
    return fetchmod.Pin("pypi", name, "1.0", filename, sha256_file(src), len(content), "MIT", "test")


def test_fetcher_verifies_refetches_and_extracts_safely(tmp_path, monkeypatch):
    content = _zip_bytes({"pkg/data/a.txt": b"hello", "../evil.txt": b"x", "/abs.txt": b"y"},
                         links={"pkg/data/link": "/etc/passwd"})
    pin = _pin(tmp_path, "demo", "demo-1.0-py3-none-any.whl", content)
    f = fetchmod.Fetcher(root=tmp_path / "dl", pins={"demo": pin})
    calls = []

    def fake_download(self, p, tmp):
        calls.append(p.name)
        out = tmp / p.filename
        out.write_bytes((tmp_path / "src" / p.filename).read_bytes())
        return out

    monkeypatch.setattr(fetchmod.Fetcher, "_download_pypi", fake_download)
    path = f.get("demo")
    assert path.is_file() and calls == ["demo"] and f.present(pin)
    assert f.get("demo") == path and calls == ["demo"]  # cached
    path.write_bytes(b"corrupted")
    assert not f.present(pin)
    f.get("demo")
    assert calls == ["demo", "demo"] and sha256_file(path) == pin.sha256  # detected and fetched again
    root = f.extract("demo", ["pkg/*", "../*", "/abs.txt"])
    assert (root / "pkg/data/a.txt").read_bytes() == b"hello"
    assert not (root / "pkg/data/link").exists()
    assert not (tmp_path / "dl" / "extracted" / "evil.txt").exists() and not (root.parent / "evil.txt").exists()
    assert (root / ".complete").is_file()
    # a download whose hash differs from the pin is refused, and nothing lands in the cache
    path.unlink()
    (tmp_path / "src" / pin.filename).write_bytes(b"tampered")
    with pytest.raises(MissingResourceError, match="sha256"):
        f.get("demo")
    assert not path.exists()


def test_missing_package_names_it(tmp_path, monkeypatch):
    pin = fetchmod.Pin("pypi", "no-such-package", "9.9", "x.whl", "0" * 64, 1, "MIT", "test")
    f = fetchmod.Fetcher(root=tmp_path, pins={"no-such-package": pin})

    class Res:
        returncode = 1
        stdout = ""
        stderr = "ERROR: No matching distribution found for no-such-package==9.9"

    monkeypatch.setattr(fetchmod.subprocess, "run", lambda *a, **k: Res())
    with pytest.raises(MissingResourceError, match="no-such-package==9.9"):
        f.get("no-such-package")
    deb = fetchmod.Pin("debian", "dict-none", "1", "dict-none_1_all.deb", "0" * 64, 1, "GPL", "test")
    f2 = fetchmod.Fetcher(root=tmp_path, pins={"dict-none": deb}, apt_updated=True)
    monkeypatch.setattr(fetchmod.shutil, "which", lambda name: "/usr/bin/apt-get")
    with pytest.raises(MissingResourceError, match="dict-none=1"):
        f2.get("dict-none")


def test_deb_extraction(tmp_path):
    deb = tmp_path / "x_1_all.deb"
    deb.write_bytes(_deb_bytes({"usr/share/dictd/a.index": b"i", "usr/share/doc/x/copyright": b"License: GPL-2+\n"}))
    n = fetchmod.extract_archive(deb, tmp_path / "out", ["usr/share/*"])
    assert n == 2 and (tmp_path / "out/usr/share/dictd/a.index").read_bytes() == b"i"
    assert not (tmp_path / "out/usr/share/evil").exists()


def test_pins_are_complete():
    for name, pin in fetchmod.PINS.items():
        assert len(pin.sha256) == 64 and int(pin.sha256, 16) >= 0, name
        assert pin.licence and pin.purpose and pin.size > 0, name


def test_check_reports_missing_and_present(tmp_path):
    from harness.worlds.bible import BibleWorldBuilder

    content = b"abc"
    pin = _pin(tmp_path, "demo", "demo-1.0-py3-none-any.whl", content)
    f = fetchmod.Fetcher(root=tmp_path / "dl", pins={"demo": pin})
    rows = {r.name: r for r in BibleWorldBuilder(fetcher=f).check()}
    assert not rows["demo"].present and "pip download --no-deps" in rows["demo"].how and "demo==1.0" in rows["demo"].how
    (tmp_path / "dl" / "pypi").mkdir(parents=True)
    (tmp_path / "dl" / "pypi" / pin.filename).write_bytes(content)
    rows = {r.name: r for r in BibleWorldBuilder(fetcher=f).check()}
    assert rows["demo"].present and rows["demo"].how == "cached"
