"""Benchmark suites: a paper's table of datasets evaluated in one command, and the table written as the paper has it.

``workbench eval --suite search-r1 --data-dir DIR --method ... --corpus wiki-18.jsonl`` reads the seven QA datasets of
Search-R1's main table (Jin et al., 2025, arXiv:2503.09516, Table 3) from a folder in FlashRAG's dataset layout
(``DIR/<name>/<split>.jsonl``, records with ``question`` and ``golden_answers``), evaluates every method on each with
one model load, and writes one table: a row per method, a column per dataset, the general (NQ, TriviaQA, PopQA) and
multi-hop (HotpotQA, 2Wiki, MuSiQue, Bamboogle) averages and the average over all, each cell the metric's mean with its
question count and 95% interval (Wilson's, over questions). The averages are means of the datasets' means, as the
paper's are, over the datasets the folder had. A dataset the folder lacks is named and skipped. Where a dataset's
records name their supporting facts (HotpotQA, 2Wiki, MuSiQue in their own or FlashRAG's packaging), a second table
gives each method's retrieval recall: the share of those gold passages its searches returned.

The paper's settings are the suite's defaults: exact match (``em``) after SQuAD's answer normalisation, the top 3
passages a search (``top_k`` for every method that takes it), the test split where the dataset has one and dev
otherwise (HotpotQA, 2Wiki and MuSiQue publish no test answers). Any eval flag overrides them.

The table goes to ``<out>/<stamp>-suite-<name>/`` as ``table.md``, ``table.csv``, ``table.tex`` and ``suite.json``
(the cells, the settings, and the eval run of each dataset, which the dashboard and notebooks open as any run).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The groups a suite's datasets are averaged in, in the table's order.
GROUPS = ("general", "multi-hop")


@dataclass(frozen=True)
class SuiteDataset:
    """One dataset of a suite: its FlashRAG folder name, its column label, its group and the splits tried in order."""

    name: str
    label: str
    group: str
    splits: tuple[str, ...] = ("test", "dev")


@dataclass(frozen=True)
class Suite:
    """A paper's table: its datasets, the metric it reports and the eval settings it used."""

    name: str
    title: str
    datasets: tuple[SuiteDataset, ...]
    metric: str = "em"
    defaults: dict[str, Any] = field(default_factory=dict)


SUITES: dict[str, Suite] = {
    "search-r1": Suite(
        "search-r1",
        "Search-R1's seven QA benchmarks (Jin et al., 2025, arXiv:2503.09516, Table 3)",
        (SuiteDataset("nq", "NQ", "general"), SuiteDataset("triviaqa", "TriviaQA", "general"),
         SuiteDataset("popqa", "PopQA", "general"), SuiteDataset("hotpotqa", "HotpotQA", "multi-hop", ("dev", "test")),
         SuiteDataset("2wikimultihopqa", "2Wiki", "multi-hop", ("dev", "test")),
         SuiteDataset("musique", "MuSiQue", "multi-hop", ("dev", "test")),
         SuiteDataset("bamboogle", "Bamboogle", "multi-hop")),
        metric="em",
        defaults={"protocol_kwargs": {"top_k": 3}}),
}


def get_suite(name: str) -> Suite:
    if name not in SUITES:
        raise ValueError(f"--suite {name!r}: no such suite; one of: {', '.join(SUITES)}")
    return SUITES[name]


