"""Worlds: named builders that produce a world folder (see :mod:`harness.worlds.base` for the layout).

A builder is registered under its name; :func:`get_world` builds it on first use into the harness home
(atomically: a killed build leaves nothing half-done behind) and loads it.

A built world carries ``checksums.json``: the size, sha256, modification time and status-change time (``ctime``) of
every file, recorded by the build. Loading compares every file's size and re-hashes each file whose modification or
status-change time differs from the record: any write to a file moves its ctime, and, unlike the modification time,
a user cannot set it back (``os.utime``, ``touch -d`` set it to now), so an edit that keeps the size and restores
the modification time is hashed and found too. A world copied elsewhere (``cp -a``, a restored backup) has new
ctimes: each file is hashed once, and where the bytes are the build's the new times are recorded (nothing is
rebuilt). ``harness world check`` re-hashes every file (damage below the file system, which moves no time, is
found there). A world that does not match (a damaged manifest, a truncated,
missing or edited file) is reported in one warning line naming the file and built again before it is used (a world
that cannot be built again here fails in one line; it is never used as it is). A world built before the digests
were recorded holds the sizes and the manifest's and language table's sha256 only: those are checked, and ``harness
world check`` says so; a world built before any record gets the sizes on its next load.

A world is exactly what its record lists: a file in its folder that the record does not list (a ``.txt`` dropped
into ``resources/cpt/`` after the build, which the methods' globs would read while the products cached under the
world's hash were reused) is refused in one line naming it, by every load (``harness run``), by ``harness world
build`` without ``--force`` and by ``harness world check``; the same walk of the folder as the check of the record.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness.core.paths import harness_home, home_dir
from harness.core.registry import Registry
from harness.worlds.base import CHECKSUMS, CheckRow, World, builder_sketch, load_world_dir

log = logging.getLogger(__name__)


class WorldBuilder(Protocol):
    name: str
    description: str
    version: str  # bump when the layout or the build changes, so that old caches are not reused

    def build(self, out: Path) -> None:
        """Write the complete world layout into ``out`` (an empty folder)."""

    def check(self) -> list[CheckRow]:
        """Which inputs are present, where they come from, how to provide the missing ones."""

    # optional: ``declare()`` / ``describe()`` (what the build writes, known before it: harness.worlds.base
    # .builder_sketch); ``build_source(name, out, work, *, root) -> manifest entry`` (make, for the built world at
    # ``root``, a source with its own identity that an earlier version's build did not make: harness.worlds.adding)


class WorldRegistry(Registry):
    """The registered world builders, and the derived worlds of this home (:mod:`harness.worlds.derived`: made by
    ``harness world derive``, found by their folders, never built), each under its name."""

    def builder_names(self) -> list[str]:
        return super().names()

    def names(self) -> list[str]:
        from harness.worlds.derived_world import derived_names

        return sorted(set(super().names()) | set(derived_names()))

    def get(self, name: str) -> Any:
        from harness.core.errors import UnknownNameError

        try:
            return super().get(name)
        except UnknownNameError:
            from harness.worlds.derived_world import derived_builder

            derived = derived_builder(name, self)
            if derived is None:
                raise
            return derived


WORLDS: Registry = WorldRegistry(
    "world", "harness.worlds", builtin_modules=("harness.worlds.synthetic", "harness.worlds.available")
)


def world_dir(name: str) -> Path:
    """Where world ``name`` is (or would be) built; naming it makes no folder."""
    builder = WORLDS.get(name)
    return home_dir() / "worlds" / f"{name}-v{builder.version}"


def declared_world(name: str) -> Any:
    """What world ``name`` declares without being built, for the checks a run makes before it builds or writes
    anything: the built world's manifest and language table where it is built here (two small files read, no file
    hashed: a damaged world is found and built again when it is loaded), else its builder's ``declare()`` or
    ``describe()`` (a :class:`~harness.worlds.base.WorldSketch`: languages, sources, resources and, where the
    builder knows them, the source models' hidden sizes); None for a builder that declares nothing (its run is
    checked once the world is built, before anything else is written)."""
    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file():
        try:
            world = load_world_dir(name, root)
            world.builder = builder  # type: ignore[attr-defined]  # (what it declares today: World.check_source)
            return world
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # unreadable: it is found damaged and built again when loaded; the builder's word until then
    return builder_sketch(builder)


def get_world(name: str, *, build: bool = True) -> World:
    """Load world ``name``, building it first if it is not in the cache (``build=False`` only loads)."""
    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file():
        check = _checked(name, root)
        refuse_unlisted(name, root, check)
        problem = check.problems[0] if check.problems else None
        if getattr(builder, "derived", False):  # never built: refused where damaged, its base world checked too
            _check_derived(name, root, problem)
            problem = None
        if problem is not None:
            if not build:
                from harness.core.errors import MissingResourceError

                raise MissingResourceError(f"world {name!r} at {root} is damaged ({problem}); "
                                           f"run `harness world build {name} --force`")
            log.warning("world %s at %s is damaged (%s); building it again", name, root, problem)
            _build_again(name, root, problem)
    if not (root / "manifest.json").is_file():
        if not build:
            from harness.core.errors import MissingResourceError

            raise MissingResourceError(f"world {name!r} is not built yet: run `harness world build {name}`")
        build_world(name)
    world = load_world_dir(name, root)
    world.builder = builder  # type: ignore[attr-defined]
    from harness.core.cache import lease

    lease(root)  # read by this process from now on: `harness cache prune` leaves it (harness.core.cache)
    if world.base is not None:
        lease(world.base.root)  # a derived world reads its base world's folder
    return world


def _check_derived(name: str, root: Path, problem: str | None) -> None:
    """A derived world (:mod:`harness.worlds.derived`) is not built again: one line where it is damaged; its base
    world is checked as a load checks any world."""
    from harness.core.errors import MissingResourceError

    if problem is not None:
        raise MissingResourceError(f"world {name!r} at {root} is damaged ({problem}); a derived world is not built "
                                   f"again: remove the folder and derive it again (`harness world derive {name} ...`)")
    derived = json.loads((root / "manifest.json").read_text(encoding="utf-8")).get("derived_from") or {}
    base, base_root = str(derived.get("world")), root.parent / str(derived.get("folder", ""))
    if not derived.get("folder") or not (base_root / "manifest.json").is_file():
        return  # (its load says so, in one line: harness.worlds.base.load_base_world)
    check = _checked(base, base_root)
    refuse_unlisted(base, base_root, check)
    if check.problems:
        raise MissingResourceError(f"world {name!r} is derived from world {base!r} at {base_root}, which is damaged "
                                   f"({check.problems[0]}): `harness world build {base} --force` builds it again (the "
                                   f"derived world is usable again where it gets the same hash)")


def _checked(name: str, root: Path) -> FilesCheck:
    """The world at ``root`` against its record, once an addition of sources killed after its commit began is
    finished (:mod:`harness.worlds.adding`). A world found damaged or holding files its record does not list is
    checked again under the world's lock: an addition in progress holds it, and its renames may have been seen half
    done."""
    from harness.core.locks import exclusive, lock_file
    from harness.worlds.journal import finish_pending, journal_path

    if journal_path(root).is_file():
        with exclusive(root, waiting=f"world {name}: sources being added by another process"):
            finish_pending(root)
    check = check_world_files(root)
    if (check.problems or check.unlisted) and lock_file(root).exists():  # (no lock file: nothing ever wrote it)
        with exclusive(root, waiting=f"world {name}: in use by another build"):
            finish_pending(root)
            check = check_world_files(root)
    return check


def _build_again(name: str, root: Path, problem: str) -> None:
    """Build a damaged world again; a world that cannot be built here (its inputs cannot be fetched) fails in one
    line naming what is damaged: it is never used as it is."""
    from harness.core.errors import MissingResourceError

    try:
        build_world(name, force=True, unless_sound=True)
    except Exception as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise MissingResourceError(f"world {name!r} at {root} is damaged ({problem}) and could not be built again "
                                   f"({why}); run `harness world build {name} --force` where its inputs can be "
                                   f"fetched") from exc


def build_world(name: str, *, force: bool = False, keep_inputs: bool = False, unless_sound: bool = False) -> Path:
    """Build world ``name`` (if not built, or ``force``). Once it is in place, what its builder downloaded and
    installed under the home for the build (``builder.build_inputs``: folders no later step reads) is removed,
    unless ``keep_inputs``; a later build fetches it again. ``unless_sound`` (a world found damaged, built again):
    a world that is sound once the lock is held (another process finished what it was writing) is kept."""
    from harness.core.locks import exclusive

    builder = WORLDS.get(name)
    root = world_dir(name)
    if (root / "manifest.json").is_file() and not force:
        check = check_world_files(root)
        refuse_unlisted(name, root, check)
        if not check.problems:
            return root
    root.parent.mkdir(parents=True, exist_ok=True)
    # one build of a world at a time: a second process (another `harness run` started beside this one) waits,
    # then finds the world built
    with exclusive(root, waiting=f"world {name}: built by another process"):
        from harness.worlds.journal import finish_pending

        if (root / "manifest.json").is_file():
            finish_pending(root)  # an addition of sources killed after its commit began
        if (root / "manifest.json").is_file() and (not force or unless_sound):
            problem = verify_world(root)
            if problem is None:
                return root
            if not unless_sound:  # (a damaged world's load said so already)
                log.warning("world %s at %s is damaged (%s); building it again", name, root, problem)
        return _build_locked(name, builder, root, keep_inputs)


def _build_locked(name: str, builder: Any, root: Path, keep_inputs: bool) -> Path:
    # what a killed build of this world left (nobody else builds it while the lock is held)
    for stale in root.parent.glob(f".tmp-{root.name}-*"):
        log.warning("removing %s, left by a world build that was killed", stale)
        shutil.rmtree(stale, ignore_errors=True)
    tmp = root.parent / f".tmp-{root.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        log.info("building world %s into %s", name, root)
        builder.build(tmp)
        if not (tmp / "manifest.json").is_file():
            raise RuntimeError(f"world builder {name!r} wrote no manifest.json")
        write_checksums(tmp)
        if root.exists():
            shutil.rmtree(root)
        os.replace(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not keep_inputs:
        from harness.core.cache import discard_build_inputs

        discard_build_inputs(harness_home(), getattr(builder, "build_inputs", ()))
    return root


_HASHED = ("manifest.json", "languages.json")  # the world's identity and its language table: hashed at every load


def write_checksums(root: Path, *, digests: bool = True, known: dict[str, str] | None = None) -> None:
    """``checksums.json``: the size of every file (``sizes``) and the sha256 of the manifest and the language table
    (``sha256``), as every version wrote them; with ``digests`` (a build), the sha256 and the times of every file
    too (``files``: ``{path: {"sha256", "mtime_ns", "ctime_ns"}}``), which loading compares
    (:func:`check_world_files`). ``known``: the sha256 of files (by relative path) this process hashed while it
    wrote them, not read again."""
    from harness.core.hashing import sha256_file

    known = known or {}
    paths = [p for p in sorted(root.rglob("*")) if p.is_file() and p.name != CHECKSUMS]
    record: dict[str, Any] = {"sizes": {p.relative_to(root).as_posix(): p.stat().st_size for p in paths}}
    if digests:
        record["files"] = {rel: file_entry(p, known.get(rel))
                           for p in paths for rel in (p.relative_to(root).as_posix(),)}
        record["sha256"] = {rel: record["files"][rel]["sha256"] for rel in _HASHED if rel in record["files"]}
    else:
        record["sha256"] = {rel: sha256_file(root / rel) for rel in _HASHED if (root / rel).is_file()}
    _write_record(root, record)


def file_entry(path: Path, sha256: str | None = None) -> dict[str, Any]:
    """A file's entry under the record's ``files``: its sha256 (``sha256`` where the caller just computed it)
    and its times (:func:`_times`)."""
    from harness.core.hashing import sha256_file

    return {"sha256": sha256 or sha256_file(path), **_times(path.stat())}


def _times(st: os.stat_result) -> dict[str, int]:
    """A file's stat key besides its size: the modification time and the status-change time (set by the kernel
    on every write, rename, chmod or copy; no call sets it back)."""
    return {"mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _write_record(root: Path, record: dict[str, Any]) -> None:
    tmp = root / f".{CHECKSUMS}.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(record, indent=0, sort_keys=True))
    os.replace(tmp, root / CHECKSUMS)


@dataclass
class FilesCheck:
    """What :func:`check_world_files` found: the problems (one phrase each, naming the file), whether the world's
    record holds every file's digest (a world built before they were recorded holds sizes only), and how many
    files were hashed."""

    problems: list[str]
    digests: bool
    files: int = 0
    hashed: int = 0
    unlisted: list[str] = field(default_factory=list)  # files in the world's folder its record does not list


def check_world_files(root: Path, *, full: bool = False) -> FilesCheck:
    """The world at ``root`` against its ``checksums.json``: every recorded file present with its size; the manifest
    and the language table by sha256; and, where the build recorded every file's digest, each file whose
    modification or status-change time differs from the record hashed again (``full``: every file, for ``harness
    world check``). A file whose content still matches has its new times recorded, so it is hashed once (a copied
    world; a record written before the status-change time was part of it)."""
    from harness.core.hashing import sha256_file

    path = root / CHECKSUMS
    if not path.is_file():  # built before the record existed: it gets one (sizes only) if its metadata parses
        for rel in _HASHED:
            try:
                json.loads((root / rel).read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                return FilesCheck([f"{rel} is unreadable ({type(exc).__name__})"], False)
        try:
            write_checksums(root, digests=False)
        except OSError:
            pass
        return FilesCheck([], False)
    try:
        record = json.loads(path.read_text())
        sha, sizes, files = record["sha256"], record["sizes"], record.get("files") or {}
        if not isinstance(sizes, dict) or not isinstance(sha, dict) or not isinstance(files, dict):
            raise TypeError("not a mapping")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return FilesCheck([f"{CHECKSUMS} is unreadable ({type(exc).__name__})"], False)
    out = FilesCheck([], bool(files), files=len(sizes), unlisted=_unlisted(root, sizes))
    moved: dict[str, dict[str, int]] = {}
    for rel, size in sizes.items():
        f = root / rel
        try:
            st = f.stat()  # one system call per file: every load makes it
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            out.problems.append(f"{rel} is missing")
            continue
        if st.st_size != size:
            out.problems.append(f"{rel} has {st.st_size} bytes, {size} expected")
            continue
        rec = files.get(rel)
        if not isinstance(rec, dict):
            continue
        times = _times(st)
        if full or any(rec.get(k) != v for k, v in times.items()):
            out.hashed += 1
            if sha256_file(f) != rec.get("sha256"):
                out.problems.append(f"{rel} does not match its sha256 (changed since the world was built)")
            elif any(rec.get(k) != v for k, v in times.items()):
                moved[rel] = times
    for rel, digest in sha.items():
        if rel not in files and (root / rel).is_file() and sha256_file(root / rel) != digest:
            out.problems.append(f"{rel} does not match its sha256")
    if moved and not out.problems:  # same bytes, new times (a copied world): record them
        for rel, times in moved.items():
            files[rel].update(times)
        try:
            _write_record(root, record)
        except OSError:
            pass
    return out


def _unlisted(root: Path, recorded: dict[str, Any]) -> list[str]:
    """The files under ``root`` that its record does not list (the record itself, and the temporary file it is
    written through, aside): a file dropped into the world after its build, which a glob of its folders would
    read."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for n in sorted(names):
            rel = (Path(folder) / n).relative_to(root).as_posix()
            if rel != CHECKSUMS and not rel.startswith(f".{CHECKSUMS}.") and rel not in recorded:
                out.append(rel)
    return out


