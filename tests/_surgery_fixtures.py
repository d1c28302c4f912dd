"""Tiny tokenizers, models and a stand-in world for the overlap / surgery / method tests (built in milliseconds)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from harness.core.errors import ConfigError, MissingResourceError
from harness.core.tokenization import extend_pieces, make_xlmr_tokenizer, xlmr_vocab

# a source SentencePiece vocabulary in the XLM-R layout; scores decide the segmentation
SOURCE_PIECES = [
    ("▁the", -2.0), ("▁The", -3.0), ("▁cat", -3.0), ("▁Haus", -4.0), ("▁sat", -4.0), ("s", -3.5), ("▁", -2.5),
    (",", -3.0), ("▁,", -5.0), ("1", -4.0), ("2", -4.0), ("▁123", -6.0), ("!", -4.0), ("▁APPLE", -6.0),
    ("▁apple", -6.0), ("a", -5.0), ("t", -5.0), ("h", -5.0), ("e", -5.0), ("c", -5.0), ("▁mat", -5.0),
]
# pieces a target tokenizer learns on new languages: some new, some case variants of source pieces
NEW_PIECES = [
    ("▁haus", -4.0), ("▁Cat", -4.5), ("▁nyumba", -5.0), ("▁paka", -5.0), ("?", -5.0), ("▁12", -5.0),
    ("▁Apple", -6.0), ("ñ", -6.0), ("▁,", -5.0), ("▁!", -6.0), ("…", -6.0), ("▁ya", -5.0),
]


def xlmr_source_tokenizer():
    return make_xlmr_tokenizer(xlmr_vocab(SOURCE_PIECES))


def xlmr_target_tokenizer():
    """Glot500-style extension of the source: every source piece keeps its id, new pieces are appended."""
    return make_xlmr_tokenizer(xlmr_vocab(extend_pieces(SOURCE_PIECES, NEW_PIECES)))


def xlmr_replacement_tokenizer():
    """A replacement vocabulary: new pieces first, then a few source pieces at other ids."""
    pieces = NEW_PIECES + [("▁the", -2.0), ("▁cat", -3.0), ("s", -3.5), ("▁", -2.5), (",", -3.0), ("a", -5.0)]
    return make_xlmr_tokenizer(xlmr_vocab(pieces))


def wordpiece_tokenizer(lowercase: bool = True):
    """A tiny uncased BERT WordPiece tokenizer from a fixed vocabulary."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import BertTokenizerFast

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "haus", "sat", "##s", ",", "1", "2",
             "123", "!", "?", "apple", "a", "##t", "##e", "cafe", "…", "mat", "##a"]
    wp = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    wp.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.decoder = decoders.WordPiece()
    wp.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2),
                                                                                                  ("[SEP]", 3)])
    return BertTokenizerFast(tokenizer_object=wp, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                             sep_token="[SEP]", mask_token="[MASK]")


def bytelevel_tokenizer():
    """A tiny byte-level BPE tokenizer (RoBERTa layout) with a fixed vocabulary and merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = [("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e"), ("Ġ", "c"), ("Ġc", "a"), ("Ġca", "t"), ("Ġ", "H"),
              ("ĠH", "a"), ("ĠHa", "u"), ("ĠHau", "s"), ("Ã", "©"), ("Ġ", "1"), ("Ġ1", "2"), ("Ã", "±")]
    vocab_list = specials + alphabet + ["".join(m) for m in merges] + ["<mask>"]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab_list))}
    bp = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bp.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bp.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=bp, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")


def tiny_xlmr(vocab_size: int, *, tie: bool = True, seed: int = 0, hidden: int = 16):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=40, pad_token_id=1, bos_token_id=0,
                           eos_token_id=2, tie_word_embeddings=tie)
    model = XLMRobertaForMaskedLM(cfg)
    with torch.no_grad():  # a nonzero, token-specific bias so that the remap is observable
        model.get_output_embeddings().bias.copy_(torch.randn(vocab_size))
    return model.eval()


def tiny_bert(vocab_size: int, *, tie: bool = True, seed: int = 0, hidden: int = 16):
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=40, pad_token_id=0, tie_word_embeddings=tie)
    model = BertForMaskedLM(cfg)
    with torch.no_grad():
        model.get_output_embeddings().bias.copy_(torch.randn(vocab_size))
        if not tie:
            model.get_output_embeddings().weight.copy_(torch.randn(vocab_size, hidden))
    return model.eval()


@dataclass
class TinyWorld:
    """Stand-in for :class:`harness.worlds.base.World` with the attributes initialize_model uses."""

    root: Path
    sources: list[str]
    resources: set[str] = field(default_factory=set)
    name: str = "tiny"
    hash: str = "tinyworldhash000"

    def source_dir(self, source: str) -> Path:
        if source not in self.sources:
            raise ConfigError(f"world {self.name!r} has no source model {source!r}")
        return self.root / "sources" / source

    @property
    def target_tokenizer_dir(self) -> Path:
        return self.root / "target_tokenizer"

    def has_resource(self, kind: str) -> bool:
        return kind in self.resources

    def resource_files(self, kind: str) -> list[Path]:
        return sorted((self.root / "resources").glob(f"{kind}*")) if kind in self.resources else []

    def require(self, kind: str, who: str) -> None:
        if not self.has_resource(kind):
            raise MissingResourceError(f"{who} needs the resource {kind!r}, which world {self.name!r} lacks")


def make_world(root: Path, *, bert_tie: bool = True) -> TinyWorld:
    """Sources ``xlmr`` (XLM-R layout SentencePiece, tied) and ``bert`` (uncased WordPiece); XLM-R target."""
    st = xlmr_source_tokenizer()
    m = tiny_xlmr(len(st))
    d = root / "sources" / "xlmr"
    m.save_pretrained(d)
    st.save_pretrained(d)
    bt = wordpiece_tokenizer()
    b = tiny_bert(len(bt), tie=bert_tie, seed=1)
    d = root / "sources" / "bert"
    b.save_pretrained(d)
    bt.save_pretrained(d)
    xlmr_target_tokenizer().save_pretrained(root / "target_tokenizer")
    return TinyWorld(root=root, sources=["xlmr", "bert"])
