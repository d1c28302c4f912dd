"""Cold build and warm load of the default world ``bible``; prints a table.

    python benchmarks/bench_world_build.py                  # cold: a fresh harness home (downloads included)
    python benchmarks/bench_world_build.py --home DIR       # reuse DIR (warm if the world is built there)
    python benchmarks/bench_world_build.py --warm-only --home DIR

Targets: cold build <= 15 min on a 2-core machine, warm load <= 10 s. The warm load is measured in a fresh
process: ``get_world("bible")`` plus loading the default source model, its tokenizer and the target tokenizer.
It also prints the languages per task and the silver NER quality (projected labels against spaCy's own tagging
where the language has a pipeline).
Run it alone: other CPU-bound processes on the machine slow every stage.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WARM = """
import time, json
t0 = time.time()
from harness.worlds import get_world
w = get_world("bible", build=False)
t1 = time.time()
from transformers import AutoModelForMaskedLM, AutoTokenizer
AutoModelForMaskedLM.from_pretrained(w.source_dir(w.default_source))
AutoTokenizer.from_pretrained(w.source_dir(w.default_source))
AutoTokenizer.from_pretrained(w.target_tokenizer_dir)
t2 = time.time()
silver = {lang: m["agreement_with_spacy_fr"] for lang, m in w.task_meta("ner")["languages"].items()
          if "agreement_with_spacy_fr" in m}
print(json.dumps({"get_world": t1 - t0, "with_models": t2 - t0,
                  "languages": {t: len(w.task_languages(t)) for t in ("sr-b", "sr-t", "ner", "pos", "mlm")},
                  "silver_ner": silver}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--home", type=Path, default=None, help="harness home (default: a fresh temporary folder)")
    ap.add_argument("--warm-only", action="store_true", help="only measure the warm load")
    args = ap.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="bench-bible-"))
    env = {**os.environ, "HARNESS_HOME": str(home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    rows: list[tuple[str, str]] = []
    if not args.warm_only:
        t0 = time.time()
        res = subprocess.run([sys.executable, "-c", "from harness.worlds import build_world; build_world('bible')"],
                             env=env)
        cold = time.time() - t0
        if res.returncode != 0:
            print("build failed", file=sys.stderr)
            return 1
        rows.append(("cold build (downloads included)", f"{cold:8.1f} s  (target <= 900 s)"))
        info = json.loads(next((home / "worlds").glob("bible-v*/build_info.json")).read_text())
        for stage, sec in info["seconds"].items():
            rows.append((f"  stage {stage}", f"{sec:8.1f} s"))
        for src, st in info.get("heads", {}).items():
            rows.append((f"  MLM head {src}: held-out loss", f"{st['heldout_loss_before']:.3f} -> "
                                                              f"{st['heldout_loss_after']:.3f} (uniform "
                                                              f"{st['uniform_loss']:.2f}), {st['seconds']:.0f} s"))
    out = subprocess.run([sys.executable, "-c", WARM], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr[-2000:], file=sys.stderr)
        return 1
    warm = json.loads(out.stdout.strip().splitlines()[-1])
    rows.append(("warm load: get_world", f"{warm['get_world']:8.2f} s"))
    rows.append(("warm load + default source + tokenizers", f"{warm['with_models']:8.2f} s  (target <= 10 s)"))
    rows.append(("languages per task", ", ".join(f"{k} {v}" for k, v in warm["languages"].items())))
    for lang, a in warm["silver_ner"].items():  # projected silver NER against spaCy's own tagging of the language
        rows.append((f"silver NER {lang} vs spaCy", f"P {a['precision']:.3f} R {a['recall']:.3f} F1 {a['f1']:.3f} "
                                                    f"({a['verses']} verses, exact spans)"))
    width = max(len(a) for a, _ in rows)
    print(f"\nbible world benchmark  (HARNESS_HOME={home}, {os.cpu_count()} CPUs, load avg "
          f"{os.getloadavg()[0]:.1f})")
    print("-" * (width + 40))
    for a, b in rows:
        print(f"{a:<{width}}  {b}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
