"""``workbench import verl DIR``: a verl training run's dumps and metrics as a workbench run.

What verl writes (read in verl 0.9.1, ``verl/trainer/ppo/ray_trainer.py``, ``_write_generations``): with
``trainer.rollout_data_dir`` / ``trainer.validation_data_dir`` set, one ``<global_step>.jsonl`` per step, one
JSON object per sample with ``input`` (prompt, decoded with ``skip_special_tokens=True``), ``output``
(response, decoded likewise), ``gts`` (``reward_model.ground_truth``), ``score`` (the summed token-level
reward), ``step``, and every ``reward_extra_info`` key (our exported reward's components) and ``request_id``.
Metrics: ``trainer.logger=['file']`` writes ``{"step": n, "data": {metric: value}}`` lines to
``$VERL_FILE_LOGGER_PATH``; ``'console'`` prints ``step:n - metric:value - ...`` lines (both are read).

The run (``kind: train``, ``source: verl``) holds what an eval/train run holds: ``trajectories.parquet``
(every dumped sample rebuilt from its text by the method's protocol: ``trajectory_from_text``; method
``<m>`` for rollouts, ``<m>:validation`` for validation samples; ``step``, ``reward`` = verl's score and
``em``/``cem``/``f1`` columns), ``steps/<step>.trajectories.parquet``, ``examples.jsonl``, ``features.parquet``
(our features, the method's rubric re-scored beside them), ``metrics.jsonl`` (one row per step: verl's
metrics plus ``reward_mean`` and the answer metrics of the dumps) and ``metrics.json``.
When the dumps sit in an export directory (``workbench export verl``), its parquet rows give each question
its example (id, hops, supporting passages) and ``export.json`` the corpus passage ids resolve against.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

from workbench.data.example import Example
from workbench.storage.runs import Run
from workbench.util.io import read_json, read_jsonl, read_text_bounded

_STEP_FILE = re.compile(r"^(\d+)\.jsonl$")
_CONSOLE = re.compile(r"step:(\d+) - (.*)$")
VALIDATION = "validation"
#: The largest step a run's tables hold (a Parquet int64); verl's steps count from 1.
MAX_STEP = 2**63 - 1


def dump_files(d: Path) -> list[tuple[int, Path]]:
    """``(step, path)`` of verl's ``<step>.jsonl`` dumps in ``d``, by step; a name whose number is past any step
    (``12345678901234567890123456.jsonl``) is an error naming it."""
    out = []
    for p in d.glob("*.jsonl"):
        if m := _STEP_FILE.match(p.name):
            step = int(m.group(1))
            if step > MAX_STEP:
                raise ValueError(f"{p}: step {m.group(1)} is past the largest step a run holds ({MAX_STEP}): not a "
                                 "verl dump (verl names each <global_step>.jsonl); move it out of the folder")
            out.append((step, p))
    return sorted(out)


def _is_answers(v: Any) -> bool:
    return isinstance(v, str) or (isinstance(v, list) and all(isinstance(a, str) for a in v))


def is_sample(row: Any) -> bool:
    """A dump line the import can read: an object with an ``output`` string; ``input`` a string, ``gts`` a string, a
    list of strings or ``{"target": ...}`` of those (our exported ground truth), ``score`` a number, where present.
    Any other line is skipped and counted (a ``gts`` of ``7`` or an object would give the sample no gold answer, a
    ``score`` of ``"abc"`` no reward)."""
    if not isinstance(row, dict) or not isinstance(row.get("output"), str):
        return False
    gts, score = row.get("gts"), row.get("score")
    if isinstance(gts, dict) and set(gts) <= {"target", "ground_truth"}:
        gts = gts.get("target", gts.get("ground_truth"))
    return (row.get("input") is None or isinstance(row["input"], str)) and (gts is None or _is_answers(gts)) and (
        score is None or (isinstance(score, (int, float)) and not isinstance(score, bool)))


def read_dump(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The samples of one dump file (:func:`is_sample`) and the number of unreadable lines (skipped)."""
    return read_jsonl(path, is_sample)


