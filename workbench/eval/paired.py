"""Paired comparisons of eval runs with 95% intervals: the statistics behind every "A vs B" figure in RESULTS.

A *side* of a comparison is one or more eval runs of one method (e.g. an adapter's dev and test evals, and the
same arm trained with another seed). :func:`side_scores` reads a side into one row per question: the metric's mean
over the side's samples and seeds (``v``), the hop count, searches, answered and format-valid shares. Questions are
paired by id; :func:`paired_rows` gives, per hop count and overall, both means with their intervals and the paired
difference B − A with a bootstrap interval over questions.

Intervals: Wilson's score interval for a proportion (every value 0 or 1), else a percentile bootstrap of the mean
(scipy's ``bootstrap``, 10,000 resamples, seed 0). With several seeds a side's value per question is the mean over
seeds, so the difference's interval covers question sampling; :func:`seed_rows` shows the seed-to-seed spread beside
it (each seed's overall mean on each side).

A :class:`Comparison` is a named pair of sides with their per-question values; it saves as JSON
(``comparison.json``: what ``bench/ablate.py`` writes and notebook 05 shows) and loads back without the runs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

#: Columns of :func:`side_scores`: the value, hops, searches, answered and format-valid shares per question.
SCORE_COLUMNS = ("v", "hops", "s", "ans", "fmt")
#: Metrics whose intervals are Wilson's (a share of right answers; :func:`proportion_interval`), not the bootstrap's.
PROPORTION_METRICS = ("cem", "em", "cem_strict", "correct")


class CompareError(ValueError):
    """A comparison that cannot be made: the message names the run, method or question and the fix."""


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion k/n (scipy).

    >>> [round(x, 3) for x in wilson(5, 10)]
    [0.237, 0.763]
    """
    if n == 0:
        return (float("nan"), float("nan"))
    ci = stats.binomtest(int(k), n).proportion_ci(confidence_level=0.95, method="wilson")
    return (float(ci.low), float(ci.high))


