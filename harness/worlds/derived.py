"""Derived worlds: a built world's tasks and resources with the user's own source model, target tokenizer, donor
and text (``harness world derive NAME --from WORLD --source PATH ...``).

A derived world is a folder ``worlds/<NAME>-v1`` beside its base world. It holds only what is the user's:

    manifest.json              name, ``derived_from`` (the base world's name, its folder, its hash), the source's
                               entry (objective, architecture, sizes, tied, every stored file's sha256), the target
                               tokenizer's, the donor's and each user text's (sha256, line counts)
    derivation.json            where each input came from (paths, hub ids) and how each file was stored: not part of
                               the world's identity, so the same bytes from another path are the same world
    languages.json             the base world's languages and the user's
    sources/<name>/            the source model (a Hugging Face folder; a folder's files hard-linked where the file
                               system allows, else copied; a GGUF converted)
    target_tokenizer/          the target tokenizer (a tokenizer folder)
    donor/                     the donor model, owner of the target vocabulary (optional)
    resources/cpt/<lang>.txt   a user's text for a language the base world lacks, less its held-out lines (also
    resources/text/<lang>.txt  the monolingual text, a hard link to the same file)
    tasks/mlm/                 only with a user's text: the held-out text task, its meta listing the base world's
                               languages and the user's; the base world's files as relative links, the user's held out
                               lines as ``<lang>.txt``

Every other task and resource is read in the base world's folder (:class:`harness.worlds.base.World` resolves
``task_dir``, ``resource_files`` and ``resource_path`` there): nothing the size of a corpus is copied. The world's
hash is the hash of its manifest, which holds the base world's hash and the sha256 of every file of the user's, so
any change of theirs, or a base world built again to other bytes, is another world. A derived world is loaded, run
and described like any other (its name resolves through :mod:`harness.worlds.derived_world`); it is never built:
when its base world's hash is no longer the one it was derived from, loading it is refused in one line.

Writing is atomic: everything is staged in ``worlds/.tmp-<NAME>-v1-derive-<pid>-<id>/`` and renamed into place at
the end; a refusal or a failure removes the staging folder, so nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError
from harness.core.paths import home_dir
from harness.worlds.base import CHECKSUMS, LANG_CODE_RE, World
from harness.worlds.derived_inputs import (
    check_donor_vocab,
    digests,
    has_tokenizer,
    link_or_copy,
    load_tokenizer,
    resolve_model,
    split_text,
    stage_model,
    stage_tokenizer,
)
from harness.worlds.derived_world import NAME_RE, VERSION, derived_root
from harness.worlds.writer import write_json, write_lines

DERIVATION = "derivation.json"


# -- deriving ----------------------------------------------------------------------------------------------------
def check_name(name: str) -> None:
    from harness.worlds import WORLDS

    if not NAME_RE.match(name):
        raise ConfigError(f"world name {name!r}: lower-case letters, digits, '.', '-' and '_' only, beginning with a "
                          f"letter or a digit")
    if name in WORLDS.builder_names():
        raise ConfigError(f"world name {name!r} is a registered world; give the derived world another name")
    worlds = home_dir() / "worlds"
    taken = sorted(worlds.glob(f"{name}-v*")) if worlds.is_dir() else []
    taken = [p for p in taken if re.fullmatch(rf"{re.escape(name)}-v\d+", p.name)]
    if taken:
        raise ConfigError(f"world {name!r} exists already ({taken[0]}); give the derived world another name (or "
                          f"remove that folder)")


def parse_texts(items: list[str]) -> dict[str, Path]:
    """``--text LANG=FILE`` arguments: ``{lang: file}``, each code ISO 639-3 + ISO 15924 and each file present."""
    out: dict[str, Path] = {}
    for item in items:
        lang, sep, file = item.partition("=")
        if not sep or not re.match(LANG_CODE_RE, lang) or not file:
            raise ConfigError(f"--text {item}: give LANG=FILE with LANG an ISO 639-3 code and a script "
                              f"(e.g. swh_Latn=my-text.txt)")
        if lang in out:
            raise ConfigError(f"--text: {lang} is given twice")
        path = Path(file).expanduser()
        if not path.is_file():
            raise ConfigError(f"--text {item}: no such file {path}")
        out[lang] = path
    return out


def check_languages(base: World, texts: dict[str, Path], langs: list[str]) -> None:
    """Each user text for a language the base world lacks; each requested language has data (the base world's,
    or a user's text)."""
    for lang in texts:
        if lang in base.languages:
            raise ConfigError(f"--text {lang}=...: world {base.name!r} has data for {lang} already; --text adds a "
                              f"language the base world lacks")
    for lang in langs:
        if not re.match(LANG_CODE_RE, lang):
            raise ConfigError(f"--langs {lang}: not a language code (ISO 639-3 and a script, e.g. swh_Latn)")
        if lang not in base.languages and lang not in texts:
            raise ConfigError(f"language {lang}: world {base.name!r} has no data for it and no --text {lang}=FILE "
                              f"gives some")


def kept_languages(base: World, texts: dict[str, Path], langs: list[str]) -> frozenset[str] | None:
    """``--langs``: the languages the derived world keeps, the pivot and the user's texts' among them; None (every
    language of the base world) without it."""
    return frozenset({*langs, *texts, base.pivot}) if langs else None


def source_name(given: str) -> str:
    """A source's name in the world, from what the user gave: the folder's name, the GGUF's stem, the hub id's
    model name; lower-case, other characters as '-'."""
    p = Path(given.rstrip("/"))
    stem = p.stem if p.suffix.lower() == ".gguf" else p.name
    return re.sub(r"[^a-z0-9_.-]+", "-", stem.lower()).strip("-.") or "source"


def derive(name: str, base_name: str, source: str, *, target_tokenizer: str | None = None,
           donor: str | None = None, texts: list[str] | None = None, langs: list[str] | None = None,
           name_of_source: str | None = None, copy: bool = False, trim: bool = False,
           source_kind: str | None = None, note: Callable[[str], None] = print) -> Path:
    """Make derived world ``name`` from built world ``base_name`` (see the module's docstring); its folder. Each
    bad input is refused in one line (:class:`ConfigError`) and nothing is written. ``trim``: the target tokenizer
    trimmed to the pieces the world's text uses, the donor's rows re-indexed to it (:mod:`harness.worlds.trim`)."""
    from harness.worlds import get_world, world_dir

    check_name(name)
    user_texts = parse_texts(texts or [])
    base_root = world_dir(base_name)
    if not (base_root / "manifest.json").is_file():
        raise ConfigError(f"--from {base_name}: world {base_name!r} is not built here; `harness world build "
                          f"{base_name}` builds it")
    base = get_world(base_name, build=False)
    check_languages(base, user_texts, list(langs or []))
    src = resolve_model(source, "source")
    don = resolve_model(donor, "donor") if donor else None
    sname = name_of_source or source_name(source)
    if not NAME_RE.match(sname):
        raise ConfigError(f"--source-name {sname!r}: lower-case letters, digits, '.', '-' and '_' only")
    root = derived_root(name)
    root.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_stagings(root)
    staging = root.parent / f".tmp-{root.name}-derive-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        derivation: dict[str, Any] = {"command": {"base": base_name, "source": source, "target_tokenizer":
                                                  target_tokenizer, "donor": donor, "texts": texts or [],
                                                  "trim": trim}}
        kept = kept_languages(base, user_texts, list(langs or []))
        manifest = _stage(name, base, staging, src, don, sname, target_tokenizer, user_texts, copy, note,
                          derivation, trim, kept)
        _source_languages(base, manifest["sources"][sname], source_kind, note)
        write_json(staging / "manifest.json", manifest)
        write_json(staging / DERIVATION, derivation)
        _write_languages(base, staging, user_texts, manifest)
        _commit(staging, root, manifest)
    except OSError as exc:  # a full disk, a read-only or vanished folder: one line, nothing left behind
        shutil.rmtree(staging, ignore_errors=True)
        raise ConfigError(f"world {name} could not be written ({exc.strerror or exc}"
                          f"{': ' + str(exc.filename) if exc.filename else ''}); nothing was written") from exc
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root


