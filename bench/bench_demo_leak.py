"""How often the few-shot baselines copy an answer of their own prompt: the ``demo_leak`` rate.

Runs the baselines that have few-shot demonstrations (default ``vanilla_rag,iter_retgen,ircot``) greedily with
the default model on the first ``--limit`` questions of each real-data fixture (HotpotQA distractor, 2Wiki,
MuSiQue with their pooled context paragraphs; Bamboogle over the wiki18 corpus sample), one model for all
runs, and prints per method: answers, answers flagged by ``demo_leak`` (an answer that equals or contains an
answer shown in the prompt which no gold contains), and, for a manual check, answers that share a word with a
fictional demonstration name (``Mira``, ``Kestrel``, ``Olsby``, ...) without being flagged. Each run is
written under ``--out`` so every answer can be read afterwards.

    OMP_NUM_THREADS=1 nice .venv/bin/python bench/bench_demo_leak.py --limit 20 --out /tmp/leak

Prints one table, then the flagged and the near-miss answers.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import time
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures"
#: dataset file -> corpus (None: the pooled context paragraphs of the file's questions)
DATASETS = {
    "hotpotqa_dev_distractor.sample.json": None,
    "2wikimultihopqa_dev.sample.jsonl": None,
    "musique_ans_dev.sample.jsonl": None,
    "bamboogle_test.flashrag.sample.jsonl": "wiki18_corpus.flashrag.sample.jsonl",
}


def demo_words(prompt_text: str) -> set[str]:
    """Capitalized words of the answers shown in a prompt (for the manual near-miss check)."""
    from workbench.rewards.metrics import in_context_answers

    return {w.lower() for a in in_context_answers(prompt_text) for w in re.findall(r"[A-Z][a-z]+", a)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="vanilla_rag,iter_retgen,ircot")
    ap.add_argument("--limit", type=int, default=20, help="questions per dataset")
    ap.add_argument("--fixtures", default=str(FIXTURES))
    ap.add_argument("--datasets", default=",".join(DATASETS), help="fixture file names, comma-separated")
    ap.add_argument("--out", default="runs/demo_leak", help="runs root (one eval run per dataset)")
    args = ap.parse_args()

    from workbench.eval.runner import run_eval
    from workbench.rollout.backends.hf import HFBackend

    backend = HFBackend.from_pretrained()
    methods = [m for m in args.methods.split(",") if m]
    per: dict[str, dict[str, int]] = {m: {"n": 0, "leak": 0, "answered": 0} for m in methods}
    flagged, near = [], []
    t0 = time.perf_counter()
    for name in [d for d in args.datasets.split(",") if d]:
        corpus = DATASETS.get(name)
        run = run_eval(methods, Path(args.fixtures) / name, backend, limit=args.limit, out=args.out,
                       corpus=str(Path(args.fixtures) / corpus) if corpus else None, progress=False, log=None)
        df = run.trajectories_frame()
        for _, r in df.iterrows():
            m = r["method"]
            per[m]["n"] += 1
            per[m]["answered"] += isinstance(r["answer"], str)
            row = (m, name.split("_")[0].split(".")[0], r["question"], r["answer"])
            if r["demo_leak"] == 1.0:
                per[m]["leak"] += 1
                flagged.append(row)
            elif isinstance(r["answer"], str) and demo_words(r["prompt_text"]) & {w.lower() for w in re.findall(r"\w+", r["answer"])}:
                near.append(row)
        print(f"[{name}] {run.path}", flush=True)
    wall = time.perf_counter() - t0

    print(f"# demo leak: {args.methods}, first {args.limit} questions of each of {args.datasets}; greedy, default "
          f"model; {platform.node()}, {os.cpu_count()} cpu; wall {wall:.0f}s; load {os.getloadavg()[0]:.2f}")
    print(f"{'method':12s} {'answers':>8s} {'answered':>9s} {'demo_leak':>10s} {'rate':>6s}")
    for m, c in per.items():
        print(f"{m:12s} {c['n']:8d} {c['answered']:9d} {c['leak']:10d} {c['leak'] / max(c['n'], 1):6.1%}")
    for title, rows in (("flagged by demo_leak", flagged), ("not flagged, shares a word with a demo answer", near)):
        print(f"\n{title}: {len(rows)}")
        for m, ds, q, a in rows:
            print(f"  {m:11s} {ds:9s} {a!r:40.40s} <- {q[:70]}")


if __name__ == "__main__":
    main()
