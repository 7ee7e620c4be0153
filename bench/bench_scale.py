"""The views at the scale of real training runs: synthetic runs, then interaction latency and memory.

A verl or long local run holds ~100k trajectories (200 steps × 512 rollouts). This script writes ``--runs``
synthetic eval runs of ``--per-run`` trajectories each (default 100 × 10,000 = 1M) in the real run layout
(``config.json``, ``trajectories.parquet``, ``features.parquet``, ``examples.jsonl``, ``metrics.json``),
then times the interactions of each view, each view in its own process (its peak RSS is that process's):

- dashboard (``workbench.dashboard.queries``): the runs table, the method comparison, the per-hop
  breakdown, the drill-down (one run's trajectory table, then one transcript);
- inspector (``widgets.inspector``) over every run: opening it, filters (method, hops, reward range,
  correctness), full-text search, next/previous;
- playground (``widgets.playground``) over one run: opening it and re-scoring the run's whole features
  table on each slider move; plus ``counterfactual`` over the features of every run at once.

Trajectories are real :class:`~workbench.core.trajectory.Trajectory` objects (turns with actions, tool calls
with hits, token ids and logprobs) written through ``Trajectory.to_row`` and the project's Parquet
schema; prompts are ~1.4-2k characters (system prompt, a worked example, the question) and responses a
few hundred to ~2.5k (think / search / observation with three passages / answer). Each question's group
of ``--group`` rollouts holds ``--variants`` distinct trajectories (copies differ in id and sample index),
which keeps generation to a few minutes on two cores. Data goes to ``--out`` (default under /tmp).

    .venv/bin/python bench/bench_scale.py --runs 10 --per-run 10000          # 100k trajectories
    .venv/bin/python bench/bench_scale.py                                   # 1M (about 12 GB in /tmp)
    .venv/bin/python bench/bench_scale.py --out /tmp/scale --skip-generate  # measure existing runs again
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: (method, protocol, share of searches): the methods a synthetic run may hold.
METHODS = (("search_r1", "search_r1"), ("dspo", "search_r1"), ("dynasearcher", "dynasearcher"), ("direct", "direct"))
_SYLL = ("tre", "im", "vee", "tex", "fir", "nith", "stul", "gru", "mo", "ra", "kre", "vis", "ael", "quist", "hal",
         "ler", "vik", "mar", "en", "ost", "dun", "bel", "cor", "wen", "tal", "mrid", "ge", "eis", "an", "lor")
_RELATIONS = ("director", "author", "founder", "mother", "father", "employer", "birthplace", "spouse")
SYSTEM = ("<|im_start|>system\nAnswer the given question. You must conduct reasoning inside <think> and </think> "
          "first every time you get new information. After reasoning, if you find you lack some knowledge, you can "
          "call a search engine by <search> query </search> and it will return the top searched results between "
          "<information> and </information>. You can search as many times as you want. If you find no further "
          "external knowledge needed, you can directly provide the answer inside <answer> and </answer>, without "
          "detailed illustrations. For example, <answer> Beijing </answer>.<|im_end|>\n")
DEMO = ("<|im_start|>user\nQuestion: In which country was the author of the novel The Glass Orchard born?<|im_end|>\n"
        "<|im_start|>assistant\n<think> I need the author of The Glass Orchard first. </think>\n<search> The Glass "
        "Orchard novel author </search>\n\n<information>Doc 1(Title: The Glass Orchard) The Glass Orchard is a 1931 "
        "novel written by Maren Ostvik.</information>\n\n<think> The author is Maren Ostvik. Now I need her "
        "birthplace. </think>\n<search> Maren Ostvik place of birth </search>\n\n<information>Doc 1(Title: Maren "
        "Ostvik) Maren Ostvik was born in Hallervik, a town in Norway.</information>\n\n<think> Hallervik is in "
        "Norway. </think>\n<answer> Norway </answer><|im_end|>\n")


# ----------------------------------------------------------------------------- generation


def _name(rng: random.Random, parts: int = 2) -> str:
    return " ".join("".join(rng.choice(_SYLL) for _ in range(rng.randint(2, 3))).capitalize() for _ in range(parts))


def _tokens(text: str, rng: np.random.Generator) -> list[int]:
    return rng.integers(10, 49_000, max(1, len(text) // 4)).tolist()  # ~4 characters a token (SmolLM2's BPE)


def _passage(rng: random.Random) -> dict[str, Any]:
    a, b, c = _name(rng, 3), _name(rng, 2), _name(rng, 1)
    text = " ".join(rng.choice((
        f"{a} was born in {c}, a town in {_name(rng, 1)}.", f"{a} founded {b} in {rng.randint(1850, 2000)}.",
        f"{b} is headquartered in {c}. Analysts say its business in early printing grew last year.",
        f"In {rng.randint(1900, 2010)}, {a} received the {_name(rng, 1)} Prize.", f"{a} is employed by {b}.",
        f"{b} is a {rng.randint(1900, 2010)} novel written by {a}.")) for _ in range(rng.randint(1, 3)))
    return {"id": f"p{rng.randint(0, 99999):05d}", "title": a, "text": text, "score": round(rng.uniform(3, 9), 3),
            "source": rng.choice(("wiki", "news", "academic"))}


def make_trajectory(rng: random.Random, nrng: np.random.Generator, tid: str, ex_id: str, question: str, protocol: str,
                    hops: int, method: str, fail: bool = False):
    """One realistic trajectory: searches with observations of three passages, then an answer (or a cut-off)."""
    from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
    from workbench.core.types import ToolCall

    prompt = f"{SYSTEM}{DEMO}<|im_start|>user\nQuestion: {question}<|im_end|>\n<|im_start|>assistant\n"
    turns: list[Turn] = []
    n_search = 0 if protocol == "direct" else rng.choice((0, 1, 1, 2, 2, 3))
    for k in range(n_search):
        query = f"{_name(rng, 2)} {rng.choice(_RELATIONS)}"
        text = f"<think> I need the {rng.choice(_RELATIONS)} of {_name(rng, 2)} first. </think>\n<search> {query} </search>"
        ids = _tokens(text, nrng)
        turns.append(Turn(POLICY, text, ids, nrng.normal(-0.6, 0.4, len(ids)).round(4).tolist(), "stop",
                          {"kind": "search", "payload": query, "reason": ""}, latency_s=rng.uniform(0.5, 8)))
        hits = [_passage(rng) for _ in range(3)]
        error = "search tool timed out after 10 s" if fail and k == 0 else None
        obs = ("\n\n<information>" + "\n".join(f"Doc {i + 1}(Title: {h['title']}) {h['text']}" for i, h in
                                               enumerate(hits)) + "</information>\n\n") if error is None else (
            "\n\n<information>search failed</information>\n\n")
        call = ToolCall("search", {"query": query, "k": 3}, hits if error is None else [], error, rng.uniform(0, 0.01))
        turns.append(Turn(OBSERVATION, obs, _tokens(obs, nrng), tool_calls=[call], latency_s=call.latency_s))
    answer = _name(rng, rng.choice((1, 2, 3)))
    finish = rng.choice(("answer",) * 9 + ("max_turns",))
    text = f"<think> So the answer is {answer}. </think>\n<answer> {answer} </answer>" if finish == "answer" else (
        f"\nYou can find more information about {_name(rng, 2)} at: https://www.example.com/\n" * 3)
    ids = _tokens(text, nrng)
    turns.append(Turn(POLICY, text, ids, nrng.normal(-0.6, 0.4, len(ids)).round(4).tolist(),
                      "stop" if finish == "answer" else "length",
                      {"kind": "answer", "payload": answer, "reason": ""} if finish == "answer" else
                      {"kind": "invalid", "payload": None, "reason": "turn cut without a complete action"},
                      latency_s=rng.uniform(0.5, 8)))
    ok = finish == "answer"
    return Trajectory(tid, ex_id, question, protocol, _tokens(prompt, nrng), prompt, turns,
                      answer if ok else None, finish, ex_id, 0, {"answered": ok, "format_ok": ok and rng.random() < .9},
                      {"dataset": "world", "split": "dev", "hops": hops, "qtype": "chain", "method": method})


def write_run(root: Path, index: int, per_run: int, group: int = 8, variants: int = 2, seed: int = 0) -> Path:
    """One synthetic eval run of ``per_run`` trajectories (groups of ``group`` per question) under ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from workbench.core.trajectory import ROW_GROUP_ROWS, arrow_schema
    from workbench.data.example import Example
    from workbench.rewards.feature_io import save_features
    from workbench.storage.runs import Run
    from workbench.storage.text_index import build_index
    from workbench.util.io import atomic_path

    rng, nrng = random.Random(seed * 100_003 + index), np.random.default_rng([seed, index])
    methods = [METHODS[(index + k) % len(METHODS)] for k in range(1 + index % 2)]
    run = Run.create(root, kind="eval", run_id=f"scale-{index:04d}",
                     config={"model": "smollm2-135m", "dataset": "world", "split": "dev", "synthetic": True,
                             "methods_run": [m for m, _ in methods]})
    n_groups = -(-per_run // group)
    examples, templates, failed = [], [], []
    for g in range(n_groups):
        method, protocol = methods[g % len(methods)]
        hops = rng.randint(1, 4)
        q = (f"What is the {rng.choice(_RELATIONS)} of the {rng.choice(_RELATIONS)} of {_name(rng, 3)}"
             f" ({index}-{g})?")
        ex = Example(f"world-{index}-{g:06d}", q, [_name(rng, 2)], hops=hops, qtype="chain")
        examples.append(ex)
        for v in range(min(variants, group)):
            t = make_trajectory(rng, nrng, f"{method}:{ex.id}#{v}", ex.id, q, protocol, hops, method,
                                fail=nrng.random() < 0.01)
            templates.append(t)
            failed.append(any(c.error for c in t.tool_calls))
    rows = [t.to_row() for t in templates]
    pool = pa.Table.from_pylist(rows, schema=arrow_schema())
    # row i = group i // group, sample i % group -> template (group, sample % variants)
    i = np.arange(per_run)
    g, s = i // group, i % group
    pick = g * min(variants, group) + s % min(variants, group)
    table = pool.take(pa.array(pick))
    ids = [f"{t.meta['method']}:{t.example_id}#{k}" for t, k in zip((templates[j] for j in g * min(variants, group)), s)]
    table = table.set_column(table.schema.get_field_index("id"), "id", pa.array(ids, pa.string()))
    table = table.set_column(table.schema.get_field_index("sample_idx"), "sample_idx", pa.array(s, pa.int32()))
    golds = {e.id: e.answers for e in examples}
    f1 = np.where(nrng.random(per_run) < 0.4, 1.0, np.round(nrng.random(per_run) * (nrng.random(per_run) < 0.5), 3))
    answered = table.column("answer").is_valid().to_numpy(zero_copy_only=False)
    f1 = np.where(answered, f1, 0.0)
    cem = (f1 >= 0.999).astype(np.float64)
    fmt = np.array([json.loads(x).get("format_ok", False) for x in table.column("flags_json").to_pylist()], np.float64)
    method_col = [templates[j].meta["method"] for j in g * min(variants, group)]
    for name, values in (("em", cem), ("cem", cem), ("f1", f1), ("format_ok", fmt), ("method", method_col)):
        if name in table.column_names:
            table = table.set_column(table.schema.get_field_index(name), name, pa.array(values))
        else:
            table = table.append_column(name, pa.array(values))
    with atomic_path(run.path / "trajectories.parquet") as tmp:  # as save_trajectories writes it
        pq.write_table(table, tmp, compression="zstd", row_group_size=ROW_GROUP_ROWS)
    build_index(run.path / "trajectories.parquet")  # as Run.write_trajectories does
    run.write_examples(examples)
    save_features(run, _features(table, golds, np.array(failed)[pick], nrng))
    summary = {}
    for m in {m for m, _ in methods}:
        mask = np.array(method_col) == m
        summary[m] = {"n": int(mask.sum()), "em": float(cem[mask].mean()), "cem": float(cem[mask].mean()),
                      "f1": float(f1[mask].mean()), "format_ok": float(fmt[mask].mean()),
                      "searches": float(table.column("n_searches").to_numpy()[mask].mean())}
    run.write_metrics({"methods": summary, "n_trajectories": per_run})
    run.mark_complete()  # as write_eval_run does, last
    return run.path


def _features(table: Any, golds: dict[str, list[str]], turns_failed: np.ndarray, nrng: np.random.Generator
              ) -> pd.DataFrame:
    """A features table as ``compute_features`` writes it (same rows and ids; ``turns_failed``: a tool failed)."""
    n = table.num_rows
    col = {c: table.column(c).to_numpy(zero_copy_only=False) for c in ("id", "example_id", "group_id", "sample_idx",
                                                                         "protocol", "answer", "em", "cem", "f1",
                                                                         "format_ok", "n_searches", "n_invalid", "hops")}
    return pd.DataFrame({
        **{c: col[c] for c in ("id", "example_id", "group_id", "sample_idx", "protocol", "answer")},
        "has_gold": 1.0, "em": col["em"], "cem": col["cem"], "f1": col["f1"],
        "L_pred": nrng.integers(1, 6, n).astype(float), "L_gt": np.array([len(golds[e][0].split()) for e in
                                                                          col["example_id"]], float),
        "n_searches": col["n_searches"].astype(float), "hops": col["hops"].astype(float),
        "n_invalid": col["n_invalid"].astype(float), "answered": (col["answer"] != None).astype(float),  # noqa: E711
        "format_ok": col["format_ok"], "answer_boxes": nrng.integers(0, 3, n).astype(float),
        "evidence_boxes": nrng.integers(0, 3, n).astype(float), "dag_valid": (nrng.random(n) < .7).astype(float),
        "recall": np.round(nrng.random(n), 2), "n_queries": col["n_searches"].astype(float),
        "query_concise": (nrng.random(n) < .6).astype(float), "query_sim_mean": nrng.random(n),
        "query_sim_paper": nrng.random(n) / 2, "evidence_f1": np.round(nrng.random(n), 3),
        "judge_similarity": np.round(nrng.random(n), 2), "judge_yesno": (nrng.random(n) < .5).astype(float),
        "failed_tool": turns_failed.astype(float), "backend_error": 0.0, "failed_judge": 0.0, "failed_evidence": 0.0,
        "failure": np.where(turns_failed, "search tool failed: search tool timed out after 10 s", None),
    })


def generate(out: Path, runs: int, per_run: int, first: int = 0, seed: int = 0, quiet: bool = False,
             variants: int = 2) -> list[Path]:
    """Runs ``first .. runs - 1`` of ``per_run`` trajectories each under ``out``; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(first, runs):
        t0 = time.perf_counter()
        paths.append(write_run(out, k, per_run, variants=variants, seed=seed))
        if not quiet:
            print(f"  run {k + 1}/{runs} written in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return paths


# ----------------------------------------------------------------------------- measurement


def _timed(fn: Any, repeat: int) -> dict[str, float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return {"p50": float(np.percentile(times, 50)), "p95": float(np.percentile(times, 95)), "n": repeat}


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def section_dashboard(root: Path, repeat: int, max_items: int | None = None) -> dict[str, Any]:
    from workbench.dashboard import queries as q

    try:  # the app's calls: the runs table and the drill-down table carry the failure flags where they exist
        from workbench.dashboard import failures as fq

        runs_table, run_table = (lambda r: fq.runs_with_failures(q.runs_table(r), r)), fq.run_trajectory_table
    except ImportError:
        runs_table, run_table = q.runs_table, q.run_trajectories
    run_ids = [p.name for p in q.run_dirs(root)]
    rng = random.Random(1)
    out = {"runs table (as the app: with failure counts)": _timed(lambda: runs_table(root), repeat),
           "runs table (queries.runs_table alone)": _timed(lambda: q.runs_table(root), repeat),
           "comparison (method_metrics)": _timed(lambda: q.method_metrics(root), repeat),
           "per-hop breakdown": _timed(lambda: q.hop_breakdown(root), repeat)}
    out["drill-down: a run's table"] = _timed(lambda: run_table(root, rng.choice(run_ids)), repeat)
    if run_table is not q.run_trajectories:  # the served app: one page of 50 rows (its run's failures once)
        fails = fq.run_failures(root, run_ids[0])
        out["drill-down: one page (50 rows, as served)"] = _timed(lambda: fq.run_trajectory_table(
            root, run_ids[0], limit=50, offset=50 * rng.randrange(200), failures=fails), repeat)
        cold = {}
        for _ in range(min(repeat, 5)):
            fq._COUNTS.clear()
            cold.setdefault("t", []).append(_timed(lambda: fq.failure_counts(root), 1)["p50"])
        out["failure counts, cold (every features table, one query)"] = {
            "p50": float(np.percentile(cold["t"], 50)), "p95": float(np.percentile(cold["t"], 95)), "n": len(cold["t"])}
    n = len(q.run_trajectories(root, run_ids[0]))
    out["drill-down: one transcript"] = _timed(
        lambda: q.load_trajectory(root, rng.choice(run_ids), rng.randrange(n)), repeat)
    return out


def section_inspector(root: Path, repeat: int, max_items: int | None = None) -> dict[str, Any]:
    from widgets.inspector import trajectory_inspector
    from workbench.storage.runs import list_runs

    runs = list_runs(root)
    t0 = time.perf_counter()
    box = trajectory_inspector(runs, max_items=max_items)
    out: dict[str, Any] = {f"open ({len(runs)} runs, max_items={max_items})": {
        "p50": time.perf_counter() - t0, "p95": float("nan"), "n": 1}}
    ins = box.inspector
    n = len(ins.frame)
    out["rows"] = n
    filters = [dict(method="search_r1"), dict(method="dynasearcher", hops=2), dict(hops=3, correct=True),
               dict(reward=(0.5, 1.0)), dict(method=None, hops=None, correct=False, reward=None)]
    k = [0]

    def next_filter() -> None:
        ins.set_filters(**{"method": None, "hops": None, "correct": None, "reward": None, **filters[k[0] % len(filters)]})
        k[0] += 1

    out["filter (method / hops / correct / reward)"] = _timed(next_filter, repeat)
    ins.set_filters(method=None, hops=None, correct=None, reward=None)
    words = ["hallervik", "timed out", "no such words anywhere", "the spouse of", "prize"]
    out["full-text search"] = _timed(lambda: ins.set_filters(text=words[k.__setitem__(0, k[0] + 1) or k[0] % 5]),
                                     repeat)
    out["full-text search, a word in no trajectory"] = _timed(
        lambda: ins.set_filters(text=f"zqxj{k.__setitem__(0, k[0] + 1) or k[0]}"), max(3, repeat // 4))
    out["full-text search, a phrase in no trajectory (common words)"] = _timed(
        lambda: ins.set_filters(text=["the prize of", "spouse timed", "out of the"][k.__setitem__(0, k[0] + 1) or k[0] % 3]),
        max(3, repeat // 4))
    # the peer in the same run: the same words by DuckDB's scan of every file (no word index), as before
    from widgets.inspector import TEXT_HITS
    from workbench.storage import trajectory_store as store

    files = ins.data.files
    out["full-text search by scan, no index (before)"] = _timed(
        lambda: store._scan_rows(files, words[k.__setitem__(0, k[0] + 1) or k[0] % 5], None, store.SEARCH_COLUMNS,
                                 TEXT_HITS), max(3, repeat // 4))
    rid = runs[len(runs) // 2].id
    out["full-text search in one run (run filter set)"] = _timed(
        lambda: ins.set_filters(run=rid, text=words[k.__setitem__(0, k[0] + 1) or k[0] % 5]), repeat)
    ins.set_filters(text="", run=None)
    out["next trajectory"] = _timed(lambda: ins.step(+1), repeat)
    return out


def section_playground(root: Path, repeat: int, max_items: int | None = None) -> dict[str, Any]:
    from widgets.playground import reward_playground
    from workbench.methods import get_preset
    from workbench.rewards import counterfactual
    from workbench.rewards.feature_io import load_features
    from workbench.storage.runs import list_runs

    runs = list_runs(root)
    t0 = time.perf_counter()
    box = reward_playground(runs[0], preset="dspo")
    out: dict[str, Any] = {"open (one run; first: plotly's imports)": {"p50": time.perf_counter() - t0,
                                                                        "p95": float("nan"), "n": 1}}
    out["open again (another run)"] = _timed(lambda: reward_playground(runs[1 % len(runs)], preset="dspo"), 3)
    w = box.weight_sliders["r_subem"] if "r_subem" in box.weight_sliders else next(iter(box.weight_sliders.values()))
    vals = np.linspace(w.min, w.max, 7)[1:-1]
    k = [0]

    def move() -> None:
        w.value = float(vals[k[0] % len(vals)])
        k[0] += 1

    out[f"re-score one run ({len(box.state.features)} rows)"] = _timed(move, repeat)
    feats = pd.concat([load_features(r) for r in runs], ignore_index=True)
    base = get_preset("dspo")
    out[f"counterfactual over all runs ({len(feats)} rows)"] = _timed(
        lambda: counterfactual(feats, base.with_weights(r_subem=float(vals[k.__setitem__(0, k[0] + 1) or k[0] % 5])),
                               {}, base=base), max(3, repeat // 4))
    return out


SECTIONS = {"dashboard": section_dashboard, "inspector": section_inspector, "playground": section_playground}


def run_section(name: str, root: Path, repeat: int, max_items: int | None = None) -> dict[str, Any]:
    """One view's timings in a child process (so its peak RSS is its own)."""
    cmd = [sys.executable, __file__, "--out", str(root), "--section", name, "--repeat", str(repeat)]
    cmd += ["--max-items", str(max_items)] if max_items is not None else []
    res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if res.returncode != 0:
        return {"error": res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"}
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--runs", type=int, default=100, help="synthetic runs to write")
    ap.add_argument("--per-run", type=int, default=10_000, help="trajectories per run")
    ap.add_argument("--out", type=Path, default=Path("/tmp/workbench_scale"), help="runs root (keep it out of the repo)")
    ap.add_argument("--repeat", type=int, default=20, help="repetitions of each interaction (p50 / p95 over them)")
    ap.add_argument("--skip-generate", action="store_true", help="measure the runs already under --out")
    ap.add_argument("--generate-only", action="store_true", help="write the runs, measure nothing")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"views to measure, comma-separated ({', '.join(SECTIONS)})")
    ap.add_argument("--section", choices=sorted(SECTIONS), help=argparse.SUPPRESS)  # the child process
    ap.add_argument("--first", type=int, default=0, help="generate runs from this index on (to add runs)")
    ap.add_argument("--max-items", type=int, default=None, help="the inspector's max_items (trajectories per run; "
                    "default: all)")
    a = ap.parse_args(argv)
    if a.section:
        out = SECTIONS[a.section](a.out, a.repeat, a.max_items)
        print(json.dumps({"section": a.section, "peak_rss_mb": _rss_mb(), **out}))
        return 0
    bad = sorted(set(a.sections.split(",")) - set(SECTIONS))
    if bad or a.runs < 1 or a.per_run < 1:
        print(f"bench_scale: unknown section(s) {', '.join(bad)}; valid: {', '.join(SECTIONS)}" if bad else
              f"bench_scale: --runs {a.runs} --per-run {a.per_run}: both must be >= 1", file=sys.stderr)
        return 2
    if a.skip_generate and not any(a.out.glob("*/config.json")):
        print(f"bench_scale: no runs under --out {a.out}; write them first (drop --skip-generate)", file=sys.stderr)
        return 2
    if not a.skip_generate:
        t0 = time.perf_counter()
        generate(a.out, a.runs, a.per_run, a.first)
        print(f"generated {a.runs - a.first} runs × {a.per_run} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    if a.generate_only:
        return 0
    size = sum(p.stat().st_size for p in a.out.glob("*/*.parquet")) / 2**30  # run dirs may be links
    print(f"# views at scale · {a.out} ({size:.1f} GiB of parquet) · {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores · load {os.getloadavg()[0]:.2f} · {time.strftime('%Y-%m-%d %H:%M')}")
    print("| view | interaction | p50 (s) | p95 (s) | n | peak RSS (MB) |\n|---|---|---|---|---|---|")
    for name in a.sections.split(","):
        res = run_section(name, a.out, a.repeat, a.max_items)
        if "error" in res:
            print(f"| {name} | FAILED: {res['error']} | | | | |")
            continue
        for k, v in res.items():
            if isinstance(v, dict):
                print(f"| {name} | {k} | {v['p50']:.3f} | {v['p95']:.3f} | {v['n']} | {res['peak_rss_mb']:.0f} |")
            elif k == "rows":
                print(f"| {name} | rows in the view | {v} | | | |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
