"""What happened in a training run, in one place (``workbench report RUN``, notebook 05, the dashboard).

Start against end, from the files the run already wrote: behaviour by hop count in its first and last steps'
rollouts (searches, answered, format-valid, out of turns: ``steps/<n>.trajectories.parquet``), the held-out
questions its greedy evaluations fixed and broke (``eval/<step>.trajectories.parquet``, first against last), the
reward components that moved (first against last quarter of ``metrics.jsonl``), the health alarms and their steps
(``health.jsonl``), the validation rounds and the kept checkpoint, and the held-out question that changed most,
written as a side-by-side page (``report/changed_most.html``) for the inspector's view of both transcripts.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: behaviour columns per hop count (:func:`behaviour`)
BEHAVIOUR = ("n", "searches", "answered", "format_ok", "out_of_turns")


def behaviour(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per hop count (``"all"`` too) of one step's trajectory records (``workbench.rl.health.run_step_records``):
    how many, searches per trajectory, answered share, format-valid share, out-of-turns share."""
    from workbench.rl.health import OUT_OF_TURNS

    groups: dict[str, list[Mapping[str, Any]]] = {"all": list(records)}
    for r in records:
        h = r.get("hops")
        if h is not None and math.isfinite(float(h)):
            groups.setdefault(str(int(h)), []).append(r)
    out = {}
    for key in sorted(groups, key=lambda k: (k == "all", k)):
        rs = groups[key]
        n = len(rs)
        fmt = [r["format_ok"] for r in rs if r.get("format_ok") is not None]
        out[key] = {"n": n, "searches": sum(r["searches"] for r in rs) / n,
                    "answered": sum(bool(r["answered"]) for r in rs) / n,
                    "format_ok": sum(map(bool, fmt)) / len(fmt) if fmt else float("nan"),
                    "out_of_turns": sum(r["finish_reason"] in OUT_OF_TURNS and not r["answered"] for r in rs) / n}
    return out


def _eval_rows(run: Any, folder: str) -> tuple[int, int, list[dict[str, Any]], list[dict[str, Any]]] | None:
    """The first and last greedy evaluation of ``<run>/<folder>/`` scored per question: (step, step, rows, rows)."""
    from workbench.core.trajectory import load_trajectories
    from workbench.rewards.outcomes import score

    d = run.path / folder
    files = sorted(d.glob("*.trajectories.parquet")) if d.is_dir() else []
    if len(files) < 2:
        return None
    examples = run.examples() if run.exists("examples.jsonl") else []
    first, last = files[0], files[-1]
    return (int(first.name.split(".")[0]), int(last.name.split(".")[0]),
            score(load_trajectories(first), examples), score(load_trajectories(last), examples))


def _changes(before: list[dict[str, Any]], after: list[dict[str, Any]], metric: str = "cem") -> dict[str, Any]:
    """Questions fixed (wrong -> right), broken (right -> wrong), per-hop means, and the one whose F1 moved most."""
    b = {r["example_id"]: r for r in before}
    a = {r["example_id"]: r for r in after}
    common = [q for q in a if q in b]

    def right(r: Mapping[str, Any]) -> bool:
        v = r.get(metric)
        return v is not None and v == v and v >= 0.5

    fixed = [q for q in common if not right(b[q]) and right(a[q])]
    broken = [q for q in common if right(b[q]) and not right(a[q])]

    def f1(r: Mapping[str, Any]) -> float:
        v = r.get("f1")
        return 0.0 if v is None or v != v else float(v)

    most = max(common, key=lambda q: (abs(f1(a[q]) - f1(b[q])), q), default=None)
    by_hops: dict[str, dict[str, float]] = {}
    for q in common:
        h = a[q].get("hops")
        for key in ("all", str(h) if h is not None else None):
            if key is None:
                continue
            cell = by_hops.setdefault(key, {"n": 0, "before": 0.0, "after": 0.0})
            cell["n"] += 1
            cell["before"] += float(right(b[q]))
            cell["after"] += float(right(a[q]))
    for cell in by_hops.values():
        cell["before"] /= cell["n"]
        cell["after"] /= cell["n"]
    return {"n": len(common), "fixed": fixed, "broken": broken, "by_hops": by_hops, "changed_most": most}