def _remove_stale_stagings(root: Path) -> None:
    """The staging folders of derivations of this name whose process is gone (killed)."""
    for stale in root.parent.glob(f".tmp-{root.name}-derive-*"):
        pid = stale.name[len(f".tmp-{root.name}-derive-"):].split("-")[0]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except (ValueError, PermissionError):
            continue


def _commit(staging: Path, root: Path, manifest: dict[str, Any]) -> None:
    """The staged world's record written and synced (the model and tokenizer files' sha256 taken from
    ``manifest``, which holds them as staged, not computed again), then the staging folder renamed into place
    (refused where a world of that name appeared meanwhile)."""
    from harness.worlds import write_checksums
    from harness.worlds.journal import sync_tree

    staged = {**{f"sources/{name}": entry for name, entry in manifest["sources"].items()},
              "target_tokenizer": manifest["target_tokenizer"], "donor": manifest.get("donor") or {}}
    write_checksums(staging, known={f"{folder}/{rel}": sha for folder, entry in staged.items()
                                    for rel, sha in (entry.get("sha256") or {}).items()})
    sync_tree(staging)
    if root.exists():
        raise ConfigError(f"world folder {root} appeared while the world was derived; give another name")
    try:
        os.rename(staging, root)
    except OSError as exc:
        raise ConfigError(f"world folder {root} could not be written ({exc.strerror})") from exc


