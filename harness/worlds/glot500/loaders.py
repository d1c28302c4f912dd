"""Loaders for the real inputs of the `glot500` world, written against the sources' own schemas.

Every reader takes a local folder laid out like the source (a Hugging Face Hub snapshot from the local cache, a
``hf download --local-dir`` copy, or a user folder) and returns plain records; nothing here downloads anything.

* :func:`resolve_repo` finds a Hub repository locally: the user's ``path`` first, else the snapshot of the pinned
  revision in the Hub cache (``$HF_HUB_CACHE``, ``$HF_HOME/hub`` or ``~/.cache/huggingface/hub``).
* Tables (parquet, arrow, json lines) are read with ``datasets``, which restores the features written in the files
  (``ClassLabel`` names included); the readers check the columns and label names they rely on.
* WikiANN (:func:`read_wikiann`), Universal Dependencies from the Hub parquet conversion (:func:`read_ud_hub`) or
  from a CoNLL-U release (:func:`read_ud_conllu`, Glot500's fused-form conversion), Tatoeba (:func:`read_tatoeba`),
  the Parallel Bible Corpus (:func:`read_pbc_file`) or Glot500's aligned Bible files
  (:func:`read_glot500_bible_pair`), Glot500-c (:func:`iter_glot500c`, first-N sentences as HyperOFA did),
  ColexNet+ (:func:`read_keyed_vectors`, a restricted unpickler: no gensim and no foreign code), the Glot500-m
  tokenizer (:func:`load_target_tokenizer`) and the source models (:func:`source_model_files`).

The readers live in one module per kind of input (``hub``, ``tables``, ``tagging_data``, ``text_data``,
``colexnet``, ``models``); this module gathers their names, so that ``loaders.read_wikiann`` and the like stay the
way the builder and the tests reach them.
"""

from __future__ import annotations

from harness.worlds.glot500.colexnet import (
    KeyedVectorsFile,
    RestrictedUnpickler,
    read_keyed_vectors,
    write_word2vec_text,
)
from harness.worlds.glot500.hub import (
    HubRef,
    cached_snapshot,
    file_sha256,
    folder_size,
    hf_download_command,
    hub_cache_dir,
    human_size,
    link_or_copy,
    repo_cache_folder,
    resolve_repo,
    snapshot_commit,
)
from harness.worlds.glot500.models import check_xlmr_layout, load_target_tokenizer, source_model_files
from harness.worlds.glot500.tables import (
    SPLIT_NAMES,
    SPLITS,
    TABLE_EXTS,
    SchemaError,
    class_label_names,
    has_split,
    read_table,
    split_files,
)
from harness.worlds.glot500.tagging_data import (
    NER_LABELS,
    POS_PRECEDENCE,
    UD_HF_UPOS,
    UPOS,
    Tagged,
    clean_ud_sentence,
    conllu_files,
    extract_tgz,
    fused_words,
    parse_conllu,
    read_ud_conllu,
    read_ud_hub,
    read_wikiann,
    ud_configs,
    ud_conllu_prefixes,
)
from harness.worlds.glot500.text_data import (
    glot500c_rows,
    iter_glot500c,
    pbc_files,
    read_glot500_bible_pair,
    read_pbc_file,
    read_tatoeba,
)

__all__ = ["HubRef", "KeyedVectorsFile", "NER_LABELS", "POS_PRECEDENCE", "RestrictedUnpickler", "SPLITS",
           "SPLIT_NAMES", "SchemaError", "TABLE_EXTS", "Tagged", "UD_HF_UPOS", "UPOS", "cached_snapshot",
           "check_xlmr_layout", "class_label_names", "clean_ud_sentence", "conllu_files", "extract_tgz",
           "file_sha256", "folder_size", "fused_words", "glot500c_rows", "has_split", "hf_download_command",
           "hub_cache_dir", "human_size", "iter_glot500c", "link_or_copy", "load_target_tokenizer",
           "parse_conllu", "pbc_files", "read_glot500_bible_pair", "read_keyed_vectors", "read_pbc_file",
           "read_table", "read_tatoeba", "read_ud_conllu", "read_ud_hub", "read_wikiann",
           "repo_cache_folder", "resolve_repo", "snapshot_commit", "source_model_files", "split_files",
           "ud_configs", "ud_conllu_prefixes", "write_word2vec_text"]