def run_report(run_dir: str | os.PathLike, write_html: bool = True) -> dict[str, Any]:
    """The report of one training run as a dict (what :func:`format_report` prints); with ``write_html``, the
    question that changed most is written side by side to ``<run>/report/changed_most.html``."""
    from workbench.rl.health import read_health, run_step_records
    from workbench.storage.runs import open_run

    run = open_run(run_dir)
    rows = run.step_metrics()
    train = [r for r in rows if "reward_mean" in r]
    if not train:
        raise ValueError(f"{run.path}: no training steps in metrics.jsonl (is it a training run? an eval run's "
                         "tables are in notebook 05 and the dashboard)")
    report: dict[str, Any] = {"run": str(run.path), "steps": len(train), "status": run.status.state,
                              "config": {k: run.config.get(k) for k in ("method", "preset", "reward", "protocol",
                                                                         "steps", "seed", "init_adapter")}}
    steps = run_step_records(run.path)
    if steps:
        first, last = min(steps), max(steps)
        report["behaviour"] = {"first_step": first, "last_step": last, "first": behaviour(steps[first]),
                               "last": behaviour(steps[last])}
    k = max(1, len(train) // 4)
    comps = sorted({key for r in train for key in r if key.startswith("reward_") and key.endswith("_mean")})
    moved = {}
    for key in comps:
        head = [r[key] for r in train[:k] if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        tail = [r[key] for r in train[-k:] if isinstance(r.get(key), (int, float)) and r[key] == r[key]]
        if head and tail:
            moved[key[: -len("_mean")]] = {"first": sum(head) / len(head), "last": sum(tail) / len(tail)}
    report["rewards"] = dict(sorted(moved.items(), key=lambda kv: -abs(kv[1]["last"] - kv[1]["first"])))
    report["alarms"] = [a for h in read_health(run.path) for a in h.get("fired", [])]
    report["validation"] = [{k: r[k] for k in r if k == "step" or k.startswith("val_")} for r in rows if "val_n" in r]
    metrics = run.metrics() if run.exists("metrics.json") else {}
    report["best"] = metrics.get("best")
    report["stopped_by_alarm"] = metrics.get("stopped_by_alarm")
    held = _eval_rows(run, "eval")
    if held is not None:
        s0, s1, before, after = held
        report["held_out"] = {"first_step": s0, "last_step": s1, **_changes(before, after)}
        most = report["held_out"]["changed_most"]
        if most is not None and write_html:
            report["held_out"]["changed_most_html"] = str(_write_changed(run, s0, s1, most))
    return report


def _write_changed(run: Any, s0: int, s1: int, example_id: str) -> Path:
    """Both transcripts of one held-out question (first and last evaluation) side by side, as the inspector draws
    them (``widgets.trajectory.turns_html``), in ``<run>/report/changed_most.html``."""
    import html

    from widgets.trajectory import turns_html
    from workbench.core.trajectory import load_trajectories
    from workbench.util.io import atomic_write_text

    examples = {e.id: e for e in (run.examples() if run.exists("examples.jsonl") else [])}
    cols = []
    for step in (s0, s1):
        t = next(t for t in load_trajectories(run.path / "eval" / f"{step:06d}.trajectories.parquet")
                 if t.example_id == example_id)
        cols.append(f"<div style='flex:1;min-width:0'><h3>step {step}</h3>"
                    f"{turns_html(t, example=examples.get(example_id))}</div>")
    q = examples.get(example_id)
    title = html.escape(q.question if q is not None else example_id)
    page = (f"<!doctype html><meta charset='utf-8'><title>{title}</title><h2>{title}</h2>"
            f"<p>held-out question {html.escape(example_id)} of {html.escape(str(run.path))}: the first and the last "
            f"greedy evaluation</p><div style='display:flex;gap:1em'>{''.join(cols)}</div>")
    out = run.path / "report" / "changed_most.html"
    out.parent.mkdir(exist_ok=True)
    atomic_write_text(out, page)
    return out


def _f(v: Any) -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else f"{v:.2f}" if isinstance(v, float) else str(v)


def format_report(r: Mapping[str, Any]) -> str:
    """The report as plain text (``workbench report``)."""
    c = r["config"]
    lines = [f"run {r['run']} ({r['status']}): {r['steps']} steps of {c.get('preset')} / {c.get('reward')} / "
             f"{c.get('protocol')}, seed {c.get('seed')}" + (f", from {c['init_adapter']}" if c.get("init_adapter")
                                                              else "")]
    b = r.get("behaviour")
    if b:
        lines.append(f"\nbehaviour by hop count, step {b['first_step']} -> step {b['last_step']} (training rollouts):")
        lines.append(f"  {'hops':>5} {'n':>4}  " + "  ".join(f"{k:>19}" for k in BEHAVIOUR[1:]))
        for key in b["last"]:
            f0, f1 = b["first"].get(key, {}), b["last"][key]
            cells = [f"{_f(f0.get(k)):>8} -> {_f(f1.get(k)):<8}" for k in BEHAVIOUR[1:]]
            lines.append(f"  {key:>5} {f1['n']:>4}  " + "  ".join(cells))
    h = r.get("held_out")
    if h:
        lines.append(f"\nheld-out (greedy), step {h['first_step']} -> step {h['last_step']}, {h['n']} questions: "
                     f"{len(h['fixed'])} fixed, {len(h['broken'])} broken")
        for key, cell in h["by_hops"].items():
            lines.append(f"  {key:>5}-hop cover-EM {cell['before']:.3f} -> {cell['after']:.3f} (n={cell['n']})"
                         if key != "all" else f"    all cover-EM {cell['before']:.3f} -> {cell['after']:.3f} "
                                              f"(n={cell['n']})")
        if h.get("changed_most"):
            lines.append(f"  changed most: {h['changed_most']}" +
                         (f" (both transcripts: {h['changed_most_html']})" if h.get("changed_most_html") else ""))
    if r.get("rewards"):
        lines.append("\nreward components, first -> last quarter of the steps (most moved first):")
        for name, m in r["rewards"].items():
            lines.append(f"  {name:<24} {m['first']:+.3f} -> {m['last']:+.3f}")
    lines.append(f"\nalarms: {len(r['alarms'])}" + ("" if r["alarms"] else " (none fired)"))
    for a in r["alarms"]:
        lines.append(f"  step {a['step']}: {a['name']}: {a['text']}")
    if r.get("stopped_by_alarm"):
        lines.append(f"  the run stopped at step {r['stopped_by_alarm']['step']} (--stop-on-alarm)")
    if r.get("validation"):
        lines.append("\nvalidation rounds: " + ", ".join(
            f"step {v['step']} cem {_f(v.get('val_cem'))}" for v in r["validation"]))
    if r.get("best"):
        lines.append(f"kept adapter: checkpoints/best = step {r['best']['step']} ({r['best']['why']})")
    return "\n".join(lines)
