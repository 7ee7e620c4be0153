"""Re-scoring speed: the vectorized Rubric against a per-trajectory Python loop, for every preset.

The reward playground moves parameter sliders over stored features, so what matters is
how fast a whole features table is re-scored under *new* parameters. For each preset this
builds ``--rows`` synthetic feature rows (groups of ``--group`` trajectories, ~1% NaN in
the judge / evidence / similarity columns), then times

- ``rubric.with_params(**new)(features)``: parameter validation, every component and the
  weighted total (the table and the per-component breakdown are built lazily, on first
  access; the ``+table ms`` column times building both as well);
- a plain Python loop over the rows computing the same rewards one trajectory at a time
  (scalar reference implementations written here from the papers' equations; columns are
  pre-extracted into Python lists, which is not timed),

and asserts that both give the same totals (NaN where an input is missing). It also times
``counterfactual(features, preset, new)`` (old and new rewards, group advantages, filter and
in-group ranks for every row; best of 3), what one reward-playground slider move costs. Timings are
the best of several runs (``--repeat``, ``--loop-repeat``): on a shared machine a run of a
few milliseconds is often preempted for a whole scheduler slice; the median is printed too.

    .venv/bin/python bench/bench_rubric.py                 # 100k rows, all presets
    .venv/bin/python bench/bench_rubric.py --rows 10000 --presets dspo when_to_search
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time

import numpy as np
import pandas as pd

from workbench.methods import PRESETS, get_preset
from workbench.rewards.counterfactual import counterfactual

NAN = float("nan")

#: The new parameters each preset is re-scored with (off the paper's defaults on purpose).
NEW_PARAMS = {
    "dynasearcher": {"alpha": 0.7, "gamma": 0.8, "beta": -0.1, "n": 2.0},
    "rsearch_evidence": {"gamma_e": 0.1, "gamma_a": 0.3},
    "dspo": {},
    "rsearch_dag": {"answer_source": "judge"},
    "when_to_search": {"stage": 2, "beta": 0.2, "sim_divisor": "pairs", "correct_metric": "judge"},
}


def synthetic_features(n: int, group: int, rng: np.random.Generator) -> pd.DataFrame:
    """Feature rows with the columns the presets read, in realistic ranges."""

    def flag(p: float) -> np.ndarray:
        return (rng.random(n) < p).astype(np.float64)

    def with_nan(x: np.ndarray, p: float = 0.01) -> np.ndarray:
        return np.where(rng.random(n) < p, np.nan, x)

    f1 = np.round(rng.random(n), 3) * flag(0.7)
    cem = np.maximum(flag(0.4), (f1 > 0.6).astype(np.float64))
    n_search = rng.integers(0, 6, n).astype(np.float64)
    return pd.DataFrame({
        "id": [f"t{i}" for i in range(n)],
        "group_id": [f"g{i // group}" for i in range(n)],
        "sample_idx": (np.arange(n) % group).astype(np.float64),
        "em": cem * flag(0.6), "cem": cem, "f1": f1,
        "L_pred": rng.integers(0, 20, n).astype(np.float64), "L_gt": rng.integers(1, 5, n).astype(np.float64),
        "format_ok": flag(0.8), "recall": np.round(rng.random(n), 2), "n_searches": n_search,
        "hops": rng.integers(1, 5, n).astype(np.float64),
        "answer_boxes": rng.integers(0, 3, n).astype(np.float64),
        "evidence_boxes": rng.integers(0, 3, n).astype(np.float64),
        "evidence_f1": with_nan(np.round(rng.random(n), 3)),
        "dag_valid": flag(0.7), "judge_similarity": with_nan(np.round(rng.random(n), 2)),
        "judge_yesno": with_nan(flag(0.5)), "query_concise": flag(0.6),
        "query_sim_mean": with_nan(np.where(n_search > 1, rng.random(n), np.nan)),
        "query_sim_paper": with_nan(np.where(n_search > 1, rng.random(n) / 2, np.nan)),
    })


# ----------------------------------------------------------------------------- scalar references (one row at a time)


def _nan(*xs: float) -> bool:
    return any(math.isnan(x) for x in xs)


def loop_dynasearcher(r: dict, alpha: float, gamma: float, beta: float, n: float) -> float:
    # Eq. 2, 1, 3, 5, 4, 6
    if _nan(r["format_ok"]):
        return NAN
    if r["format_ok"] == 1:
        if _nan(r["L_pred"], r["L_gt"]):
            return NAN
        ans = r["f1"] if r["L_pred"] >= n * r["L_gt"] else r["cem"]
        acc = NAN if math.isnan(ans) else max(0.1, ans)
    else:
        acc = 0.0
    if _nan(r["n_searches"], r["hops"], r["recall"]):
        return NAN
    penalty = max(beta, 1.0 - gamma ** (r["n_searches"] - r["hops"]))
    return acc + alpha * (r["recall"] - penalty)


def loop_rsearch_evidence(r: dict, gamma_e: float, gamma_a: float) -> float:
    i_s = 1.0 if r["n_searches"] > 0 else 0.0
    i_a = 1.0 if r["answer_boxes"] == 1 else 0.0
    if _nan(r["answer_boxes"]) or (i_s == 1 and _nan(r["evidence_boxes"])):
        return NAN
    i_e = 1.0 if r["evidence_boxes"] == 1 else 0.0
    fmt = (1 - i_s) * (gamma_e + gamma_a * i_a) + i_s * (gamma_e * i_e + gamma_a * i_a)  # Eq. 5
    return r["f1"] + r["evidence_f1"] + fmt  # Eq. 6


def loop_dspo(r: dict) -> float:
    return r["cem"]


def loop_rsearch_dag(r: dict, answer_source: str) -> float:
    ans = r["judge_similarity"] if answer_source == "judge" else r["f1"]
    return 0.25 * r["format_ok"] + 0.25 * r["dag_valid"] + 0.5 * ans  # Eq. 3


def loop_when_to_search(r: dict, stage: int, beta: float, sim_divisor: str, correct_metric: str) -> float:
    rf = NAN if _nan(r["format_ok"]) else (1.0 if r["format_ok"] == 1 else -1.0)  # Eq. 6
    rc = r["n_searches"]
    if rc > 1:  # Eq. 9
        rs = -(r["query_sim_paper"] if sim_divisor == "paper" else r["query_sim_mean"])
    else:
        rs = NAN if _nan(r["query_concise"]) else (0.0 if r["query_concise"] == 1 else -1.0)
    ok = r["judge_yesno"] if correct_metric == "judge" else r["cem"]
    if _nan(ok):
        ra = NAN
    elif stage == 1:  # Eq. 10
        ra = 1.0 if ok >= 1 else -1.0 + beta * rc
    else:  # Eq. 11
        ra = 1.0 - beta * rc if ok >= 1 else -1.0
    return ra + rs + rf  # Eq. 12


LOOPS = {
    "dynasearcher": loop_dynasearcher,
    "rsearch_evidence": loop_rsearch_evidence,
    "dspo": loop_dspo,
    "rsearch_dag": loop_rsearch_dag,
    "when_to_search": loop_when_to_search,
}


def bench_preset(name: str, df: pd.DataFrame, records: list[dict], repeat: int, loop_repeat: int) -> dict:
    rubric = get_preset(name)
    new = NEW_PARAMS[name]
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        table = rubric.with_params(**new)(df)
        times.append(time.perf_counter() - t0)
    full = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        t = rubric.with_params(**new)(df)
        t.frame, t.breakdown  # noqa: B018  (build both)
        full.append(time.perf_counter() - t0)
    cf = []
    for _ in range(3):
        t0 = time.perf_counter()
        counterfactual(df, rubric, new)
        cf.append(time.perf_counter() - t0)
    vec_total = table.total
    params = table.params
    fn = LOOPS[name]
    kw = {k: params[k] for k in params if k in fn.__code__.co_varnames[1 : fn.__code__.co_argcount]}
    loop_times = []
    for _ in range(loop_repeat):
        t0 = time.perf_counter()
        loop_total = np.array([fn(r, **kw) for r in records])
        loop_times.append(time.perf_counter() - t0)
    if not np.allclose(vec_total, loop_total, equal_nan=True, atol=1e-12):
        bad = np.flatnonzero(~np.isclose(vec_total, loop_total, equal_nan=True, atol=1e-12))[:5]
        raise AssertionError(f"{name}: rubric and loop disagree at rows {bad.tolist()}: "
                             f"{vec_total[bad].tolist()} vs {loop_total[bad].tolist()}")
    vec_s, loop_s = min(times), min(loop_times)
    return {"preset": name, "rows": len(df), "rubric_ms": vec_s * 1e3, "rubric_median_ms": statistics.median(times) * 1e3,
            "full_ms": min(full) * 1e3, "counterfactual_ms": min(cf) * 1e3,
            "loop_ms": loop_s * 1e3, "speedup": loop_s / vec_s, "missing": int(np.isnan(vec_total).sum())}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("--rows", type=int, default=100_000, help="synthetic trajectories")
    ap.add_argument("--group", type=int, default=8, help="trajectories per group")
    ap.add_argument("--repeat", type=int, default=15, help="timed rubric runs per preset (best and median reported)")
    ap.add_argument("--loop-repeat", type=int, default=3, help="timed loop runs per preset (best reported)")
    ap.add_argument("--presets", nargs="*", default=list(PRESETS), choices=list(PRESETS))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    df = synthetic_features(args.rows, args.group, rng)
    cols = [c for c in df.columns if c not in ("id", "group_id")]
    records = [dict(zip(cols, vals)) for vals in zip(*(df[c].tolist() for c in cols))]
    rows = [bench_preset(p, df, records, args.repeat, args.loop_repeat) for p in args.presets]
    print(f"# {platform.machine()} {platform.processor() or ''} python {platform.python_version()}, "
          f"numpy {np.__version__}, pandas {pd.__version__}; rows={args.rows}, group={args.group}")
    head = (f"{'preset':<18}{'rows':>9}{'rubric ms (best)':>18}{'(median)':>10}{'loop ms (best)':>16}{'speedup':>9}"
            f"{'+table ms':>11}{'counterfactual ms':>19}{'NaN totals':>12}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['preset']:<18}{r['rows']:>9}{r['rubric_ms']:>18.2f}{r['rubric_median_ms']:>10.2f}"
              f"{r['loop_ms']:>16.1f}{r['speedup']:>8.0f}x{r['full_ms']:>11.2f}{r['counterfactual_ms']:>19.1f}"
              f"{r['missing']:>12}")


if __name__ == "__main__":
    main()