def _stage(name: str, base: World, staging: Path, src: Any, don: Any, sname: str, target_tokenizer: str | None,
           user_texts: dict[str, Path], copy: bool, note: Callable[[str], None],
           derivation: dict[str, Any], trim: bool = False, kept: frozenset[str] | None = None) -> dict[str, Any]:
    """Every file of the derived world but its manifest, record and language table, into ``staging``; its
    manifest."""
    note(f"world {name}: source {sname} from {src.given} ({src.kind})")
    source = stage_model(src, staging / "sources" / sname, "source", copy=copy)
    if not has_tokenizer(staging / "sources" / sname):
        raise ConfigError(f"--source {src.given}: the model ships no tokenizer (tokenizer.json, tokenizer_config.json, "
                          f"vocab/merges files or a SentencePiece model); a source model needs its own tokenizer")
    derivation["source"] = {"input": source.pop("input"), "stored": source.pop("stored")}
    tok_dir = staging / "target_tokenizer"
    if target_tokenizer:
        note(f"world {name}: target tokenizer from {target_tokenizer}")
        tok = stage_tokenizer(target_tokenizer, tok_dir)
    else:
        for f in sorted(base.target_tokenizer_dir.iterdir()):
            if f.is_file():
                tok_dir.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, tok_dir / f.name)
        t = load_tokenizer(tok_dir, f"world {base.name}'s target tokenizer")
        tok = {"kind": f"world {base.name}'s target tokenizer", "input": {"world": base.name}, "size": len(t),
               "class": type(t).__name__, "sha256": digests(tok_dir)}
    derivation["target_tokenizer"] = {"input": tok.pop("input")}
    if trim:  # the full tokenizer kept beside until the donor is checked against it
        shutil.copytree(tok_dir, staging / "target-full")
    kept_ids = _trim_tokenizer(base, staging, user_texts, tok, note, kept) if trim else None
    manifest: dict[str, Any] = {
        "name": name, "version": VERSION,
        "derived_from": {"world": base.name, "folder": base.root.name, "hash": base.hash},
        "pivot_language": base.pivot,
        "sources": {sname: {"description": f"{source['architecture']} from {src.kind} {Path(src.given).name}",
                            "tokenizer": f"{source['vocab_size']} tokens, the model's own",
                            **source, "target_vocab": tok["size"]}},  # (the shape a plan prices)
        "default_source": sname, "target_tokenizer": tok}
    if kept is not None:
        manifest["languages_kept"] = sorted(kept)
    if don is not None:
        note(f"world {name}: donor from {don.given} ({don.kind})")
        manifest["donor"] = _stage_donor(don, staging, tok["size"], copy, derivation, kept_ids)
    if user_texts:
        manifest["user_texts"] = _stage_texts(base, staging, user_texts, derivation)
    shutil.rmtree(staging / "target-full", ignore_errors=True)
    return manifest


def _source_languages(base: World, entry: dict[str, Any], kind: str | None, note: Callable[[str], None]) -> None:
    """Whether the source is multilingual, in its manifest entry (``multilingual``): from ``--source-kind``, else
    from the base world's entry of a source whose weights are the same bytes (one of its own models), else left
    unknown (a method that needs it, HyperOFA, then asks for its ``source_kind`` parameter)."""
    if kind is None:
        record = base.root / CHECKSUMS
        files = json.loads(record.read_text(encoding="utf-8")).get("files", {}) if record.is_file() else {}
        mine = {f: sha for f, sha in (entry.get("sha256") or {}).items() if f.endswith((".safetensors", ".bin"))}
        for s, info in (base.manifest.get("sources") or {}).items():
            theirs = {f: files.get(f"sources/{s}/{f}", {}).get("sha256") for f in mine}
            if mine and theirs == mine and isinstance(info.get("multilingual"), bool):
                kind = "multi" if info["multilingual"] else "mono"
                note(f"source: the base world's {s!r} (same weights), {kind}lingual")
                break
    if kind is not None:
        entry["multilingual"] = kind == "multi"


