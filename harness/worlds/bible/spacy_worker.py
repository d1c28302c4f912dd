"""Tag sentences with a spaCy pipeline (run inside the world-build environment, never imported by the harness).

Usage: ``python spacy_worker.py MODEL IN.jsonl OUT.jsonl`` where IN holds ``{"id", "text"}`` rows; OUT gets
``{"id", "tokens", "pos", "offsets", "ents"}`` rows (``offsets``: character spans of the tokens), ``ents`` as ``[start_token, end_token_exclusive, label]``.
This file imports nothing from the harness so that it runs in the separate environment that has spaCy.
"""

from __future__ import annotations

import json
import sys


def doc_record(doc, rid: str) -> dict:
    tokens = [t.text for t in doc if not t.is_space]
    index = {}
    k = 0
    for t in doc:
        if not t.is_space:
            index[t.i] = k
            k += 1
    pos = [t.pos_ or "X" for t in doc if not t.is_space]
    offsets = [[t.idx, t.idx + len(t.text)] for t in doc if not t.is_space]
    ents = []
    for e in doc.ents:
        toks = [index[i] for i in range(e.start, e.end) if i in index]
        if toks:
            ents.append([toks[0], toks[-1] + 1, e.label_])
    return {"id": rid, "tokens": tokens, "pos": pos, "offsets": offsets, "ents": ents}


def main(argv: list[str]) -> int:
    import spacy

    model, inp, out = argv
    nlp = spacy.load(model)
    with open(inp, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for row, doc in zip(rows, nlp.pipe((r["text"] for r in rows), batch_size=64), strict=True):
            f.write(json.dumps(doc_record(doc, row["id"]), ensure_ascii=False) + "\n")
    print(json.dumps({"spacy": spacy.__version__, "model": model, "meta_version": nlp.meta.get("version"),
                      "rows": len(rows)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