def find_files(suite: Suite, data_dir: str | os.PathLike, split: str | None = None
               ) -> tuple[list[tuple[SuiteDataset, Path]], list[tuple[SuiteDataset, str]]]:
    """The suite's datasets found in ``data_dir`` (FlashRAG's ``<name>/<split>.jsonl``; ``split`` forces one) and
    those missing, each with what was looked for."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise ValueError(f"--data-dir {data_dir}: not a directory (give a folder in FlashRAG's layout: "
                         f"<dataset>/<split>.jsonl, e.g. {suite.datasets[0].name}/test.jsonl)")
    found, missing = [], []
    for d in suite.datasets:
        splits = (split,) if split else d.splits
        paths = [root / d.name / f"{s}.jsonl" for s in splits]
        hit = next((p for p in paths if p.is_file()), None)
        if hit is None:
            missing.append((d, " or ".join(str(p.relative_to(root)) for p in paths)))
        else:
            found.append((d, hit))
    if not found:
        raise ValueError(f"--data-dir {root}: none of the suite {suite.name!r}'s datasets is there (looked for "
                         + "; ".join(w for _, w in missing) + ")")
    return found, missing


def _cell(values: Any) -> dict[str, Any]:
    import numpy as np

    from workbench.eval.paired import proportion_interval

    v = np.asarray(values, float)
    lo, hi = proportion_interval(v)
    return {"mean": float(v.mean()), "n": int(len(v)), "lo": lo, "hi": hi}


def _recall(run: str | os.PathLike, method: str) -> dict[str, Any]:
    """The share of the gold passages (a dataset's supporting facts) the method's searches returned, over the
    questions that have them (``features.parquet``'s ``recall``); None where no question has them."""
    import math

    from workbench.eval.paired import CompareError, run_scores

    try:
        v = run_scores(run, method, "recall")["v"]
    except CompareError:  # a run without features
        return {"recall": None, "recall_n": 0}
    v = v[[not math.isnan(x) for x in v]]
    return {"recall": float(v.mean()) if len(v) else None, "recall_n": int(len(v))}


def suite_table(suite: Suite, runs: dict[str, str | os.PathLike], methods: Sequence[str],
                metric: str | None = None) -> dict[str, Any]:
    """The table of a suite's eval runs (``runs``: dataset name -> its eval run): per method, a cell per dataset (mean,
    n, 95% interval over questions) and the groups' and overall averages (means of the dataset means)."""
    from workbench.eval.paired import run_scores

    metric = metric or suite.metric
    order = [d for d in suite.datasets if d.name in runs]
    rows = {}
    for m in methods:
        cells: dict[str, Any] = {}
        for d in order:
            scores = run_scores(runs[d.name], m, metric)
            cells[d.name] = {**_cell(scores["v"]), **_recall(runs[d.name], m)}
        avgs = {}
        for g in (*GROUPS, "all"):
            means = [cells[d.name]["mean"] for d in order if g in ("all", d.group)]
            avgs[g] = sum(means) / len(means) if means else None
        rows[m] = {"cells": cells, "averages": avgs}
    sizes = {g: [sum(d.group == g for d in order), sum(d.group == g for d in suite.datasets)] for g in GROUPS}
    return {"suite": suite.name, "title": suite.title, "metric": metric,
            "datasets": [{"name": d.name, "label": d.label, "group": d.group} for d in order], "rows": rows,
            "group_sizes": sizes}


def _fmt(x: float | None, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _headers(table: dict[str, Any]) -> list[str]:
    groups = [g for g in GROUPS if any(d["group"] == g for d in table["datasets"])]
    return ["method", *[d["label"] for d in table["datasets"]], *[f"{g} avg" for g in groups], "avg"]


def _row_values(table: dict[str, Any], method: str, cell: Callable[[dict[str, Any]], str]) -> list[str]:
    row = table["rows"][method]
    groups = [g for g in GROUPS if any(d["group"] == g for d in table["datasets"])]
    return [method, *[cell(row["cells"][d["name"]]) for d in table["datasets"]],
            *[_fmt(row["averages"][g]) for g in groups], _fmt(row["averages"]["all"])]


def to_markdown(table: dict[str, Any], missing: Sequence[str] = (), settings: str = "") -> str:
    heads = _headers(table)
    lines = [f"**{table['title']}**: {table['metric']}, each cell the mean with its 95% interval over its n questions; "
             "the averages are means of the datasets' means.", ""]
    if settings:
        lines += [settings, ""]
    lines += ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] + ["---:"] * (len(heads) - 1)) + "|"]
    for m in table["rows"]:
        lines.append("| " + " | ".join(_row_values(
            table, m, lambda c: f"{c['mean']:.3f} [{c['lo']:.2f}, {c['hi']:.2f}] (n={c['n']})")) + " |")
    with_recall = [d for d in table["datasets"] if any(r["cells"][d["name"]].get("recall") is not None
                                                          for r in table["rows"].values())]
    if with_recall:
        lines += ["", "Retrieval recall: the share of each question's gold passages (its supporting facts) that the "
                  "method's searches returned, over the questions that name them.", "",
                  "| method | " + " | ".join(d["label"] for d in with_recall) + " |",
                  "|" + "|".join(["---"] + ["---:"] * len(with_recall)) + "|"]
        for m, row in table["rows"].items():
            cells = [row["cells"][d["name"]] for d in with_recall]
            lines.append(f"| {m} | " + " | ".join(f"{_fmt(c.get('recall'))} (n={c.get('recall_n', 0)})" for c in cells)
                         + " |")
    if missing:
        short = [f"the {g} average is over {have} of its {want} datasets"
                 for g, (have, want) in table.get("group_sizes", {}).items() if 0 < have < want]
        lines += ["", "Not in the folder, so not in the table: " + "; ".join(missing) + "."
                  + (f" So {' and '.join(short)}, not the paper's." if short else "")]
    return "\n".join(lines) + "\n"