def mean_interval(v: np.ndarray, reps: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval (percentile) of the mean of ``v`` (for values that are not proportions)."""
    v = np.asarray(v, float)
    if len(v) == 0:
        return (float("nan"), float("nan"))
    if len(v) == 1 or np.all(v == v[0]):  # every resample is the one value (scipy wants variation)
        return (float(v[0]), float(v[0]))
    ci = stats.bootstrap((v,), np.mean, n_resamples=reps, confidence_level=0.95, method="percentile",
                         rng=np.random.default_rng(seed)).confidence_interval
    return (float(ci.low), float(ci.high))


def proportion_interval(v: np.ndarray) -> tuple[float, float]:
    """Wilson's interval when every value is 0 or 1 (a proportion), else the bootstrap interval of the mean."""
    v = np.asarray(v, float)
    if np.isin(v, (0.0, 1.0)).all():
        return wilson(int(v.sum()), len(v))
    return mean_interval(v)


def paired_interval(a: np.ndarray, b: np.ndarray, reps: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of mean(b − a) over paired questions."""
    return mean_interval(np.asarray(b, float) - np.asarray(a, float), reps, seed)


def _numeric(t: Any) -> bool:
    import pyarrow.types as pt

    return pt.is_floating(t) or pt.is_integer(t) or pt.is_boolean(t)


def _world_leak(df: pd.DataFrame) -> pd.Series:
    from workbench.rewards.metrics import names_leak

    names = world_name_set()
    questions = df["question"] if "question" in df else pd.Series(None, index=df.index, dtype=object)
    return pd.Series([names_leak(a, names, q) for a, q in zip(df["answer"], questions)], index=df.index, dtype=float)


@functools.cache
def world_name_set() -> frozenset[str]:
    """The default synthetic world's entity names and aliases (not its dates and years), normalized; built once."""
    from workbench.data.world import load_world
    from workbench.rewards.metrics import name_set

    return name_set(n for e in load_world().entities.values() if e.type != "value" for n in (e.name, *e.aliases))

#: Metrics computed from a trajectory's columns rather than stored: ``redundant`` is 1 when it searched more often
#: than its question has hops (what DynaSearcher's hop penalty is for), ``extra_searches`` how many more times;
#: ``world_leak`` is 1 when the answer names an entity of the default synthetic world that its question does not
#: (for runs on real questions: a world-trained adapter answering with a name it learned there).
DERIVED_METRICS = {
    "redundant": lambda df: (df["n_searches"] > df["hops"]).astype(float),
    "extra_searches": lambda df: (df["n_searches"] - df["hops"]).clip(lower=0).astype(float),
    "world_leak": _world_leak,
}


def run_scores(run_dir: str | Path, method: str, metric: str = "cem", reward: Any = None) -> pd.DataFrame:
    """One row per question of ``method`` in the eval run ``run_dir`` (:data:`SCORE_COLUMNS`, indexed by
    ``example_id``): the metric's mean over samples. The metric is a column of ``trajectories.parquet``, else of
    ``features.parquet`` (e.g. ``recall`` of the gold passages), or one of :data:`DERIVED_METRICS`. With ``reward``
    (a reward preset's ``Rubric``) the value is its total, computed from the run's ``features.parquet``."""
    import pyarrow.parquet as pq

    from workbench.storage.runs import open_run

    try:
        run = open_run(run_dir)
    except Exception as e:  # noqa: BLE001 - a missing or unreadable run is one line naming it
        raise CompareError(f"{run_dir}: not a readable run ({e}); pass an eval run directory") from None
    path, fpath = run.path / "trajectories.parquet", run.path / "features.parquet"
    if not path.is_file():
        raise CompareError(f"{run_dir} has no trajectories.parquet; pass an eval run directory")
    schema = pq.read_schema(path)
    fschema = pq.read_schema(fpath).names if fpath.is_file() and "id" in schema.names else []
    from_features = reward is not None or (metric not in schema.names and metric in fschema)
    if reward is None and metric not in schema.names and metric not in fschema and metric not in DERIVED_METRICS:
        numeric = [f.name for f in schema if _numeric(f.type) and f.name not in ("sample_idx", "hops")]
        raise CompareError(f"--metric {metric!r} is not a column of {run_dir}'s trajectories or features; one of: "
                           f"{', '.join(numeric + [m for m in DERIVED_METRICS])}, or a features.parquet column")
    if reward is not None and not fschema:
        raise CompareError(f"{run_dir} has no features.parquet, which a reward is computed from; compare "
                           "--metric instead, or evaluate again (workbench eval writes the features)")
    base = ["example_id", "method", "hops", "n_searches", "format_ok", "answer"]
    if metric == "world_leak" and "question" in schema.names:
        base.append("question")
    own = [metric] if metric in schema.names else []
    cols = base + (["id"] if from_features else [c for c in own if c not in base])  # n_searches is read once
    df = pd.read_parquet(path, columns=cols)
    df = df[df["method"] == method]
    if df.empty:
        have = sorted(pd.read_parquet(path, columns=["method"])["method"].unique())
        raise CompareError(f"{run_dir} has no trajectories of method {method!r}; it has: {', '.join(have)}")
    value = metric
    if reward is not None:
        feats = pd.read_parquet(fpath)
        feats = feats[feats["id"].isin(df["id"])].reset_index(drop=True)
        total = pd.Series(np.asarray(reward(feats).total, float), index=feats["id"])
        value = "reward"
        df = df.assign(reward=df["id"].map(total))
    elif from_features:
        feats = pd.read_parquet(fpath, columns=["id", metric]).set_index("id")[metric]
        df = df.assign(**{metric: df["id"].map(feats).astype(float)})
    elif not own:
        df = df.assign(**{metric: DERIVED_METRICS[metric](df)})
    df = df.assign(answered=df["answer"].notna())
    return df.groupby("example_id").agg(v=(value, "mean"), hops=("hops", "first"), s=("n_searches", "mean"),
                                        ans=("answered", "mean"), fmt=("format_ok", "mean"))


def pooled_scores(runs: Sequence[str | Path], method: str, metric: str = "cem", reward: Any = None) -> pd.DataFrame:
    """:func:`run_scores` of several runs of *different* questions (e.g. the dev and the test eval), concatenated;
    a question in two runs is an error (that is a second seed: use :func:`side_scores`)."""
    frames = [run_scores(r, method, metric, reward) for r in runs]
    dup = pd.concat([f.index.to_series() for f in frames]).duplicated()
    if dup.any():
        raise CompareError(f"question {dup.index[dup.to_numpy()][0]!r} is in more than one of "
                           f"{', '.join(map(str, runs))}; pool runs of different splits")
    return pd.concat(frames)


def side_scores(seeds: Sequence[Sequence[str | Path]], method: str, metric: str = "cem",
                reward: Any = None) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """A side with one list of runs per seed (each list pooled over splits): the per-question mean over seeds, and
    each seed's own table. Every seed must cover the same questions."""
    per_seed = [pooled_scores(runs, method, metric, reward) for runs in seeds]
    first = per_seed[0].index
    for runs, df in zip(seeds[1:], per_seed[1:]):
        diff = first.symmetric_difference(df.index)
        if len(diff):
            raise CompareError(f"the runs {', '.join(map(str, runs))} do not cover the same questions as "
                               f"{', '.join(map(str, seeds[0]))} (e.g. {diff[0]!r}); evaluate every seed on the same "
                               "splits and limit")
    per_seed = [df.reindex(first) for df in per_seed]
    return mean_over_seeds(per_seed), per_seed


def mean_over_seeds(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Per question, the mean of each column over seeds' tables of the same questions (the first table's order)."""
    if len(frames) == 1:
        return frames[0]
    out = pd.concat(frames, keys=range(len(frames))).groupby(level=1).mean().reindex(frames[0].index)
    out["hops"] = frames[0]["hops"]
    return out


def align(a: pd.DataFrame, b: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Both sides on the same questions in the same order; questions without a value on a side (a reward whose
    feature is missing there) are dropped from both and returned. Questions in one side only are an error."""
    missing = a.index.symmetric_difference(b.index)
    if len(missing):
        raise CompareError(f"{len(missing)} question(s) are in one run only (e.g. {missing[0]!r}); compare evals "
                           "of the same split and limit")
    b = b.reindex(a.index)
    unscored = a.index[a["v"].isna() | b["v"].isna()]
    return a.drop(unscored), b.drop(unscored), [str(q) for q in unscored]


def hop_groups(hops: pd.Series) -> list[tuple[str, pd.Index]]:
    """``(label, question ids)`` per hop count, then ``("all", every id)``."""
    return [(str(int(h)), hops.index[hops == h]) for h in sorted(hops.dropna().unique())] + [("all", hops.index)]


def paired_summary(va: np.ndarray, vb: np.ndarray, proportion: bool = True) -> dict[str, float]:
    """Two sides' values on the same questions (in the same order): n, A's and B's means with 95% intervals (Wilson
    for a proportion, else bootstrap) and the paired difference B − A with its bootstrap interval (the columns of
    :func:`paired_rows` from ``n`` to ``diff_hi``).

    >>> s = paired_summary(np.array([0.0, 0.0, 1.0, 0.0]), np.array([1.0, 0.0, 1.0, 1.0]))
    >>> s["n"], s["a"], [round(s[k], 2) for k in ("a_lo", "a_hi")], s["diff"], (s["diff_lo"], s["diff_hi"])
    (4, 0.25, [0.05, 0.7], 0.5, (0.0, 1.0))
    """
    va, vb = np.asarray(va, float), np.asarray(vb, float)
    interval = proportion_interval if proportion else mean_interval
    (la, ha), (lb, hb), (lo, hi) = interval(va), interval(vb), paired_interval(va, vb)
    return {"n": len(va), "a": float(va.mean()), "a_lo": la, "a_hi": ha, "b": float(vb.mean()), "b_lo": lb, "b_hi": hb,
            "diff": float(vb.mean() - va.mean()), "diff_lo": lo, "diff_hi": hi}


def paired_rows(a: pd.DataFrame, b: pd.DataFrame, proportion: bool = True) -> pd.DataFrame:
    """Per hop count and overall: n, A's and B's means with 95% intervals (Wilson for a proportion, else bootstrap),
    the paired difference B − A with its bootstrap interval, searches, answered and format-valid shares."""
    rows = []
    for label, ix in hop_groups(a["hops"]):
        va, vb = a.loc[ix, "v"].to_numpy(float), b.loc[ix, "v"].to_numpy(float)
        rows.append({"hops": label, **paired_summary(va, vb, proportion),
                     "searches_a": a.loc[ix, "s"].mean(), "searches_b": b.loc[ix, "s"].mean(),
                     "answered_a": a.loc[ix, "ans"].mean(), "answered_b": b.loc[ix, "ans"].mean(),
                     "format_a": a.loc[ix, "fmt"].mean(), "format_b": b.loc[ix, "fmt"].mean()})
    return pd.DataFrame(rows)


def seed_rows(a_seeds: Sequence[pd.DataFrame], b_seeds: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Each seed's overall mean and searches on each side: the seed-to-seed spread a single-seed comparison
    hides."""
    rows = [{"side": side, "seed": i, "mean": float(df["v"].mean()), "searches": float(df["s"].mean())}
            for side, seeds in (("a", a_seeds), ("b", b_seeds)) for i, df in enumerate(seeds)]
    return pd.DataFrame(rows)


def seed_markdown(seeds: pd.DataFrame, label_a: str, label_b: str) -> str:
    """:func:`seed_rows` as a markdown table: one line per side and seed."""
    lines = ["| side | seed | mean | searches |", "|---|---:|---:|---:|"]
    for r in seeds.to_dict("records"):
        lines.append(f"| {label_a if r['side'] == 'a' else label_b} | {r['seed']} | {r['mean']:.3f} "
                     f"| {r['searches']:.2f} |")
    return "\n".join(lines)


def markdown(rows: pd.DataFrame, label_a: str, label_b: str, metric: str) -> str:
    """:func:`paired_rows` as the markdown table RESULTS uses."""
    lines = [f"| hops | n | {metric} {label_a} [95% CI] | {metric} {label_b} [95% CI] | B − A [95% CI] "
             "| answered A → B | searches A → B | format-valid A → B |", "|---|---:|---|---|---|---|---|---|"]
    for r in rows.to_dict("records"):
        lines.append(f"| {r['hops']} | {r['n']} | {r['a']:.3f} [{r['a_lo']:.2f}, {r['a_hi']:.2f}] "
                     f"| {r['b']:.3f} [{r['b_lo']:.2f}, {r['b_hi']:.2f}] "
                     f"| {r['diff']:+.3f} [{r['diff_lo']:+.2f}, {r['diff_hi']:+.2f}] "
                     f"| {r['answered_a']:.2f} → {r['answered_b']:.2f} | {r['searches_a']:.2f} → "
                     f"{r['searches_b']:.2f} | {r['format_a']:.2f} → {r['format_b']:.2f} |")
    return "\n".join(lines)


@dataclass
class Side:
    """One side of a comparison: its label, the method read from the runs, one list of eval runs per seed, and
    each seed's per-question table (``records``: example_id, v, hops, s, ans, fmt)."""

    label: str
    method: str
    runs: list[list[str]]
    seeds: list[list[dict[str, Any]]] = field(default_factory=list)

    def store(self, per_seed: Sequence[pd.DataFrame]) -> Side:
        """Keep each seed's per-question table (:func:`run_scores`' columns, indexed by ``example_id``)."""
        self.seeds = [df.reset_index().to_dict("records") for df in per_seed]
        return self

    def frames(self) -> list[pd.DataFrame]:
        return [pd.DataFrame(recs).set_index("example_id") for recs in self.seeds]

    def mean(self) -> pd.DataFrame:
        return mean_over_seeds(self.frames())


@dataclass
class Comparison:
    """A named paired comparison (``b`` against ``a``) on one metric, with what it asks, what the paper found and
    how to re-run it; :meth:`rows` recomputes the intervals from the stored per-question values."""

    name: str
    metric: str
    a: Side
    b: Side
    question: str = ""
    paper: str = ""
    command: str = ""
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_runs(cls, name: str, a: Side, b: Side, metric: str = "cem", **kw: Any) -> Comparison:
        """Read both sides' eval runs (every seed) and store their per-question values."""
        means = []
        for side in (a, b):
            mean, per_seed = side_scores(side.runs, side.method, metric)
            side.store(per_seed)
            means.append(mean)
        align(*means)  # the two sides must cover the same questions
        return cls(name=name, metric=metric, a=a, b=b, **kw)

    def rows(self) -> pd.DataFrame:
        a, b, _ = align(self.a.mean(), self.b.mean())
        proportion = self.metric in PROPORTION_METRICS
        return paired_rows(a, b, proportion=proportion)

    def seed_table(self) -> pd.DataFrame:
        return seed_rows(self.a.frames(), self.b.frames())

    def markdown(self) -> str:
        from workbench.eval.compare import METRIC_NAMES

        return markdown(self.rows(), self.a.label, self.b.label, METRIC_NAMES.get(self.metric, self.metric))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1, default=_plain) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Comparison:
        try:
            d = json.loads(Path(path).read_text())
            return cls(**{**d, "a": Side(**d["a"]), "b": Side(**d["b"])})
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise CompareError(f"{path}: not a comparison file ({type(e).__name__}: {e}); write it with "
                               "bench/ablate.py or Comparison.save") from None


def _plain(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(f"{type(v).__name__} is not JSON-serialisable")


def find_comparisons(*roots: str | Path) -> list[tuple[Path, Comparison | str]]:
    """Every ``comparison.json`` under the given folders, loaded (or the one-line error of an unreadable one)."""
    out: list[tuple[Path, Comparison | str]] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for p in sorted(root.rglob("comparison.json")):
            try:
                out.append((p, Comparison.load(p)))
            except CompareError as e:
                out.append((p, str(e)))
    return out