def unlisted_message(name: str, root: Path, unlisted: list[str]) -> str:
    """One line: the files of a world that its record does not list, and what to do."""
    more = f" (and {len(unlisted) - 1} more: {', '.join(unlisted[1:4])}{', ...' if len(unlisted) > 4 else ''})" \
        if len(unlisted) > 1 else ""
    return (f"world {name!r} at {root} holds {unlisted[0]}{more}, which its build did not write ({CHECKSUMS} does "
            f"not list it): a world is exactly what its record lists, so it is not used as it is; remove the file, "
            f"or run `harness world build {name} --force` to build the world again without it")


def refuse_unlisted(name: str, root: Path, check: FilesCheck) -> None:
    """Refuse a world that holds files its record does not list (:class:`MissingResourceError`, one line)."""
    if check.unlisted:
        from harness.core.errors import MissingResourceError

        raise MissingResourceError(unlisted_message(name, root, check.unlisted))


# what a build writes about itself (its stages' timings, its heads' losses): not part of what the world is, and
# different at every build, so left out of the digest (a world's identity, its manifest, never held it)
BUILD_STATISTICS = frozenset({"build_info.json"})


def world_digest(root: Path) -> tuple[str, int]:
    """``(digest, files)``: the sha256 over every file the build of the world at ``root`` produced (each file's
    path and sha256 from its record, the source models' trained heads and the manifest included; the build's
    statistics, :data:`BUILD_STATISTICS`, left out), so that two homes compare their worlds in one line: a world
    that loads has been checked against the record. A record written before every file's digest was kept has its
    files hashed here."""
    import hashlib

    from harness.core.hashing import sha256_file

    record = json.loads((root / CHECKSUMS).read_text())
    files = record.get("files") or {}
    listed = [rel for rel in (sorted(files) if files else sorted(record["sizes"])) if rel not in BUILD_STATISTICS]
    h = hashlib.sha256()
    for rel in listed:
        digest = files[rel]["sha256"] if files else sha256_file(root / rel)
        h.update(f"{rel}\t{digest}\n".encode())
    return h.hexdigest(), len(listed)


def verify_world(root: Path) -> str | None:
    """None when the world at ``root`` matches its ``checksums.json`` (:func:`check_world_files`), else the first
    problem (one phrase naming the file)."""
    problems = check_world_files(root).problems
    return problems[0] if problems else None
