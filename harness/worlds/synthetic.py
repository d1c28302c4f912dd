"""The `synthetic` world: a complete, tiny world built in seconds, for tests and quick trials.

It has everything a real world has, in the same layouts, generated from one seed:

* a concept lexicon (nouns, verbs, adjectives, function words, person/location/organisation names) realized as
  words in five made-up languages with ISO 639-3 private-use codes: the pivot ``qaa_Latn`` (the source language,
  playing English's role) and ``qab_Latn``, ``qac_Latn``, ``qad_Cyrl``, ``qae_Grek`` (two more Latin-script
  languages, one Cyrillic, one Greek script; some words are shared loans, names are shared or transliterated);
* parallel sentences from a small grammar (word order differs by language), so that retrieval has aligned pairs
  and every token carries a gold UPOS tag and an IOB2 entity tag;
* a tiny source MLM (real ``XLMRobertaForMaskedLM``, briefly pre-trained on pivot text) with a real SentencePiece
  Unigram tokenizer, and a target tokenizer that extends its vocabulary Glot500-style with pieces learned on all
  five languages;
* a tiny decoder source ``dec`` (a real ``LlamaForCausalLM``, tied embeddings, briefly pre-trained with the
  next-token loss on the same pivot text, same tokenizer), built after everything else from its own seed, so every
  other file of the world is what it was; its manifest entry carries its own identity (``own_identity``), so the
  world's hash, and every encoder cell's key, are those of the world without it;
* word vectors keyed ``iso3:word`` (word2vec text format, ColexNet+ keys): each word's vector is its concept's
  vector plus noise, so translations are near each other as in aligned multilingual vectors;
* bilingual dictionaries pivot→X (TSV), monolingual and CPT text, and the data of every task.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import ConfigError
from harness.worlds import WORLDS
from harness.worlds.base import CheckRow
from harness.worlds.writer import WorldWriter, write_jsonl

PIVOT = "qaa_Latn"
SOURCE = "src"  # the encoder source model (the default)
DECODER = "dec"  # the decoder source model
HIDDEN_SIZE = 64  # their hidden size
DECODER_ENTRY = {"description": "2-layer Llama causal LM pre-trained on the pivot language", "objective": "clm",
                 "architecture": "LlamaForCausalLM", "tied": True, "licence": "Apache-2.0", "own_identity": True}
TASK_NAMES = ("mlm", "sr-b", "sr-t", "ner", "pos")  # every task has data in every language

# Per language: syllable inventory, script transliteration, word order, share of words loaned from the pivot.
_LANGS = {
    "qaa_Latn": dict(onsets="ptkmnslrbdg", vowels="aeiou", codas="nsl", order="SVO", loan=0.0),
    "qab_Latn": dict(onsets="ptkmnslrvz", vowels="aeiouy", codas="nrk", order="SVO", loan=0.25),
    "qac_Latn": dict(onsets="hkmnpwlt", vowels="aiu", codas="", order="SOV", loan=0.1),
    "qad_Cyrl": dict(onsets="bdgzvkmnrlt", vowels="aeiou", codas="nkst", order="SVO", loan=0.15, translit="cyrl"),
    "qae_Grek": dict(onsets="ptkmnlrsd", vowels="aeio", codas="ns", order="SOV", loan=0.1, translit="grek"),
}
_CYRL = dict(zip("abvgdezijklmnoprstufhcwy", "абвгдезийклмнопрстуфхцшы", strict=True))
_GREK = dict(zip("abgdezhiklmnoprstufxy", "αβγδεζηικλμνοπρστυφχψ", strict=True))
_TRANSLIT = {"cyrl": _CYRL, "grek": _GREK}
_SIZES = dict(NOUN=120, VERB=40, ADJ=30, DET=3, ADP=5, PER=16, LOC=14, ORG=8)


@dataclass
class _Lexicon:
    words: dict[str, dict[str, list[str]]]  # lang -> concept -> word tokens (names may have two tokens)
    category: dict[str, str]  # concept -> NOUN/VERB/ADJ/DET/ADP/PER/LOC/ORG


def _word(rng: random.Random, spec: dict, syllables: int) -> str:
    out = []
    for _ in range(syllables):
        out.append(rng.choice(spec["onsets"]) + rng.choice(spec["vowels"]))
    if spec["codas"] and rng.random() < 0.4:
        out.append(rng.choice(spec["codas"]))
    return "".join(out)


def _translit(word: str, lang: str) -> str:
    table = _TRANSLIT.get(_LANGS[lang].get("translit", ""), None)
    return "".join(table.get(ch, ch) for ch in word) if table else word


def _lexicon(seed: int) -> _Lexicon:
    rng = random.Random(seed)
    category: dict[str, str] = {}
    for cat, n in _SIZES.items():
        for i in range(n):
            category[f"{cat.lower()}{i}"] = cat
    words: dict[str, dict[str, list[str]]] = {lang: {} for lang in _LANGS}
    used: dict[str, set[str]] = {lang: set() for lang in _LANGS}
    for concept, cat in category.items():
        n_syl = 1 if cat in {"DET", "ADP"} else rng.choice([2, 2, 3])
        pivot_word = None
        for lang, spec in _LANGS.items():
            if cat in {"PER", "LOC", "ORG"}:
                # names are shared across languages (transliterated for other scripts), as real names mostly are
                if pivot_word is None:
                    toks = [_word(rng, _LANGS[PIVOT], 2).capitalize()]
                    if cat == "ORG" or rng.random() < 0.3:
                        toks.append(_word(rng, _LANGS[PIVOT], 2).capitalize())
                    pivot_word = toks
                words[lang][concept] = [_translit(t.lower(), lang).capitalize() for t in pivot_word]
                continue
            if lang != PIVOT and rng.random() < spec["loan"]:
                w = _translit(words[PIVOT][concept][0], lang)
            else:
                for _ in range(100):
                    w = _translit(_word(rng, spec, n_syl), lang)
                    if w not in used[lang]:
                        break
            used[lang].add(w)
            words[lang][concept] = [w]
            if lang == PIVOT:
                pivot_word = None
    return _Lexicon(words=words, category=category)


def _concepts(lex: _Lexicon, cat: str) -> list[str]:
    return [c for c, k in lex.category.items() if k == cat]


def _sentence_plan(rng: random.Random, lex: _Lexicon) -> list[list[str]]:
    """A sentence as constituents (subject, verb, object/PP), each a list of concepts."""
    def np_(allow_name: bool = True) -> list[str]:
        if allow_name and rng.random() < 0.3:
            return [rng.choice(_concepts(lex, rng.choice(["PER", "PER", "ORG"])))]
        out = [rng.choice(_concepts(lex, "DET"))]
        if rng.random() < 0.5:
            out.append(rng.choice(_concepts(lex, "ADJ")))
        out.append(rng.choice(_concepts(lex, "NOUN")))
        return out

    subj, verb, obj = np_(), [rng.choice(_concepts(lex, "VERB"))], np_()
    parts = [subj, verb, obj]
    if rng.random() < 0.5:
        parts.append([rng.choice(_concepts(lex, "ADP")), rng.choice(_concepts(lex, "LOC"))])
    return parts


_POS = {"NOUN": "NOUN", "VERB": "VERB", "ADJ": "ADJ", "DET": "DET", "ADP": "ADP", "PER": "PROPN",
        "LOC": "PROPN", "ORG": "PROPN"}


def _realize(plan: list[list[str]], lang: str, lex: _Lexicon) -> tuple[list[str], list[str], list[str]]:
    subj, verb, obj, *rest = plan
    order = [subj, verb, obj] if _LANGS[lang]["order"] == "SVO" else [subj, obj, verb]
    tokens, pos, ner = [], [], []
    for constituent in order + rest:
        for concept in constituent:
            cat = lex.category[concept]
            for i, tok in enumerate(lex.words[lang][concept]):
                tokens.append(tok)
                pos.append(_POS[cat])
                ner.append(("B-" if i == 0 else "I-") + cat if cat in {"PER", "LOC", "ORG"} else "O")
    tokens.append(".")
    pos.append("PUNCT")
    ner.append("O")
    return tokens, pos, ner


def _decoder_entry(folder: Path) -> dict[str, Any]:
    """The decoder source's manifest entry, for its model saved at ``folder``."""
    return {**DECODER_ENTRY, "languages": [PIVOT], "sha256": _sha256(folder / "model.safetensors")}


