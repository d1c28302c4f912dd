"""The `glot500` world's models: the Glot500-m target tokenizer and the files of a source model folder."""


from pathlib import Path
from typing import Any

from harness.core.errors import MissingResourceError
from harness.worlds.glot500.tables import SchemaError


# -- tokenizer and models ------------------------------------------------------------------------------------------
def load_target_tokenizer(folder: Path) -> Any:
    """The Glot500-m tokenizer from its Hub files: ``tokenizer.json`` when present, else ``sentencepiece.bpe.model``
    through transformers' own XLM-R conversion (fairseq offset: ``<s> <pad> </s> <unk>``, pieces, ``<mask>``)."""
    from transformers import AutoTokenizer, XLMRobertaTokenizer

    if (folder / "tokenizer.json").is_file():
        tok = AutoTokenizer.from_pretrained(folder)
    elif (folder / "sentencepiece.bpe.model").is_file():
        tok = XLMRobertaTokenizer.from_pretrained(folder)
    else:
        raise MissingResourceError(f"{folder} has neither tokenizer.json nor sentencepiece.bpe.model")
    check_xlmr_layout(tok, str(folder))
    return tok


def check_xlmr_layout(tok: Any, where: str) -> None:
    if tok.convert_tokens_to_ids("<unk>") != 3 or tok.mask_token_id != len(tok) - 1 or tok.pad_token_id != 1:
        raise SchemaError(f"{where}: tokenizer is not in the XLM-R layout (<s>=0 <pad>=1 </s>=2 <unk>=3, <mask> "
                          f"last); got unk={tok.unk_token_id} pad={tok.pad_token_id} mask={tok.mask_token_id} "
                          f"of {len(tok)}")


def source_model_files(folder: Path) -> list[Path]:
    """The files of a source model folder that the world copies: config, safetensors weights, tokenizer files.

    Pickled weights (``pytorch_model.bin``) are refused: the harness loads safetensors only."""
    if not (folder / "config.json").is_file():
        raise MissingResourceError(f"{folder}: config.json missing")
    weights = sorted(folder.glob("*.safetensors"))
    if not weights:
        extra = " (it has pytorch_model.bin: pickled weights are not loaded; fetch model.safetensors)" \
            if (folder / "pytorch_model.bin").exists() else ""
        raise MissingResourceError(f"{folder}: no model.safetensors{extra}")
    names = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
             "sentencepiece.bpe.model", "vocab.json", "merges.txt", "model.safetensors.index.json")
    files = [folder / n for n in names if (folder / n).is_file()] + weights
    return files
