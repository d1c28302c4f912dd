"""The model shapes ``bench_cpt.py`` times, built from their configurations with random weights (a step's speed does
not depend on the values): the papers' ``xlm-roberta-base`` shape with the Glot500-m vocabulary (``base``), a tiny
encoder (``tiny``), the bible world's two decoder sources at its target vocabulary (``smollm2``, ``gemma3``) and a
tiny Llama (``tiny-causal``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# The decoder sources' architectures (the bible world's smollm2 and gemma3, harness/worlds/bible/decoders.py), with
# the world's target vocabulary as the decoder job gives them; used where that world is not built here.
TARGET_VOCAB = 122_776
DECODER_CONFIGS: dict[str, dict[str, Any]] = {
    "smollm2": {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                "num_attention_heads": 9, "num_key_value_heads": 3, "max_position_embeddings": 8192,
                "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": True,
                "rope_parameters": {"rope_theta": 100_000.0, "rope_type": "default"}},
    "gemma3": {"model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048, "num_hidden_layers": 18,
               "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256, "max_position_embeddings": 32768,
               "sliding_window": 512, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-6,
               "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True},
    "tiny-causal": {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                    "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 512,
                    "tie_word_embeddings": True},
}
SHAPES = ("base", "tiny", *DECODER_CONFIGS)


def decoder_config(shape: str, world_source: Path | None = None) -> Any:
    """The config of a decoder shape at the target vocabulary: the bible world's converted source's own config
    where ``world_source`` names its folder, else :data:`DECODER_CONFIGS`."""
    from transformers import CONFIG_MAPPING, AutoConfig

    if world_source is not None:
        cfg = AutoConfig.from_pretrained(world_source)
    else:
        values = dict(DECODER_CONFIGS[shape])
        cfg = CONFIG_MAPPING[values.pop("model_type")](**values)
    cfg.vocab_size = TARGET_VOCAB if shape != "tiny-causal" else 30_000
    cfg.tie_word_embeddings = True
    return cfg


def _world_decoder(shape: str) -> Path | None:
    """The folder of the bible world's decoder source ``shape`` where that world is built here, else None."""
    if shape not in ("smollm2", "gemma3"):
        return None
    try:
        from harness.worlds import get_world

        folder = Path(get_world("bible", build=False).source_dir(shape))
        return folder if (folder / "config.json").is_file() else None
    except Exception:  # noqa: BLE001 - not built here: the declared configs
        return None


def model_folder(shape: str, out: Path) -> Path:
    from transformers import AutoModelForCausalLM, XLMRobertaConfig, XLMRobertaForMaskedLM

    if shape in DECODER_CONFIGS:
        source = _world_decoder(shape)
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(decoder_config(shape, source)).save_pretrained(out)
        (out / "config_from.txt").write_text(f"the bible world's {shape} ({source})" if source
                                             else f"DECODER_CONFIGS[{shape!r}] (benchmarks/cpt_shapes.py)")
        return out
    if shape == "base":  # the papers' model: XLM-R base with the Glot500-m vocabulary
        cfg = XLMRobertaConfig(vocab_size=401_145, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                               intermediate_size=3072, max_position_embeddings=514)
    else:
        cfg = XLMRobertaConfig(vocab_size=30_000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                               intermediate_size=256, max_position_embeddings=514)
    torch.manual_seed(0)
    XLMRobertaForMaskedLM(cfg).save_pretrained(out)
    return out
