"""``workbench import verifiers DIR``: the traces of ``vf-eval`` runs of exported methods as one workbench eval run.

What verifiers 0.4.0 writes (``verifiers/v1/utils/trace_store.py``): a run directory ``<output_dir>/<run>/`` with
``traces.jsonl``, one *episode* a line (``{"id", "env", "task", "run", "ok", "errors", "traces": [...]}``), each
trace holding the task's data (``task.data.example``: the workbench ``Example`` the export wrote), the message graph
(``nodes``: ``{"message": {"role", "content"}, "parent", "sampled"}``; ``calls[i].node`` is the node a model call
answered), ``rewards`` (``{name: {"score", "weight"}}``; the episode's reward is ``Σ score·weight``), ``metrics`` and
``info`` (``info.workbench``: the method and corpus the exported harness ran). ``DIR`` is such a run directory or an
``output_dir`` holding several (one per method: each becomes that method's rows).

Each trace's final branch (the leaf of its last model call back to the root) after the protocol's prompt is rebuilt
into a :class:`~workbench.core.trajectory.Trajectory` by the method's protocol (``trajectory_from_text``, the
passages resolved against the export's corpus); its ``reward`` column is verifiers' recorded reward and
``meta["verifiers_rewards"]`` each component. The run (``kind: eval``, ``source: verifiers``) holds what
``workbench eval`` writes: ``trajectories.parquet`` (``method``, ``em``/``cem``/``f1``, ``format_ok``, ``reward``),
``examples.jsonl``, ``features.parquet`` with the method's rubric scored beside it, ``metrics.json``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from workbench.core.trajectory import Trajectory
from workbench.data.example import Example
from workbench.storage.runs import Run
from workbench.util.io import read_jsonl

TRACES = "traces.jsonl"


def run_dirs(d: Path) -> list[Path]:
    """The verifiers run directories at ``d``: ``d`` itself when it holds ``traces.jsonl``, else its children that do."""
    if (d / TRACES).is_file():
        return [d]
    return sorted(p for p in d.iterdir() if (p / TRACES).is_file()) if d.is_dir() else []


def is_episode(row: Any) -> bool:
    """A ``traces.jsonl`` line the import reads: an object with a list of trace objects."""
    return isinstance(row, dict) and isinstance(row.get("traces"), list) and all(
        isinstance(t, dict) for t in row["traces"])


def branch_messages(trace: dict[str, Any]) -> list[dict[str, str]]:
    """The final branch of a trace as ``{"role", "content"}`` text: from the node its last model call answered,
    parent by parent, to the root (a linear chat is all its nodes). Raises ValueError naming what is missing."""
    nodes = trace.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise ValueError("it has no message nodes")
    calls = [c for c in trace.get("calls") or [] if isinstance(c, dict) and isinstance(c.get("node"), int)]
    i: int | None = calls[-1]["node"] if calls else len(nodes) - 1
    out: list[dict[str, str]] = []
    seen = set()
    while i is not None:
        if not 0 <= i < len(nodes) or i in seen or not isinstance(nodes[i], dict):
            raise ValueError(f"its node {i} is not a node of its message graph")
        seen.add(i)
        msg = nodes[i].get("message") or {}
        out.append({"role": str(msg.get("role") or ""), "content": _text(msg.get("content"))})
        parent = nodes[i].get("parent")
        i = parent if isinstance(parent, int) and not isinstance(parent, bool) else None
    return out[::-1]


def _text(content: Any) -> str:
    """A message's content as text (a string, or the text of its parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def trace_reward(trace: dict[str, Any]) -> tuple[float, dict[str, float]]:
    """verifiers' reward of a trace (``Σ score·weight`` over its rewards; NaN without any) and each component's
    score."""
    parts: dict[str, float] = {}
    total = 0.0
    for name, r in (trace.get("rewards") or {}).items():
        if isinstance(r, dict) and isinstance(r.get("score"), (int, float)):
            parts[name] = float(r["score"])
            total += float(r["score"]) * float(r.get("weight", 1.0))
    return (total if parts else math.nan), parts


def _method_of(trace: dict[str, Any], env_id: str, method: str | None) -> str:
    from workbench.integrations.verifiers.export import package_name
    from workbench.methods import METHODS

    info = (trace.get("info") or {}).get("workbench") or {}
    name = method or info.get("method")
    if not name:
        name = next((m for m in METHODS if package_name(m) == env_id.replace("-", "_")), None)
    if not name:
        raise ValueError(f"a trace of env {env_id!r} names no workbench method (not an environment `workbench export "
                         "verifiers` wrote): pass --method")
    return str(name)


