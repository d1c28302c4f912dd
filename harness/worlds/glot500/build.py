"""One build of the `glot500` world layout (:mod:`harness.worlds.base`) from the inputs its spec names, read with
:mod:`harness.worlds.glot500.loaders`; :meth:`harness.worlds.glot500.builder.Glot500World.build` runs it once
every input is present."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.core.errors import ConfigError, MissingResourceError
from harness.worlds.glot500 import langcodes as lc
from harness.worlds.glot500 import loaders as ld
from harness.worlds.glot500.spec import TASKS, _ref, _spec_hash, decoders
from harness.worlds.writer import WorldWriter, write_jsonl

log = logging.getLogger(__name__)


def _seed_for(seed: int, code: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{code}".encode()).digest()[:8], "little")


@contextlib.contextmanager
def _progress() -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """``task(description, total) -> advance(n)``: rich bars on an interactive terminal, plain progress lines
    (start, every tenth, end with the elapsed time) when the output is piped (:mod:`harness.core.progress`)."""
    from rich.console import Console

    from harness.core.progress import Progress, callbacks

    with Progress(console=Console(stderr=True)) as bar:
        yield callbacks(bar)


class _Build:
    """One build of the world layout into ``out`` (a fresh folder); ``world`` is the
    :class:`~harness.worlds.glot500.builder.Glot500World` whose spec views and per-input helpers it uses."""

    def __init__(self, world: Any, spec: dict[str, Any], out: Path):
        self.world = world
        self.spec = spec
        self.out = out
        self.writer = WorldWriter(out)
        self.needs = world.needs(spec)
        self.pivot = lc.normalize(spec["world"].get("pivot", "eng_Latn"))
        self.inputs: dict[str, dict[str, Any]] = {}  # manifest records
        self.used: dict[str, set[Path]] = {}  # input -> files read
        self.meta: dict[str, dict[str, Any]] = {t: {} for t in TASKS}
        self.stats: dict[str, Any] = {}

    def use(self, name: str, files: list[Path] | set[Path]) -> None:
        self.used.setdefault(name, set()).update(files)

    def run(self) -> None:
        with _progress() as progress:
            self.progress = progress
            self.sources()
            self.target_tokenizer()
            self.cpt_and_mlm()
            self.ner()
            self.pos()
            self.srt()
            self.srb()
            self.word_vectors()
            self.languages_and_manifest()

    # -- models -------------------------------------------------------------------------------------------------
    def sources(self) -> None:
        self.source_specs = self.world.sources(self.spec)
        for src in self.source_specs:
            folder = ld.resolve_repo(src.ref)
            assert folder is not None
            files = ld.source_model_files(folder)
            dest = self.out / "sources" / src.name
            for f in files:
                if f.name in ("config.json", "model.safetensors.index.json") or f.suffix == ".safetensors":
                    ld.link_or_copy(f, dest / f.name)
            tok = _load_source_tokenizer(folder)
            tok.save_pretrained(dest)
            from transformers import AutoConfig

            cfg = AutoConfig.from_pretrained(dest)
            if getattr(cfg, "vocab_size", len(tok)) != len(tok):
                raise ld.SchemaError(f"{folder}: config vocab_size {cfg.vocab_size} but the tokenizer has "
                                     f"{len(tok)} entries")
            self.use(f"source:{src.name}", files)
            self.inputs[f"source:{src.name}"] = self._record(src.ref, folder, src.licence)
            self.stats.setdefault("sources", {})[src.name] = {"vocab_size": len(tok),
                                                              "layers": getattr(cfg, "num_hidden_layers", None)}
        self.decoder_entries = {d.name: self.decoder(d) for d in decoders(self.spec) if d.build}

    def decoder(self, d: Any) -> dict[str, Any]:
        """A declared hub decoder copied from the Hub cache (its config, weights and tokenizer), checked to load
        as a causal LM with a tokenizer that fits its table; its manifest entry (its own identity: the files'
        sha256), outside the world's inputs."""
        from harness.core.objective import objective_of_dir

        folder = ld.resolve_repo(d.ref)
        if folder is None:
            raise MissingResourceError(f"decoder {d.name}: {d.ref.hub_id} is not in the Hub cache; "
                                       f"`hf download {d.ref.hub_id}` provides it, or set decoders.{d.name}.build = "
                                       f"false")
        dest = self.out / "sources" / d.name
        files = ld.source_model_files(folder)
        for f in files:
            if f.name in ("config.json", "model.safetensors.index.json") or f.suffix == ".safetensors":
                ld.link_or_copy(f, dest / f.name)
        tok = _load_source_tokenizer(folder)
        tok.save_pretrained(dest)
        if objective_of_dir(dest) != "clm":
            raise ld.SchemaError(f"decoder {d.name}: {folder}/config.json is not a causal LM's")
        return {**d.entry(), "files": {f.name: ld.file_sha256(f) for f in sorted(files)}, "vocab_size": len(tok)}

    def target_tokenizer(self) -> None:
        t = self.spec["target_tokenizer"]
        ref = _ref(t, "model")
        folder = ld.resolve_repo(ref)
        assert folder is not None
        tok = ld.load_target_tokenizer(folder)
        want = int(t.get("vocab_size") or 0)
        if want and len(tok) != want:
            raise ld.SchemaError(f"{folder}: the target tokenizer has {len(tok)} entries, the spec expects {want} "
                                 f"(Glot500-m); check the revision")
        tok.save_pretrained(self.out / "target_tokenizer")
        files = [folder / f for f in ("tokenizer.json", "sentencepiece.bpe.model", "tokenizer_config.json",
                                      "special_tokens_map.json") if (folder / f).is_file()]
        self.use("target_tokenizer", files)
        self.inputs["target_tokenizer"] = self._record(ref, folder, t.get("licence", ""))
        self.stats["target_vocab_size"] = len(tok)

    # -- Glot500-c -----------------------------------------------------------------------------------------------
    def cpt_and_mlm(self) -> None:
        inp = self.spec["inputs"]["glot500c"]
        ref = _ref(inp, "dataset")
        repo = ld.resolve_repo(ref)
        assert repo is not None
        cap = int(self.spec["cpt"].get("max_sentences", 5_000_000))
        k = int(self.spec["cpt"].get("heldout_sentences", 1000))
        table7 = {lc.normalize(r[0]): r for r in self.spec["cpt"].get("languages", [])}
        res = self.out / "resources"
        (res / "cpt").mkdir(parents=True, exist_ok=True)
        (res / "text").mkdir(parents=True, exist_ok=True)
        (self.out / "tasks" / "mlm").mkdir(parents=True, exist_ok=True)
        for code in self.needs.cpt:
            cfg = lc.to_glot500_config(code)
            n_train = ld.glot500c_rows(repo, cfg, "train")
            if ld.has_split(repo, cfg, "test"):
                heldout = list(ld.iter_glot500c(repo, cfg, "test", stop=k))
                held_from, stop = "test split", min(cap, n_train)
                self.use("glot500c", ld.split_files(repo, cfg, "test"))
            else:
                kk = min(k, n_train // 10)
                heldout = list(ld.iter_glot500c(repo, cfg, "train", start=n_train - kk))
                held_from, stop = f"last {kk} train rows", min(cap, n_train - kk)
            if not heldout:
                raise MissingResourceError(f"Glot500-c {cfg}: no held-out sentences for the mlm task")
            advance = self.progress(f"CPT text {code}", stop)
            path = res / "cpt" / f"{code}.txt"
            n = 0
            with open(path, "w", encoding="utf-8") as f:
                for s in ld.iter_glot500c(repo, cfg, "train", stop=stop):
                    f.write(s + "\n")
                    n += 1
                    if n % 10_000 == 0:
                        advance(10_000)
            ld.link_or_copy(path, res / "text" / f"{code}.txt")
            (self.out / "tasks" / "mlm" / f"{code}.txt").write_text("\n".join(heldout) + "\n", encoding="utf-8")
            self.use("glot500c", ld.split_files(repo, cfg, "train"))
            row = table7.get(code)
            self.meta["mlm"][code] = {"label_source": "gold", "sentences": len(heldout), "from": held_from,
                                      "glot500c_config": cfg}
            self.stats.setdefault("cpt", {})[code] = {
                "glot500c_train_rows": n_train, "used_rows": stop, "sentences_written": n,
                "table7_glot500c": row[2] if row else None, "table7_subsampled": row[3] if row else None,
                "category": row[1] if row else None}
        self.inputs["glot500c"] = self._record(ref, repo, inp.get("licence", ""))

    # -- NER ------------------------------------------------------------------------------------------------------
    def ner(self) -> None:
        inp = self.spec["inputs"]["wikiann"]
        ref = _ref(inp, "dataset")
        repo = ld.resolve_repo(ref)
        assert repo is not None
        d = self.out / "tasks" / "ner"
        for code in self.needs.tasks["ner"]:
            cfg = self.world._wikiann_config(self.spec, code)
            splits = ("train", "dev", "test") if code == self.pivot else ("test",)
            counts = {}
            for split in splits:
                rows = ld.read_wikiann(repo, cfg, split)
                write_jsonl(d / code / f"{split}.jsonl", [r.row() for r in rows])
                self.use("wikiann", ld.split_files(repo, cfg, split))
                counts[split] = len(rows)
            self.meta["ner"][code] = {"label_source": "silver", "wikiann_config": cfg, "sentences": counts}
        self.inputs["wikiann"] = self._record(ref, repo, inp.get("licence", ""))
        self._write_meta("ner", {"labels": list(ld.NER_LABELS), "train_language": self.pivot,
                                 "description": "WikiANN (Rahimi et al. 2019 splits; silver labels from Wikipedia "
                                                "links) IOB2 PER/LOC/ORG; train/dev in English, zero-shot test"})

    # -- POS ------------------------------------------------------------------------------------------------------
    def pos(self) -> None:
        inp = self.spec["inputs"]["ud"]
        d = self.out / "tasks" / "pos"
        fmt = inp.get("format", "hub")
        if fmt == "conllu":
            root = Path(inp["conllu_path"])
            if root.is_file():  # a release archive: extract with path checks
                root = ld.extract_tgz(root, self.out / ".ud-extract")
            source = {"format": "conllu", "path": str(inp["conllu_path"])}
        elif fmt == "hub":
            ref = _ref(inp, "dataset")
            repo = ld.resolve_repo(ref)
            assert repo is not None
            by_prefix = ld.ud_configs(repo)
            source = {"format": "hub"}
        else:
            raise ConfigError(f"inputs.ud.format must be 'hub' or 'conllu', not {fmt!r}")
        for code in self.needs.tasks["pos"]:
            prefix = self.world._ud_prefix(self.spec, code)
            splits = ("train", "dev", "test") if code == self.pivot else ("test",)
            counts = {}
            for split in splits:
                if fmt == "conllu":
                    rows = ld.read_ud_conllu(root, prefix, split)
                    self.use("ud", ld.conllu_files(root, prefix, split))
                    treebanks = sorted({p.name.split("-", 1)[0] for p in ld.conllu_files(root, prefix, "test")})
                else:
                    cfgs = by_prefix.get(prefix, [])
                    rows = ld.read_ud_hub(repo, cfgs, split)
                    self.use("ud", [f for c in cfgs for f in ld.split_files(repo, c, split)])
                    treebanks = sorted(c for c in cfgs if ld.has_split(repo, c, "test"))
                if not rows:
                    raise MissingResourceError(
                        f"UD: no {split} sentences for {code} (prefix {prefix!r}); exclude it in world.exclude.pos "
                        f"or use a UD release that has it")
                write_jsonl(d / code / f"{split}.jsonl", [r.row() for r in rows])
                counts[split] = len(rows)
            self.meta["pos"][code] = {"label_source": "gold", "ud_prefix": prefix, "treebanks": treebanks,
                                      "sentences": counts}
        if fmt == "conllu":
            shutil.rmtree(self.out / ".ud-extract", ignore_errors=True)
            self.inputs["ud"] = {"name": "ud", "path": source["path"], "format": "conllu",
                                 "licence": inp.get("licence", "")}
        else:
            self.inputs["ud"] = self._record(ref, repo, inp.get("licence", ""))
        tokenization = ("fused forms for multiword tokens (span-head UPOS), as Glot500's UD 2.11 conversion"
                        if fmt == "conllu" else
                        "syntactic words (multiword-token range lines dropped); Glot500 used fused forms")
        self._write_meta("pos", {"labels": list(ld.UPOS), "train_language": self.pivot, "tokenization": tokenization,
                                 "description": "Universal Dependencies UPOS, treebanks merged per language; "
                                                "train/dev in English, zero-shot test"})

    # -- SR-T -----------------------------------------------------------------------------------------------------
    def srt(self) -> None:
        inp = self.spec["inputs"]["tatoeba"]
        ref = _ref(inp, "dataset")
        repo = ld.resolve_repo(ref)
        assert repo is not None
        layout = inp.get("layout", "mteb")
        cap = int(inp.get("max_pairs", 1000))
        d = self.out / "tasks" / "sr-t"
        pivot_rows: list[dict[str, str]] = []
        for code in self.needs.tasks["sr-t"]:
            if code == self.pivot:
                continue
            cfg = self.world._tatoeba_config(self.spec, code, layout)
            code3 = cfg[:-4] if layout == "mteb" else cfg[len("tatoeba."):]
            pairs = ld.read_tatoeba(repo, code3, layout)[:cap]
            if not pairs:
                raise MissingResourceError(f"Tatoeba {cfg}: no sentence pairs")
            _check_direction(pairs, code, cfg)
            write_jsonl(d / f"{code}.jsonl", [{"id": f"{code}/{i}", "text": x} for i, (x, _) in enumerate(pairs)])
            pivot_rows += [{"id": f"{code}/{i}", "text": e} for i, (_, e) in enumerate(pairs)]
            self.use("tatoeba", ld.split_files(repo, cfg, "test" if layout == "mteb" else "dev"))
            self.meta["sr-t"][code] = {"label_source": "gold", "pairs": len(pairs), "config": cfg}
        write_jsonl(d / f"{self.pivot}.jsonl", pivot_rows)
        self.meta["sr-t"][self.pivot] = {"label_source": "gold", "role": "queries", "sentences": len(pivot_rows)}
        self.inputs["tatoeba"] = self._record(ref, repo, inp.get("licence", ""))
        self._write_meta("sr-t", {"description": "Tatoeba (LASER v1 test pairs), English queries, at most "
                                                 f"{cap} pairs per language", "layout": layout})

    # -- SR-B -----------------------------------------------------------------------------------------------------
    def srb(self) -> None:
        inp = self.spec["inputs"]["bible"]
        folder = self.world._bible_path(self.spec)
        fmt = inp.get("format", "pbc")
        cap = int(inp.get("max_verses", 500))
        seed = int(self.spec["world"].get("seed", 1))
        d = self.out / "tasks" / "sr-b"
        langs = [c for c in self.needs.tasks["sr-b"] if c != self.pivot]
        pivot_rows: dict[str, str] = {}
        if fmt == "glot500":
            for code in langs:
                pairs = ld.read_glot500_bible_pair(folder, code, self.pivot)[:cap]
                write_jsonl(d / f"{code}.jsonl", [{"id": f"{code}/{i}", "text": x} for i, (x, _) in enumerate(pairs)])
                pivot_rows.update({f"{code}/{i}": e for i, (_, e) in enumerate(pairs)})
                self.use("bible", [folder / f"bible.{code}-{self.pivot}.{code}",
                                   folder / f"bible.{code}-{self.pivot}.{self.pivot}"])
                self.meta["sr-b"][code] = {"label_source": "gold", "pairs": len(pairs)}
        elif fmt == "pbc":
            files = ld.pbc_files(folder)
            fixed = {lc.normalize(k): v for k, v in inp.get("files", {}).items()}
            eng_path = folder / inp["english_file"] if inp.get("english_file") else \
                max(files[self.pivot[:3]], key=lambda p: (len(ld.read_pbc_file(p)), p.name))
            english = ld.read_pbc_file(eng_path)
            self.use("bible", [eng_path])
            for code in langs:
                path = folder / fixed[code] if code in fixed else _pick_pbc_file(files.get(code[:3], []), code,
                                                                                  english)
                verses = ld.read_pbc_file(path)
                shared = sorted(set(verses) & set(english))
                if not shared:
                    raise MissingResourceError(f"Bible: {path.name} shares no verse with {eng_path.name}")
                rng = random.Random(_seed_for(seed, code))
                chosen = sorted(rng.sample(shared, cap)) if len(shared) > cap else shared
                write_jsonl(d / f"{code}.jsonl", [{"id": v, "text": verses[v]} for v in chosen])
                pivot_rows.update({v: english[v] for v in chosen})
                self.use("bible", [path])
                self.meta["sr-b"][code] = {"label_source": "gold", "pairs": len(chosen), "file": path.name,
                                           "shared_verses": len(shared)}
        else:
            raise ConfigError(f"inputs.bible.format must be 'pbc' or 'glot500', not {fmt!r}")
        write_jsonl(d / f"{self.pivot}.jsonl", [{"id": k, "text": v} for k, v in sorted(pivot_rows.items())])
        self.meta["sr-b"][self.pivot] = {"label_source": "gold", "role": "queries", "sentences": len(pivot_rows)}
        comparable = bool(inp.get("comparable", True))
        self.inputs["bible"] = {"name": "bible", "path": str(folder), "format": fmt, "comparable": comparable,
                                "licence": inp.get("licence", "")}
        self._write_meta("sr-b", {"description": f"Bible verses ({fmt}), English queries, at most {cap} verses per "
                                                 "language, sampled with a seeded generator", "seed": seed,
                                  "comparable_to_papers": comparable,
                                  "source": inp.get("source", "") if comparable else inp.get("standin", "")})

    # -- word vectors ------------------------------------------------------------------------------------------
    def word_vectors(self) -> None:
        path = self.world._colexnet_path(self.spec)
        kv = ld.read_keyed_vectors(path)
        advance = self.progress("ColexNet+ -> word2vec text", len(kv.keys))
        info = ld.write_word2vec_text(kv, self.out / "resources" / "word_vectors.vec", progress=advance)
        self.use("colexnet", kv.files)
        inp = self.spec["inputs"]["colexnet"]
        self.inputs["colexnet"] = {"name": "colexnet", "path": str(path), "url": inp.get("url", ""),
                                   "gensim_class": kv.gensim_class, "licence": inp.get("licence", "")}
        want = inp.get("sha256")
        if want and ld.file_sha256(path) != want:
            raise ld.SchemaError(f"{path}: sha256 differs from the spec's {want}")
        self.stats["word_vectors"] = info

    # -- languages and manifest ------------------------------------------------------------------------------------
    def _write_meta(self, task: str, extra: dict[str, Any]) -> None:
        self.writer.task_meta(task, {**extra, "languages": self.meta[task]})

    def _record(self, ref: ld.HubRef, folder: Path, licence: str) -> dict[str, Any]:
        return {"name": ref.hub_id, "hub_id": ref.hub_id, "revision": ref.revision,
                "commit": ld.snapshot_commit(folder), "path": str(ref.path) if ref.path else None,
                "licence": licence}

    def languages_and_manifest(self) -> None:
        self._write_meta("mlm", {"description": "held-out Glot500-c sentences per CPT language (its test split, "
                                                "else the tail of train, excluded from the CPT text)"})
        table7 = {lc.normalize(r[0]): r for r in self.spec["cpt"].get("languages", [])}
        xlmr = {lc.normalize(c) for c in self.spec["languages"].get("xlmr", [])}
        codes = sorted({self.pivot, *self.needs.cpt, *(c for t in TASKS for c in self.meta[t])})
        languages = {}
        for code in codes:
            text = self.out / "resources" / "text" / f"{code}.txt"
            row = table7.get(code)
            languages[code] = {
                "script": code[4:],
                "seen": {s.name: code in s.seen for s in self.source_specs},
                "resource_level": row[1] if row else "unknown",
                "text_chars": _count_chars(text) if text.is_file() else 0,
                "xlmr": code in xlmr,
                "tasks": [t for t in TASKS if code in self.meta[t]],
                "glot500c_config": lc.to_glot500_config(code),
            }
        self.writer.languages(languages)
        advance = self.progress("hashing inputs", sum(len(v) for v in self.used.values()))
        for name, files in sorted(self.used.items()):
            rec = self.inputs.setdefault(name, {"name": name})
            base = _common_root(files)
            hashes = {}
            for f in sorted(files):
                hashes[str(f.relative_to(base)) if base else f.name] = ld.file_sha256(f)
                advance(1)
            rec["files"] = hashes
        manifest = {
            "name": self.world.name,
            "version": self.world.version,
            "pivot_language": self.pivot,
            "sources": {**{s.name: {"description": s.description, "hub_id": s.ref.hub_id, "revision": s.ref.revision,
                                    "languages": s.seen} for s in self.source_specs}, **self.decoder_entries},
            "default_source": self.spec["world"].get("default_source", self.source_specs[0].name),
            "inputs": [self.inputs[k] for k in sorted(self.inputs)],
            "language_sets": {t: self.needs.tasks[t] for t in TASKS},
            "excluded": self.needs.excluded,
            "spec_hash": _spec_hash(self.spec),
            "stats": self.stats,
            "notes": ("the papers' setting (seed 000 / 002); SR-B comparable with the papers: "
                      f"{bool(self.spec['inputs']['bible'].get('comparable', True))}; POS data: "
                      f"{self.spec['inputs']['ud'].get('format', 'hub')}"),
        }
        self.writer.manifest(manifest)


def _check_direction(pairs: list[tuple[str, str]], code: str, where: str) -> None:
    """The target side must be in the language's script and the other side in English's (Latin): a swapped
    column order (a schema change) is caught for every language not written in Latin script."""
    if code[4:] == "Latn":
        return
    xs = lc.detect_script(" ".join(x for x, _ in pairs[:20]))
    es = lc.detect_script(" ".join(e for _, e in pairs[:20]))
    if xs != code[4:] or es != "Latn":
        raise ld.SchemaError(f"{where}: the {code} side reads as {xs} script and the English side as {es}; the "
                             f"columns are not in the expected order")


def _common_root(files: set[Path]) -> Path | None:
    try:
        return Path(os.path.commonpath([str(f.parent) for f in files])) if files else None
    except ValueError:
        return None


def _count_chars(path: Path) -> int:
    n = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            n += len(line) - 1
    return n


def _load_source_tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    if (folder / "tokenizer.json").is_file() or (folder / "vocab.json").is_file():
        return AutoTokenizer.from_pretrained(folder)
    if (folder / "sentencepiece.bpe.model").is_file():
        return XLMRobertaTokenizer.from_pretrained(folder)
    raise MissingResourceError(f"{folder}: no tokenizer files (tokenizer.json, vocab.json or sentencepiece.bpe.model)")


def _pick_pbc_file(candidates: list[Path], code: str, english: dict[str, str]) -> Path:
    """The PBC edition of ``code``: files of its ISO 639-3 code whose script is the code's script, most verses
    shared with the English edition first (ties by name). The spec's inputs.bible.files map fixes the choice."""
    script = code[4:]
    ok = []
    for p in candidates:
        verses = ld.read_pbc_file(p)
        sample = " ".join(list(verses.values())[:20])
        if sample and lc.detect_script(sample) == script:
            ok.append((len(set(verses) & set(english)), p))
    if not ok:
        raise MissingResourceError(f"Bible: no {code[:3]}-x-bible-*.txt file in {script} script; name the file in "
                                   f"inputs.bible.files")
    ok.sort(key=lambda t: (-t[0], t[1].name))
    return ok[0][1]