def _trim_tokenizer(base: World, staging: Path, user_texts: dict[str, Path], tok: dict[str, Any],
                    note: Callable[[str], None], kept_langs: frozenset[str] | None = None) -> list[int]:
    """``--trim``: the staged target tokenizer trimmed to the pieces of the world's text and the user's; its
    manifest entry ``tok`` updated (size, sha256, ``trimmed``: the rule, the counts, the kept ids' sha256); the
    kept ids (in the full tokenizer), also written to ``trimming.json``."""
    import hashlib

    from harness.worlds.trim import trim_tokenizer, world_lines

    tok_dir = staging / "target_tokenizer"
    kept, record = trim_tokenizer(tok_dir, world_lines(base, user_texts.values(), kept_langs), note)
    write_json(staging / "trimming.json", {"kept_ids": kept, "total": record["total"], "rule": record["rule"]})
    record["kept_ids_sha256"] = hashlib.sha256(json.dumps(kept).encode()).hexdigest()
    tok.update(size=len(kept), sha256=digests(tok_dir), trimmed=record)
    return kept


def _stage_donor(don: Any, staging: Path, target_size: int, copy: bool, derivation: dict[str, Any],
                 kept: list[int] | None = None) -> dict[str, Any]:
    """The donor stored at ``donor/`` (with ``kept``: its rows re-indexed to the trimmed target vocabulary) and
    checked against the target tokenizer; its manifest entry (``identity``: the sha256 over its files' digests,
    ``path``, ``vocab``: the target tokenizer's length)."""
    import hashlib

    entry = stage_model(don, staging / ("donor-full" if kept is not None else "donor"), "donor", copy=copy)
    derivation["donor"] = {"input": entry.pop("input"), "stored": entry.pop("stored")}
    if kept is not None:
        entry = _trimmed_donor(don, staging, entry, kept)
        derivation["donor"]["stored"] = {f: "written, its rows re-indexed to the trimmed vocabulary"
                                         for f in sorted(entry["sha256"])}
    if entry["embedding_rows"] < target_size:
        raise ConfigError(f"--donor {don.given}: its input embedding has {entry['embedding_rows']:,} rows, fewer than "
                          f"the target tokenizer's {target_size:,} tokens; a donor owns the target vocabulary")
    facts = check_donor_vocab(staging / "donor", staging / "target_tokenizer", don.given)
    identity = hashlib.sha256("".join(f"{k}\t{v}\n" for k, v in sorted(entry["sha256"].items())).encode())
    return {"identity": identity.hexdigest(), "path": "donor", "vocab": facts["vocab"],
            "donor_tokenizer": facts["tokenizer"], **entry}


def _trimmed_donor(don: Any, staging: Path, full: dict[str, Any], kept: list[int]) -> dict[str, Any]:
    """The staged full donor (``donor-full/``) written at ``donor/`` with its rows re-indexed to ``kept`` and
    removed; the trimmed donor's entry, ``trimmed_from`` the full donor's rows and files' sha256."""
    from harness.worlds.derived_inputs import ModelInput, model_facts
    from harness.worlds.trim import trim_donor

    target_size = len(load_tokenizer(staging / "target-full", "--target-tokenizer"))
    if full["embedding_rows"] < target_size:
        raise ConfigError(f"--donor {don.given}: its input embedding has {full['embedding_rows']:,} rows, fewer than "
                          f"the target tokenizer's {target_size:,} tokens; a donor owns the target vocabulary")
    check_donor_vocab(staging / "donor-full", staging / "target-full", don.given)
    trim_donor(staging / "donor-full", staging / "donor", staging / "target_tokenizer", kept, full["objective"])
    shutil.rmtree(staging / "donor-full")
    facts = model_facts(staging / "donor", full["objective"], ModelInput("folder", staging / "donor", don.given),
                        "donor")
    return {**facts, "sha256": digests(staging / "donor"),
            "trimmed_from": {"embedding_rows": full["embedding_rows"], "sha256": full["sha256"]}}