def read_metrics(path: Path, skipped: list[int] | None = None) -> dict[int, dict[str, float]]:
    """``{step: {metric: value}}`` from verl's file logger JSONL, a flat JSONL, or its console log. Lines that are
    neither are skipped; so are rows whose step is not a whole number from 0 to :data:`MAX_STEP`, their line numbers
    appended to ``skipped``."""
    out: dict[int, dict[str, float]] = {}
    for lineno, line in enumerate(read_text_bounded(path, what="verl metrics log").splitlines(), 1):
        line = line.strip()
        row: dict[str, Any] | None = None
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                continue
            if isinstance(obj, dict) and "step" in obj:
                row = {"step": obj["step"], **(obj["data"] if isinstance(obj.get("data"), dict) else obj)}
        elif m := _CONSOLE.search(line):
            row = {"step": m.group(1)}
            for part in m.group(2).split(" - "):
                k, _, v = part.rpartition(":")
                row[k.strip()] = v.strip()
        if row is None:
            continue
        try:
            step = int(float(row.pop("step")))
        except (TypeError, ValueError, OverflowError):  # OverflowError: 1e400, read as infinity
            step = -1
        if not 0 <= step <= MAX_STEP:
            if skipped is not None:
                skipped.append(lineno)
            continue
        for k, v in row.items():
            x = _number(v)
            if k and x is not None:
                out.setdefault(step, {})[k] = x
    return out


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def question_of(prompt_text: str) -> str:
    """The question of a decoded prompt: the text after its last ``Question:`` (our protocols' user prompt)."""
    i = prompt_text.rfind("Question:")
    tail = prompt_text[i + len("Question:"):] if i >= 0 else prompt_text[-500:]
    return tail.strip().split("\n", 1)[0].strip()


def _export_examples(root: Path | None) -> dict[str, Example]:
    """``{question: Example}`` from an export directory's train/val parquet (empty when there is none)."""
    from workbench.integrations.verl.export import example_from_verl

    out: dict[str, Example] = {}
    if root is None:
        return out
    for name in ("train.parquet", "val.parquet"):
        if (root / name).exists():
            import pyarrow.parquet as pq

            for r in pq.read_table(root / name).to_pylist():
                ex = example_from_verl(r.get("extra_info"), (r.get("reward_model") or {}).get("ground_truth"),
                                       r.get("data_source"))
                out.setdefault(ex.question, ex)
    return out


def _example(row: dict[str, Any], known: dict[str, Example]) -> Example:
    from workbench.integrations.verl.export import example_from_verl

    q = question_of(str(row.get("input") or ""))
    if q in known:
        return known[q]
    ex = example_from_verl({"question": q}, row.get("gts"), "verl")
    ex.id = "q" + hashlib.sha1(q.encode("utf-8", "replace")).hexdigest()[:12]  # no id in the dump: one per question
    return ex


def _resolve(dir: Path, validation_dir: str | None, metrics: str | None) -> tuple[Path | None, Path | None, Path | None, Path | None]:
    """``(rollouts, validation, metrics, export_root)`` from DIR: a dump directory or an export directory."""
    rollouts = dir if dump_files(dir) else (dir / "rollouts" if dump_files(dir / "rollouts") else None)
    root = dir if (dir / "export.json").exists() else (dir.parent if (dir.parent / "export.json").exists() else None)
    val = Path(validation_dir) if validation_dir else next(
        (p for p in (dir / VALIDATION, dir.parent / VALIDATION) if p != rollouts and dump_files(p)), None)
    if val is not None and not dump_files(val):
        raise FileNotFoundError(f"--validation-dir {val}: no verl dumps (<step>.jsonl) there")
    if metrics:
        m: Path | None = Path(metrics)
        if not m.exists():
            raise FileNotFoundError(f"--metrics {m}: no such file (verl's console log or its file-logger JSONL)")
    else:
        m = next((p for b in (dir, root) if b is not None for p in (b / "metrics.jsonl", b / "train.log") if p.exists()),
                 None)
    return rollouts, val, m, root


