"""Tiny decoder-only models (Llama, Qwen2, Gemma 3, GPT-2, Phi), built locally from random configs, and byte-level
BPE tokenizers for them: a source with padding rows beyond its tokenizer and chat tokens, and a target that
extends it (new merges) and puts its special tokens at other ids."""

from __future__ import annotations

from pathlib import Path

import torch

from tests._surgery_fixtures import TinyWorld

ARCHS = ("llama", "qwen2", "gemma3", "gpt2")
PADDING_ROWS = 5  # rows of the source tables beyond its tokenizer (as Qwen 2.5 stores 151,936 rows for 151,665)
HIDDEN = 16
CHAT = ["<|im_start|>", "<|im_end|>"]
_MERGES = [("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e"), ("Ġ", "c"), ("Ġc", "a"), ("Ġca", "t"), ("Ġ", "s"), ("Ġs", "a")]
_NEW_MERGES = [("Ġsa", "t"), ("Ġ", "H"), ("ĠH", "a"), ("ĠHa", "u"), ("ĠHau", "s"), ("Ġ", "m"), ("Ġm", "a"),
               ("Ġma", "t"), ("Ã", "±")]


def bpe_tokenizer(merges: list[tuple[str, str]], *, specials_last: bool = False):
    """A GPT-2-style byte-level BPE tokenizer: ``<|endoftext|>`` (bos, eos and unk), ``<pad>`` and two chat
    tokens; ``specials_last`` puts the special tokens after the ordinary ones (other ids than the source's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<pad>"]
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    ordinary = list(dict.fromkeys(alphabet + ["".join(m) for m in merges]))
    order = (ordinary + specials) if specials_last else (specials + ordinary)
    vocab = {t: i for i, t in enumerate(order)}
    bp = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    bp.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bp.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=bp, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                  unk_token="<|endoftext|>", pad_token="<pad>")
    tok.add_special_tokens({"additional_special_tokens": CHAT})
    return tok


def source_tokenizer():
    return bpe_tokenizer(_MERGES)


def target_tokenizer():
    return bpe_tokenizer(_MERGES + _NEW_MERGES, specials_last=True)


def tiny_decoder(arch: str, rows: int, *, tie: bool, seed: int = 0, bias: bool = False):
    """A random tiny causal LM of ``arch`` with ``rows`` embedding rows (tied or untied)."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PhiConfig,
        PhiForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    kw = dict(vocab_size=rows, hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, intermediate_size=32, max_position_embeddings=64, tie_word_embeddings=tie,
              bos_token_id=0, eos_token_id=0, pad_token_id=1)
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**kw))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**kw))
    elif arch == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**kw, head_dim=8))
    elif arch == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=rows, n_embd=HIDDEN, n_layer=2, n_head=2, n_positions=64,
                                           tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0))
    elif arch == "phi":  # a decoder whose head has an output bias
        model = PhiForCausalLM(PhiConfig(**kw))
    else:
        raise ValueError(arch)
    with torch.no_grad():  # distinct tables and a visible bias
        model.get_input_embeddings().weight.normal_()
        if not tie:
            model.get_output_embeddings().weight.normal_()
        out_bias = getattr(model.get_output_embeddings(), "bias", None)
        if out_bias is not None:
            out_bias.normal_()
    assert (getattr(model.get_output_embeddings(), "bias", None) is not None) == bias
    return model.eval()


def source_name(arch: str, tie: bool) -> str:
    return f"{arch}-{'tied' if tie else 'untied'}"


def make_decoder_world(root: Path, archs: tuple[str, ...] = ARCHS) -> TinyWorld:
    """Sources ``<arch>-tied`` and ``<arch>-untied`` for each of ``archs`` (each with PADDING_ROWS padding rows),
    ``phi-untied`` (an output bias), and the extending target tokenizer."""
    st = source_tokenizer()
    names = []
    for arch in (*archs, "phi"):
        for tie in (True, False):
            if arch == "phi" and tie:
                continue
            name = source_name(arch, tie)
            d = root / "sources" / name
            tiny_decoder(arch, len(st) + PADDING_ROWS, tie=tie, seed=len(names), bias=arch == "phi").save_pretrained(d)
            st.save_pretrained(d)
            names.append(name)
    target_tokenizer().save_pretrained(root / "target_tokenizer")
    return TinyWorld(root=root, sources=names)