def _stage_texts(base: World, staging: Path, user_texts: dict[str, Path],
                 derivation: dict[str, Any]) -> dict[str, Any]:
    """Each user text split into CPT/monolingual text (``resources/cpt``, ``resources/text``) and held-out text
    (``tasks/mlm/<lang>.txt``, beside links to the base world's held-out files); their manifest entries."""
    from harness.core.hashing import sha256_file

    entries: dict[str, Any] = {}
    overlay = staging / "tasks" / "mlm"
    overlay.mkdir(parents=True)
    base_mlm = base.task_dir("mlm")
    meta = base.task_meta("mlm") if (base_mlm / "meta.json").is_file() else {
        "languages": {}, "description": "held-out text per language"}
    for f in sorted(base_mlm.iterdir()) if base_mlm.is_dir() else []:
        if f.is_file() and f.name != "meta.json":
            # relative: the same from the staging folder as from the world's folder beside it, and after a move of
            # the home
            os.symlink(os.path.relpath(os.path.realpath(f), os.path.realpath(overlay)), overlay / f.name)
    derivation["texts"] = {}
    for lang, path in sorted(user_texts.items()):
        train, held = split_text(path, lang)
        cpt = staging / "resources" / "cpt" / f"{lang}.txt"
        write_lines(cpt, train)
        link_or_copy(cpt, staging / "resources" / "text" / f"{lang}.txt")
        write_lines(overlay / f"{lang}.txt", held)
        meta["languages"][lang] = {"label_source": "gold", "origin": "user text"}
        entries[lang] = {"sha256": sha256_file(path), "lines": len(train) + len(held), "cpt_lines": len(train),
                         "heldout_lines": len(held), "text_chars": sum(len(s) for s in train)}
        derivation["texts"][lang] = str(path.resolve())
    write_json(overlay / "meta.json", meta)
    return entries


def _write_languages(base: World, staging: Path, user_texts: dict[str, Path], manifest: dict[str, Any]) -> None:
    """The base world's language table (whether each language was seen in pretraining is not known for the user's
    source: ``seen`` is empty) and the user's languages."""
    raw = json.loads((base.root / "languages.json").read_text(encoding="utf-8"))
    kept = manifest.get("languages_kept")
    table = {code: {**info, "seen": {}} for code, info in raw.items() if kept is None or code in kept}
    for lang in user_texts:
        table[lang] = {"script": lang.split("_")[1], "seen": {}, "resource_level": "user",
                       "text_chars": manifest["user_texts"][lang]["text_chars"], "origin": "user text"}
    write_json(staging / "languages.json", dict(sorted(table.items())))


# -- describing ------------------------------------------------------------------------------------------------
def describe(world: World) -> list[str]:
    """What ``harness world info`` says of a derived world beyond its language table: its base world, its source,
    target tokenizer, donor and the user's texts."""
    m = world.manifest
    base = m["derived_from"]
    lines = [f"derived from world {base.get('world')} (folder {base.get('folder')}, hash {base.get('hash')}): its "
             f"tasks and resources are read there, none copied"]
    for s in world.sources:
        info = m["sources"][s]
        params = info.get("parameters")
        lines.append(f"{world.source_line(s)}, hidden size {info.get('hidden_size')}, {info.get('num_layers')} layers"
                     + (f", {params / 1e6:,.1f}M parameters" if isinstance(params, int) else ""))
    if world.kept_languages is not None:
        lines.append(f"languages kept (--langs): {', '.join(sorted(world.kept_languages))}; the base world's other "
                     f"languages are not in this world")
    tok = m.get("target_tokenizer") or {}
    lines.append(f"target tokenizer: {tok.get('kind')}, {tok.get('size', 0):,} tokens ({tok.get('class')})")
    trimmed = tok.get("trimmed")
    if trimmed:
        reasons = ", ".join(f"{v:,} {k}" for k, v in trimmed.get("reasons", {}).items())
        lines.append(f"target tokenizer trimmed ({trimmed.get('model')}): {trimmed.get('kept', 0):,} of "
                     f"{trimmed.get('total', 0):,} pieces kept ({reasons}): {trimmed.get('rule')}; the world's "
                     f"tokenization unchanged on {trimmed.get('checked_lines', 0):,} of its "
                     f"{trimmed.get('text_lines', 0):,} lines; the world's identity covers the trimming "
                     f"(kept ids {trimmed.get('kept_ids_sha256', '')[:16]})")
    donor = m.get("donor")
    if donor and donor.get("trimmed_from"):
        lines.append(f"donor trimmed: its {donor['trimmed_from']['embedding_rows']:,} embedding rows re-indexed to "
                     f"the trimmed target vocabulary's {donor['embedding_rows']:,}")
    lines.append(f"donor: {donor['architecture']} ({donor['objective']}), {donor['embedding_rows']:,} embedding rows "
                 f"for the target's {donor['vocab']:,} tokens, tokenizer: {donor['donor_tokenizer']}, identity "
                 f"{donor['identity'][:16]}" if donor else "donor: none")
    texts = m.get("user_texts") or {}
    for lang, t in sorted(texts.items()):
        lines.append(f"user text {lang}: {t['lines']:,} lines ({t['cpt_lines']:,} CPT and monolingual text, "
                     f"{t['heldout_lines']:,} held out for the held-out loss), sha256 {t['sha256'][:16]}")
    if not texts:
        lines.append("user texts: none")
    return lines