def import_verl(dir: str | Path, method: str, *, validation_dir: str | None = None, metrics: str | None = None,
                out: str | Path | None = None, name: str | None = None, corpus: str | None = None,
                features: bool = True) -> Run:
    """Read verl's dumps under ``dir`` (and its metrics log) into a new workbench run; see the module docstring."""
    from workbench.core.trajectory import save_trajectories
    from workbench.eval.runner import FEATURES_FILE, score, summarize
    from workbench.integrations.verl.reward import corpus_index
    from workbench.methods import get_method
    from workbench.rewards.from_text import trajectory_from_text

    d = Path(dir)
    if not d.is_dir():
        raise FileNotFoundError(f"verl dump directory {d} not found: pass trainer.rollout_data_dir (or the export dir)")
    m = get_method(method)
    proto = m.get_protocol()
    rollouts, val, metrics_path, root = _resolve(d, validation_dir, metrics)
    if rollouts is None and val is None:
        raise ValueError(f"no verl dumps (<step>.jsonl) in {d} or {d / 'rollouts'}: set trainer.rollout_data_dir / "
                         "validation_data_dir in the launch and pass that directory")
    if corpus is None and root is not None:
        manifest = read_json(root / "export.json", 1 << 20, "verl export manifest")
        if not isinstance(manifest, dict):
            raise ValueError(f"{root / 'export.json'}: not a JSON object, so not the manifest `workbench export verl` "
                             "writes; pass --corpus, or write the export again")
        corpus = manifest.get("corpus")
        if corpus is not None and not isinstance(corpus, str):
            raise ValueError(f"{root / 'export.json'}: corpus must be a corpus name or file, got {json.dumps(corpus)[:60]}; "
                             "pass --corpus, or write the export again")
    passages = corpus_index(corpus) if corpus else None
    known = _export_examples(root)
    trajs, examples, notes, steps = [], {}, [], {}
    n_files, n_bad = 0, 0
    for source, folder in (("rollout", rollouts), (VALIDATION, val)):
        for step, path in dump_files(folder) if folder is not None else []:
            rows, bad = read_dump(path)
            n_files, n_bad = n_files + 1, n_bad + bad
            if bad:
                notes.append(f"{path}: {bad} unreadable line(s) skipped (not JSON, or a field of another type than "
                             "verl writes)")
            seen: dict[str, int] = {}
            for i, row in enumerate(rows):
                ex = _example(row, known)
                examples.setdefault(ex.id, ex)
                t = trajectory_from_text(row["output"], proto, ex, id=f"{source}-{step}-{i}", passages=passages)
                t.prompt_text, t.group_id = str(row.get("input") or ""), f"{ex.id}@{source}{step}"
                t.sample_idx = seen[ex.id] = seen.get(ex.id, -1) + 1
                t.meta.update(dataset=ex.dataset, split=ex.split, hops=ex.hops, qtype=ex.qtype, step=step,
                              method=method if source == "rollout" else f"{method}:{VALIDATION}", source=source,
                              verl_score=_number(row.get("score")),
                              verl_reward={k: _number(v) for k, v in row.items() if k not in
                                           ("input", "output", "gts", "score", "step", "request_id")})
                trajs.append(t)
                steps.setdefault((source, step), []).append(t)
    if not trajs:
        raise ValueError(f"no readable samples in the {n_files} verl dump file(s) under {d} ({n_bad} unreadable "
                         "line(s)): each line must be a JSON object with an \"output\" string (input, gts and score "
                         "of the types verl writes), as verl's trainer.rollout_data_dir holds; pass that directory")
    exs = list(examples.values())
    rows = score(trajs, exs)
    skipped: list[int] = []
    logged = read_metrics(metrics_path, skipped) if metrics_path else {}
    if skipped:
        notes.append(f"{metrics_path}: {len(skipped)} row(s) skipped whose step is not a whole number from 0 to "
                     f"{MAX_STEP} (first: line {skipped[0]})")
    run = Run.create(out, kind="train", name=name or f"verl-{m.name}", config={
        "source": "verl", "method": m.name, "protocol": proto.name, "reward": m.reward.name if m.reward else None, "dataset": "verl",
        "rollout_data_dir": str(rollouts) if rollouts else None, "validation_data_dir": str(val) if val else None,
        "metrics_file": str(metrics_path) if metrics_path else None, "corpus": corpus, "notes": notes})
    extra = _columns(trajs, rows)
    run.write_trajectories(trajs, extra_columns=extra)
    (run.path / "steps").mkdir(exist_ok=True)
    for (source, step), ts in sorted(steps.items()):
        idx = [i for i, t in enumerate(trajs) if t.meta["source"] == source and t.meta["step"] == step]
        save_trajectories(ts, run.path / "steps" / f"{step:06d}.{source}.trajectories.parquet",
                          extra_columns={k: [v[i] for i in idx] for k, v in extra.items()})
    run.write_examples(exs)
    _write_step_metrics(run, trajs, rows, logged)
    by_method: dict[str, list[dict[str, Any]]] = {}
    for t, r in zip(trajs, rows):
        by_method.setdefault(t.meta["method"], []).append(r)
    run.write_metrics({"kind": "train", "source": "verl", "steps": len({s for _, s in steps}),
                       "n_trajectories": len(trajs), "methods": {k: summarize(v) for k, v in by_method.items()},
                       "notes": notes})
    if features and trajs:
        from workbench.rewards.features import compute_features, save_features
        from workbench.rewards.run_rewards import add_rewards

        feats = compute_features(trajs, exs, encoder=False, cache=False, passages=passages)
        feats["step"] = [t.meta["step"] for t in trajs]
        save_features(run, add_rewards(feats, [m.rubric()] * len(trajs)), FEATURES_FILE)
    run.mark_complete(source="verl")
    return run