def import_verifiers(dir: str | Path, *, method: str | None = None, corpus: str | None = None,
                     out: str | Path | None = None, name: str | None = None, features: bool = True) -> Run:
    """Read the ``vf-eval`` run(s) under ``dir`` into a new workbench eval run; see the module docstring."""
    from workbench.eval.runner import FEATURES_FILE
    from workbench.integrations.verifiers.export import chat_protocol
    from workbench.integrations.verl.reward import corpus_index
    from workbench.methods import get_method
    from workbench.rewards.from_text import trajectory_from_text
    from workbench.rewards.outcomes import score, summarize

    d = Path(dir)
    runs = run_dirs(d)
    if not runs:
        raise FileNotFoundError(f"no verifiers run under {d}: pass the vf-eval run directory (holding {TRACES}) or "
                                "the --output-dir that holds such runs")
    trajs: list[Trajectory] = []
    rewards: list[float] = []
    examples: dict[str, Example] = {}
    notes: list[str] = []
    protocols: dict[str, Any] = {}
    corpora: dict[str, str | None] = {}
    for rd in runs:
        episodes, bad = read_jsonl(rd / TRACES, is_episode)
        if bad:
            notes.append(f"{rd / TRACES}: {bad} unreadable line(s) skipped (not a verifiers episode)")
        for e_i, ep in enumerate(episodes):
            env_id = str((ep.get("env") or {}).get("id") or rd.name)
            for t_i, tr in enumerate(ep["traces"]):
                where = f"{rd / TRACES} line {e_i + 1}, trace {t_i + 1}"
                m = _method_of(tr, env_id, method)
                if m not in protocols:
                    protocols[m] = chat_protocol(get_method(m).name)
                    info = (tr.get("info") or {}).get("workbench") or {}
                    corpora[m] = corpus or info.get("corpus")
                data = ((tr.get("task") or {}).get("data") or {})
                if not isinstance(data.get("example"), dict):
                    raise ValueError(f"{where}: its task carries no workbench example (task.data.example): not a trace "
                                     "of an environment `workbench export verifiers` wrote")
                try:
                    ex = Example.from_dict(data["example"])
                except (KeyError, TypeError, ValueError) as err:  # a hand-edited or foreign file
                    raise ValueError(f"{where}: its task.data.example is not a workbench example "
                                     f"({type(err).__name__}: {err}); export and evaluate again") from None
                try:
                    msgs = branch_messages(tr)
                except ValueError as err:
                    raise ValueError(f"{where}: {err}; is the file a verifiers 0.4.0 traces.jsonl?") from None
                proto = protocols[m]
                n_prompt = len(proto.messages(ex))
                if len(msgs) < n_prompt or [x["role"] for x in msgs[:n_prompt]] != [
                        x["role"] for x in proto.messages(ex)]:
                    raise ValueError(f"{where}: its messages do not start with the {m!r} protocol's prompt; pass "
                                     "--method (the method the environment was exported with)")
                passages = corpus_index(corpora[m]) if corpora[m] else None
                label = f"{m}:{tr.get('id') or f'{e_i}-{t_i}'}"
                t = trajectory_from_text(msgs[n_prompt:], proto, ex, id=label, passages=passages)
                t.prompt_text = "\n".join(x["content"] for x in msgs[:n_prompt])
                t.group_id = f"{m}:{ex.id}"
                total, parts = trace_reward(tr)
                t.meta.update(dataset=ex.dataset, split=ex.split, hops=ex.hops, qtype=ex.qtype, method=m,
                              source="verifiers", verifiers_run=rd.name, verifiers_ok=bool(tr.get("ok")),
                              verifiers_rewards=parts, verifiers_metrics=dict(tr.get("metrics") or {}),
                              verifiers_errors=[str(x.get("message", x))[:300] for x in tr.get("errors") or []
                                                if isinstance(x, dict)])
                trajs.append(t)
                rewards.append(total)
                examples.setdefault(ex.id, ex)
    if not trajs:
        raise ValueError(f"no readable traces in {len(runs)} verifiers run(s) under {d}: each {TRACES} line must be an "
                         "episode object with a \"traces\" list, as vf-eval writes")
    exs = list(examples.values())
    from workbench.rewards.features import compute_features

    feats = compute_features(trajs, exs, encoder=False, cache=False,
                             passages=corpus_index(next(iter(corpora.values()))) if len(set(corpora.values())) == 1
                             and next(iter(corpora.values())) else None)
    rows = score(trajs, exs, feats)
    run = Run.create(out, kind="eval", name=name or "verifiers-" + "-".join(protocols), config={
        "source": "verifiers", "methods": {m: {"protocol": p.config(), "corpus": corpora[m]} for m, p in protocols.items()},
        "verifiers_runs": [str(r) for r in runs], "notes": notes})
    extra: dict[str, list[Any]] = {k: [r[k] for r in rows] for k in ("em", "cem", "cem_strict", "f1")}
    extra["format_ok"] = [None if r["format_ok"] is None or r["format_ok"] != r["format_ok"] else bool(r["format_ok"])
                          for r in rows]
    extra["method"] = [t.meta["method"] for t in trajs]
    extra["reward"] = rewards
    run.write_trajectories(trajs, extra_columns=extra)
    run.write_examples(exs)
    if features:
        from workbench.rewards.features import save_features
        from workbench.rewards.run_rewards import add_rewards

        save_features(run, add_rewards(feats, [get_method(t.meta["method"]).rubric() for t in trajs]), FEATURES_FILE)
    by_method: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        by_method.setdefault(t.meta["method"], []).append(i)
    summaries = {}
    for m, idx in by_method.items():
        s = summarize([rows[i] for i in idx])
        vals = [rewards[i] for i in idx if rewards[i] == rewards[i]]
        s["reward_mean"] = sum(vals) / len(vals) if vals else math.nan
        summaries[m] = s
    run.write_metrics({"source": "verifiers", "methods": summaries, "n_examples": len(exs),
                       "n_trajectories": len(trajs), "notes": notes})
    run.mark_complete(source="verifiers")
    return run


def summary_line(run: Run) -> str:
    """One line naming the run and what it holds, for the command line."""
    m = json.loads((run.path / "metrics.json").read_text(encoding="utf-8"))
    per = ", ".join(f"{k}: reward {v.get('reward_mean', math.nan):.3f}, cem {v.get('cem', math.nan):.3f}"
                    for k, v in m["methods"].items())
    return f"run {run.path}: {m['n_trajectories']} trajectories ({per})" + (
        f"; notes: {'; '.join(m['notes'])}" if m["notes"] else "")