class SyntheticWorld:
    name = "synthetic"
    description = "tiny generated world (5 made-up languages, 2-layer XLM-R source): tests and quick trials"
    version = "1"
    # its numbers mean nothing (it exists to show the whole loop in minutes): one seed unless --seeds says more
    default_seeds = (1,)

    def __init__(self, seed: int = 7, n_train: int = 1500, n_heldout: int = 120, pretrain_steps: int = 120):
        self.seed = seed
        self.n_train = n_train
        self.n_heldout = n_heldout
        self.pretrain_steps = pretrain_steps

    def check(self) -> list[CheckRow]:
        return [CheckRow("generator", True, "harness.worlds.synthetic (no external input)", "", "nothing to provide")]

    def describe(self):
        """What the build will write, known without building it (the generator's fixed tables): the languages,
        the source model and its hidden size, every task in every language, every resource. A run's inputs are
        checked against it before anything is built, and ``harness plan`` plans from it."""
        from harness.worlds.base import WorldSketch

        langs = list(_LANGS)
        manifest = {"name": self.name, "version": self.version, "pivot_language": PIVOT, "default_source": SOURCE,
                    "sources": {SOURCE: {"description": "2-layer XLM-R MLM pre-trained on the pivot language",
                                         "hidden_size": HIDDEN_SIZE,
                                         # its shape, for a plan's CPU estimate (harness.throughput): the
                                         # target vocabulary at the unigram's bound, 900 (the build keeps ~860)
                                         "num_layers": 2, "intermediate_size": 128, "target_vocab": 900},
                                DECODER: {**DECODER_ENTRY, "hidden_size": HIDDEN_SIZE, "num_layers": 2,
                                          "intermediate_size": 128, "target_vocab": 900}}}
        return WorldSketch(name=self.name, manifest=manifest, languages={lang: {} for lang in langs},
                           tasks={task: langs for task in TASK_NAMES},
                           resources={"word_vectors", "target_text", "cpt_text", "dictionary"})

    def build_source(self, name: str, out: Path, work: Path, *, root: Path) -> dict[str, Any]:
        """Make the decoder source at ``out`` for the world at ``root`` built without it
        (:mod:`harness.worlds.adding`), from what its build made it from there (the encoder's tokenizer, the pivot
        language's text): the model the build makes; its manifest entry."""
        from transformers import AutoTokenizer

        if name != DECODER:
            raise ConfigError(f"world synthetic: source {name!r} cannot be added to a built world; only {DECODER!r} "
                              f"can")
        tok = AutoTokenizer.from_pretrained(root / "sources" / SOURCE)
        lines = (root / "resources" / "text" / f"{PIVOT}.txt").read_text(encoding="utf-8").splitlines()
        self._decoder_model(out, tok, lines)
        return _decoder_entry(out)

    # ------------------------------------------------------------------------------------------------------
    def build(self, out: Path) -> None:
        langs = list(_LANGS)
        lex, train, evals = self._sentences(langs)
        text = {lang: [" ".join(t[0]) for t in train[lang]] for lang in langs}
        self._write_resources(out, lex, text)
        src_dir, src_tok = self._tokenizers(out, text)
        self._source_model(src_dir, src_tok, text[PIVOT])
        self._decoder_model(out / "sources" / DECODER, src_tok, text[PIVOT])
        self._write_tasks(out / "tasks", train, evals)
        self._write_meta(out, text)

    def _sentences(self, langs: list[str]) -> tuple[_Lexicon, dict[str, list], dict[str, list]]:
        """(the lexicon, each language's training sentences, its held-out ones): one plan per sentence, realized
        in every language."""
        from harness.core.progress import stage

        rng = random.Random(self.seed)
        with stage("world synthetic: sentences") as note:
            lex = _lexicon(self.seed)
            # held-out split first: the evaluation sentences are generated from their own stream
            plans_train = [_sentence_plan(rng, lex) for _ in range(self.n_train)]
            plans_eval = [_sentence_plan(rng, lex) for _ in range(self.n_heldout * 3)]
            train = {lang: [_realize(p, lang, lex) for p in plans_train] for lang in langs}
            evals = {lang: [_realize(p, lang, lex) for p in plans_eval] for lang in langs}
            note(f"{len(langs)} languages x {self.n_train} training + {len(plans_eval)} held-out sentences")
        return lex, train, evals

    def _write_resources(self, out: Path, lex: _Lexicon, text: dict[str, list[str]]) -> None:
        """Each language's text and CPT text, the word vectors, the pivot-to-language dictionaries."""
        from harness.core.progress import stage

        langs = list(text)
        with stage("world synthetic: resources (text, CPT text, word vectors, dictionaries)") as note:
            res = out / "resources"
            for lang in langs:
                (res / "text").mkdir(parents=True, exist_ok=True)
                (res / "cpt").mkdir(parents=True, exist_ok=True)
                (res / "text" / f"{lang}.txt").write_text("\n".join(text[lang]) + "\n", encoding="utf-8")
                (res / "cpt" / f"{lang}.txt").write_text("\n".join(text[lang]) + "\n", encoding="utf-8")
            self._word_vectors(res / "word_vectors.vec", lex)
            (res / "dictionaries").mkdir(parents=True, exist_ok=True)
            for lang in langs[1:]:
                rows = []
                for concept, cat in lex.category.items():
                    if cat in {"NOUN", "VERB", "ADJ"} and int(concept[len(cat):]) % 4 != 3:  # 3/4 of content words
                        rows.append(f"{lex.words[PIVOT][concept][0]}\t{lex.words[lang][concept][0]}")
                (res / "dictionaries" / f"{PIVOT}-{lang}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
            note(f"{len(langs) - 1} dictionaries")

    def _tokenizers(self, out: Path, text: dict[str, list[str]]) -> tuple[Path, Any]:
        """The source's tokenizer (the pivot language's pieces) and the target tokenizer (extended with the pieces
        of every language); (the source's folder, its tokenizer)."""
        from harness.core.progress import stage
        from harness.core.tokenization import extend_pieces, save_xlmr_tokenizer, train_unigram, xlmr_vocab

        with stage("world synthetic: tokenizers (SentencePiece Unigram)") as note:
            src_pieces = train_unigram(text[PIVOT], vocab_size=400)
            new_pieces = train_unigram([s for lang in text for s in text[lang]], vocab_size=900)
            src_dir = out / "sources" / SOURCE
            src_tok = save_xlmr_tokenizer(xlmr_vocab(src_pieces), src_dir, model_max_length=128)
            target = save_xlmr_tokenizer(xlmr_vocab(extend_pieces(src_pieces, new_pieces)), out / "target_tokenizer",
                                         model_max_length=128)
            note(f"source {len(src_tok)} pieces, target {len(target)}")
        return src_dir, src_tok

    def _write_tasks(self, tasks: Path, train: dict[str, list], evals: dict[str, list]) -> None:
        """Every task's data: the held-out sentences split between MLM, SR-B, SR-T and the tagging tests; the
        pivot language's training sentences as the tagging tasks' train (80 %) and dev sets."""
        n = self.n_heldout
        for lang in evals:
            (tasks / "mlm").mkdir(parents=True, exist_ok=True)
            (tasks / "mlm" / f"{lang}.txt").write_text(
                "\n".join(" ".join(t[0]) for t in evals[lang][:n]) + "\n", encoding="utf-8")
            write_jsonl(tasks / "sr-b" / f"{lang}.jsonl",
                        [{"id": f"b{i}", "text": " ".join(t[0])} for i, t in enumerate(evals[lang][:n])])
            write_jsonl(tasks / "sr-t" / f"{lang}.jsonl",
                        [{"id": f"t{i}", "text": " ".join(t[0][:-1])}
                         for i, t in enumerate(evals[lang][n:2 * n]) if len(t[0]) <= 7])
            for task, col in (("ner", 2), ("pos", 1)):
                rows = [{"tokens": t[0], "tags": t[col]} for t in evals[lang][2 * n:]]
                write_jsonl(tasks / task / lang / "test.jsonl", rows)
        for task, col in (("ner", 2), ("pos", 1)):
            rows = [{"tokens": t[0], "tags": t[col]} for t in train[PIVOT]]
            write_jsonl(tasks / task / PIVOT / "train.jsonl", rows[: int(len(rows) * 0.8)])
            write_jsonl(tasks / task / PIVOT / "dev.jsonl", rows[int(len(rows) * 0.8):])

    def _write_meta(self, out: Path, text: dict[str, list[str]]) -> None:
        """The tasks' meta, the languages' table and the manifest."""
        langs = list(text)
        descriptions = {
            "mlm": "held-out generated sentences per language",
            "sr-b": "parallel generated sentences (Bible-verse stand-in), pivot queries",
            "sr-t": "short parallel generated sentences (Tatoeba stand-in), pivot queries",
            "ner": "generated sentences with gold PER/LOC/ORG IOB2 tags; train/dev on the pivot language",
            "pos": "generated sentences with gold UPOS tags; train/dev on the pivot language",
        }
        writer = WorldWriter(out)
        for task, desc in descriptions.items():
            writer.task_meta(task, {"description": desc,
                                    "languages": {lang: {"label_source": "gold"} for lang in langs}})

        languages = {
            lang: {"script": lang.split("_")[1], "seen": {"src": lang == PIVOT},
                   "resource_level": "high" if lang == PIVOT else "low",
                   "text_chars": sum(len(s) for s in text[lang]), "synthetic": True}
            for lang in langs
        }
        writer.languages(languages)
        manifest = {
            "name": self.name, "version": self.version, "pivot_language": PIVOT,
            "sources": {"src": {"description": "2-layer XLM-R MLM pre-trained on the pivot language",
                                "languages": [PIVOT]},
                        DECODER: _decoder_entry(out / "sources" / DECODER)},
            "default_source": "src",
            "inputs": [{"name": "generator", "package": "harness", "version": self.version,
                        "params": {"seed": self.seed, "n_train": self.n_train, "n_heldout": self.n_heldout,
                                   "pretrain_steps": self.pretrain_steps}, "licence": "Apache-2.0"}],
            "notes": "generated; labels are gold by construction",
        }
        writer.manifest(manifest)

    # ------------------------------------------------------------------------------------------------------
    def _word_vectors(self, path: Path, lex: _Lexicon, dim: int = 32) -> None:
        rng = np.random.default_rng(self.seed)
        concept_vec = {c: rng.standard_normal(dim) for c in lex.category}
        lines = []
        for lang in _LANGS:
            iso = lang.split("_")[0]
            for concept in lex.category:
                for tok in lex.words[lang][concept]:
                    v = concept_vec[concept] + 0.3 * rng.standard_normal(dim)
                    lines.append(f"{iso}:{tok.lower()} " + " ".join(f"{x:.5f}" for x in v))
        path.write_text(f"{len(lines)} {dim}\n" + "\n".join(lines) + "\n", encoding="utf-8")

    def _decoder_model(self, out: Path, tok, lines: list[str]) -> None:
        """The decoder source: a 2-layer Llama with the encoder's tokenizer, next-token loss on pivot text."""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(vocab_size=len(tok), hidden_size=HIDDEN_SIZE, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, intermediate_size=128, max_position_embeddings=128,
                          pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                          tie_word_embeddings=True)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed + 1)
            model = LlamaForCausalLM(cfg)
            enc = tok(lines, truncation=True, max_length=32)["input_ids"]
            opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
            gen = random.Random(self.seed + 1)
            model.train()
            from harness.core.progress import track

            with track("world synthetic: decoder source next-token pre-training (steps)", self.pretrain_steps,
                       transient=False) as advance:
                for _step in range(self.pretrain_steps):
                    rows = [enc[gen.randrange(len(enc))] for _ in range(32)]
                    width = max(len(r) for r in rows)
                    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
                    mask = torch.zeros_like(ids)
                    for i, r in enumerate(rows):
                        ids[i, : len(r)] = torch.tensor(r)
                        mask[i, : len(r)] = 1
                    loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    advance(1)
            if not math.isfinite(loss.item()):
                raise RuntimeError("synthetic decoder pre-training diverged")
        model.eval()
        model.save_pretrained(out)
        tok.save_pretrained(out)

    def _source_model(self, out: Path, tok, lines: list[str]) -> None:
        import torch
        from transformers import DataCollatorForLanguageModeling, XLMRobertaConfig, XLMRobertaForMaskedLM

        cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=HIDDEN_SIZE, num_hidden_layers=2, num_attention_heads=4,
                               intermediate_size=128, max_position_embeddings=130, pad_token_id=tok.pad_token_id,
                               bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                               type_vocab_size=1, tie_word_embeddings=True)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            model = XLMRobertaForMaskedLM(cfg)
            enc = tok(lines, truncation=True, max_length=32)["input_ids"]
            collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
            opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
            gen = random.Random(self.seed)
            model.train()
            from harness.core.progress import track

            with track("world synthetic: source model MLM pre-training (steps)", self.pretrain_steps,
                       transient=False) as advance:
                for _step in range(self.pretrain_steps):
                    batch = collator([{"input_ids": enc[gen.randrange(len(enc))]} for _ in range(32)])
                    loss = model(**batch).loss
                    loss.backward()
                    opt.step()
                    opt.zero_grad()
                    advance(1)
            if not math.isfinite(loss.item()):
                raise RuntimeError("synthetic source pre-training diverged")
        model.eval()
        model.save_pretrained(out)


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


WORLDS.register("synthetic", SyntheticWorld())