def _columns(trajs: list[Any], rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The typed columns eval and train runs carry: method, step, reward (verl's score), answer metrics, format."""
    out: dict[str, list[Any]] = {k: [r[k] for r in rows] for k in ("em", "cem", "f1")}
    out["format_ok"] = [bool(t.flags.get("format_ok")) for t in trajs]
    out["method"] = [t.meta["method"] for t in trajs]
    out["step"] = [t.meta["step"] for t in trajs]
    out["reward"] = [t.meta["verl_score"] if t.meta["verl_score"] is not None else math.nan for t in trajs]
    return out


def _write_step_metrics(run: Run, trajs: list[Any], rows: list[dict[str, Any]], logged: dict[int, dict[str, float]]) -> None:
    """One ``metrics.jsonl`` row per step: verl's logged metrics, then the dumps' means (rollouts: ``reward_mean``,
    ``em``...; validation: ``eval_reward_mean``, ``eval_em``...)."""
    import numpy as np

    per: dict[int, dict[str, Any]] = {s: dict(v) for s, v in logged.items()}
    for source, prefix in (("rollout", ""), (VALIDATION, "eval_")):
        groups: dict[int, list[int]] = {}
        for i, t in enumerate(trajs):
            if t.meta["source"] == source:
                groups.setdefault(t.meta["step"], []).append(i)
        for step, idx in groups.items():
            row = per.setdefault(step, {})
            scores = np.array([trajs[i].meta["verl_score"] for i in idx if trajs[i].meta["verl_score"] is not None])
            if scores.size:
                row[f"{prefix}reward_mean"], row[f"{prefix}reward_std"] = float(scores.mean()), float(scores.std())
            # the step-row names our trainer logs (searches_mean: the mean of n_searches)
            for k, name in (("em", "em"), ("cem", "cem"), ("f1", "f1"), ("n_searches", "searches_mean")):
                vals = np.array([rows[i][k] for i in idx if rows[i][k] is not None], dtype=np.float64)
                vals = vals[~np.isnan(vals)]
                if vals.size:
                    row[f"{prefix}{name}"] = float(vals.mean())
    for step in sorted(per):
        run.append_step_metrics({"step": step, **per[step]})
