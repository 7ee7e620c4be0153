"""Does the policy search as deep as the question? Per gold hop count: cover-EM, searches per question, how far
that is from the hop count, and what share searched exactly / at least as often as there are hops.

    .venv/bin/python bench/search_depth.py 'runs/ablations/*/*/seed*/eval/*'      # eval runs (globs welcome)
    .venv/bin/python bench/search_depth.py RUN [RUN...] --method search_r1+lora --out depth.json

The deep multi-hop goal reads off this table: cover-EM per hop level, and searches per question within
±0.3 of the hop count on each level (the ``gap`` column). Each run's ``trajectories.parquet`` must have the
``hops``, ``n_searches``, ``cem`` and ``finish_reason`` columns an eval run writes; a run without them is named
and skipped. Where the run's ``examples.jsonl`` holds each question's KG path (the world's questions do), the
``short`` column is the share of answers that name an entity from the middle of the chain (a hop's tail before the
last, cover-matched): the policy stopped early and answered what it had found so far.
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
from pathlib import Path

COLUMNS = ["example_id", "method", "hops", "n_searches", "cem", "finish_reason"]


def load(paths: list[str], method: str | None = None):
    """The answers of every run matched by ``paths`` (run directories or globs), one row each, with ``run``."""
    import pandas as pd
    import pyarrow.parquet as pq

    runs = sorted({Path(p) for pat in paths for p in (glob.glob(pat) or [pat])})
    frames, skipped = [], []
    for run in runs:
        f = run / "trajectories.parquet"
        try:  # the answers too where the run has them (the mid-chain column reads them)
            names = pq.read_schema(f).names
            d = pd.read_parquet(f, columns=COLUMNS + ["answer"] * ("answer" in names))
        except (OSError, ValueError, KeyError) as e:  # not a run, or an old one without these columns
            skipped.append(f"{run}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if method:
            d = d[d["method"] == method]
        frames.append(d.assign(run=str(run), short=_short(run, d)))
    if not frames:
        raise SystemExit("search_depth: no eval run with hops, n_searches, cem and finish_reason among "
                         f"{', '.join(paths)}" + (f" (skipped: {'; '.join(skipped)})" if skipped else "")
                         + "; pass eval run directories, e.g. 'runs/*eval*'")
    for s in skipped:
        print(f"search_depth: skipped {s}", file=sys.stderr)
    return pd.concat(frames, ignore_index=True)


def _short(run: Path, d):
    """Per answer: 1.0 where it cover-matches a tail of its question's KG path before the last hop, else 0.0; NaN
    where the run's ``examples.jsonl`` or the answers are missing, or the question has one hop."""
    from workbench.data.example import load_examples
    from workbench.rewards.metrics import cover_exact_match

    if "answer" not in d:
        return float("nan")
    try:
        mids = {ex.id: [str(step.get("tail") or "") for step in ex.kg_path[:-1]] for ex in load_examples(run / "examples.jsonl")}
    except (OSError, ValueError):
        return float("nan")
    out = []
    for qid, answer in zip(d["example_id"], d["answer"]):
        tails = [t for t in mids.get(qid, []) if t]
        out.append(float(any(cover_exact_match(answer or "", [t]) == 1.0 for t in tails)) if tails else float("nan"))
    return out


def table(df):
    """Per hop count: answers, cover-EM, searches (mean), gap (mean searches − hops), exact / enough (shares of
    answers searching exactly / at least as often as the hops), cover-EM of those with enough, cut (share stopped
    by the turn limit)."""
    d = df.assign(exact=df.n_searches == df.hops, enough=df.n_searches >= df.hops, cut=df.finish_reason == "max_turns")
    d = d.assign(cem_enough=d.cem.where(d.enough))
    t = d.groupby("hops").agg(answers=("cem", "size"), cover_em=("cem", "mean"), searches=("n_searches", "mean"),
                              exact=("exact", "mean"), enough=("enough", "mean"), cem_enough=("cem_enough", "mean"),
                              cut=("cut", "mean"), short=("short", "mean"))
    t.insert(3, "gap", t["searches"] - t.index.to_series())
    return t


def markdown(t) -> str:
    head = ("| hops | answers | cover-EM | searches | gap | exact | enough | cover-EM when enough | cut at the turn limit "
            "| answered mid-chain |")
    lines = [head, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for h, r in t.iterrows():
        ce = "–" if r.cem_enough != r.cem_enough else f"{r.cem_enough:.3f}"
        short = "–" if r.short != r.short else f"{r.short:.2f}"
        lines.append(f"| {h} | {int(r.answers)} | {r.cover_em:.3f} | {r.searches:.2f} | {r.gap:+.2f} | {r.exact:.2f} | "
                     f"{r.enough:.2f} | {ce} | {r.cut:.2f} | {short} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="eval run directories or globs (quote them)")
    ap.add_argument("--method", default=None, help="only this method's answers (default: every method's)")
    ap.add_argument("--out", default=None, help="write the table as JSON here")
    args = ap.parse_args(argv)
    df = load(args.runs, args.method)
    t = table(df)
    print(f"{df.run.nunique()} run(s), {len(df)} answers" + (f", method {args.method}" if args.method else ""))
    print(markdown(t))
    if args.out:
        rows = [{"hops": int(h), **{k: (None if v != v else float(v)) for k, v in r.items()}} for h, r in t.iterrows()]
        Path(args.out).write_text(json.dumps({"runs": sorted(df.run.unique()), "rows": rows}, indent=1))
    return t


if __name__ == "__main__":
    main()