def to_csv(table: dict[str, Any]) -> str:
    """One row per method and dataset (mean, n, interval), then one per average: a long table any tool reads."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["method", "dataset", "group", table["metric"], "n", "ci_low", "ci_high", "recall", "recall_n"])
    for m, row in table["rows"].items():
        for d in table["datasets"]:
            c = row["cells"][d["name"]]
            rec = "" if c.get("recall") is None else f"{c['recall']:.6f}"
            w.writerow([m, d["name"], d["group"], f"{c['mean']:.6f}", c["n"], f"{c['lo']:.6f}", f"{c['hi']:.6f}", rec,
                        c.get("recall_n", 0)])
        for g, v in row["averages"].items():
            if v is not None:
                w.writerow([m, f"{g} average", g if g != "all" else "", f"{v:.6f}", "", "", "", "", ""])
    return buf.getvalue()


_TEX = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
        "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    """``s`` as LaTeX text: its special characters escaped (a method or dataset name such as ``search_r1+lora``)."""
    return "".join(_TEX.get(ch, ch) for ch in s)


def to_latex(table: dict[str, Any]) -> str:
    """A ``tabular`` (booktabs) as papers print it: the mean per cell, its interval in small type under it."""
    heads = _headers(table)
    lines = [r"% " + _tex(table["title"]) + f"; {table['metric']}, 95% intervals over questions",
             r"\begin{tabular}{l" + "c" * (len(heads) - 1) + "}", r"\toprule",
             " & ".join(_tex(h) for h in heads) + r" \\", r"\midrule"]
    for m in table["rows"]:
        vals = _row_values(table, m, lambda c: f"{c['mean']:.3f}" + r"\,{\tiny[" + f"{c['lo']:.2f}, {c['hi']:.2f}" + "]}")
        lines.append(" & ".join([_tex(vals[0]), *vals[1:]]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def settings_line(run_dir: str | os.PathLike) -> str:
    """What the suite's first eval run was made with: model, adapter, corpus and retriever, top-k, budgets."""
    from workbench.storage.runs import open_run

    c = open_run(run_dir).config
    e = c.get("eval", {})
    parts = [f"model `{c.get('model')}`", f"adapter `{e['adapter']}`" if e.get("adapter") else "no adapter",
             f"corpus {c.get('corpus')} ({c.get('n_passages')} passages, {c.get('retriever')})",
             f"protocol arguments {e.get('protocol_kwargs') or {}}", f"{e.get('max_turns')} turns of "
             f"{e.get('max_new_tokens')} tokens", f"temperature {e.get('temperature')}, {e.get('group_size')} sample(s)"]
    return "Settings: " + "; ".join(parts) + "."


def run_suite(suite_name: str, data_dir: str | os.PathLike, methods: str | Sequence[str], model: str, *,
              out: str | os.PathLike | None = None, split: str | None = None, progress: bool = True,
              log: Callable[[str], None] | None = print, **options: Any) -> tuple[Path, dict[str, Any]]:
    """Evaluate ``methods`` on each of the suite's datasets found in ``data_dir`` (one eval run each, one model
    load), then write the table; returns its folder and the table. ``options``: ``run_eval``'s (the suite's own
    defaults under them)."""
    from workbench.eval.runner import run_eval
    from workbench.util.io import atomic_write_json, atomic_write_text
    from workbench.util.paths import runs_dir

    suite = get_suite(suite_name)
    found, missing = find_files(suite, data_dir, split)
    say = log or (lambda _m: None)
    for d, where in missing:
        say(f"[suite] {d.label}: not in {data_dir} (looked for {where}); skipped")
    opts = dict(options)
    for k, v in suite.defaults.items():
        if isinstance(v, dict):
            opts[k] = {**v, **(opts.get(k) or {})}
        else:
            opts.setdefault(k, v)
    labels = [m.strip() for m in (methods.split(",") if isinstance(methods, str) else methods) if m.strip()]
    loaded: dict[tuple[Any, ...], Any] = {}
    runs: dict[str, Path] = {}
    for i, (d, path) in enumerate(found, 1):
        say(f"[suite] {d.label} ({i} of {len(found)}): {path}")
        run = run_eval(labels, path, model, out=out, name=f"{d.name}-suite-{suite.name}", progress=progress, log=log,
                       loaded=loaded, split=path.stem, **opts)
        runs[d.name] = run.path
    table = suite_table(suite, runs, labels)
    root = Path(out) if out is not None else runs_dir()
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = root / f"{stamp}-suite-{suite.name}"
    folder.mkdir(parents=True, exist_ok=False)
    gone = [f"{d.label} ({w})" for d, w in missing]
    settings = settings_line(next(iter(runs.values())))
    atomic_write_text(folder / "table.md", to_markdown(table, gone, settings))
    atomic_write_text(folder / "table.csv", to_csv(table))
    atomic_write_text(folder / "table.tex", to_latex(table))
    atomic_write_json(folder / "suite.json", {**table, "settings": settings, "missing": gone, "data_dir": str(data_dir),
                                              "runs": {k: str(v) for k, v in runs.items()}})
    return folder, table
