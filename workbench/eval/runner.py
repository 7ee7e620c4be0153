"""Evaluation: roll out methods on examples, score the answers, summarize, write a run.

Two levels:

- :func:`evaluate` rolls out one method on given examples with a given backend and toolbox
  and returns the trajectories, one metric row per trajectory and a summary (overall and per
  hop count); :func:`write_eval_run` writes results into a run directory.
- :func:`run_eval` is the whole evaluation from names: load the dataset (the synthetic world
  or a benchmark file) and its corpus, build each method's tools, load the model, evaluate
  every method, write the run (trajectories, examples, config, ``metrics.json``,
  ``features.parquet``). ``workbench eval`` and ``workbench demo`` call it; so do notebooks.

``metrics.json`` of an eval run::

    {"methods": {method: {n, em, cem, cem_strict, f1, multi_option, demo_leak, n_searches, tokens, seconds,
                          tool_seconds, valid_actions, answered, format_ok, wall_seconds,
                          wall_seconds_per_answer, tool_share, by_hops: {hops: {n, em, cem, f1, ...}}}},
     "n_examples", "n_trajectories", "rollout_seconds", "tool_seconds", "tool_share", "timings"}

``seconds`` and ``tokens`` are means over trajectories (per answer): ``seconds`` is each trajectory's own
time, its generation calls (until its sequence finished) plus its observations and tools, as the engine
records it per turn; ``wall_seconds_per_answer`` is the method's wall time divided by the answers (the
throughput view: batched answers share the time). ``tool_share`` is the share of the rollout wall time
spent inside tools (search, KG, plans).

``cem_strict`` is cover-EM without the answers that name more than one option of a choice question
(``multi_option``: "Forbidden Ground or Free Guy" covers the gold "Free Guy"); ``demo_leak`` is the share
of answers that copy an answer shown in the prompt (a demonstration's, the instruction's example) which no
gold contains (:func:`workbench.rewards.metrics.demo_leak`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workbench.core.trajectory import Trajectory
from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.eval.config import DEFAULT_MODEL, EvalConfig, EvalEntry, with_adapter_settings
from workbench.protocols.base import Protocol
from workbench.rewards.outcomes import MEAN_KEYS, OUTCOME_KEYS, score, summarize  # noqa: F401 (re-exported)
from workbench.rl.trackers import report_run
from workbench.rollout.backends.base import Backend
from workbench.rollout.engine import RolloutConfig, rollout
from workbench.storage.runs import Run, run_label
from workbench.tools.base import Toolbox

#: Columns of the printed summary table, in display order, with their labels. ``s/answer`` is the method's wall time
#: divided by its answers (what an answer costs; a method row only); ``latency s`` is each answer's own time from
#: its first generation call to its end, which for answers generated together in a batch overlaps.
SUMMARY_COLUMNS = {
    "n": "n",
    "em": "EM",
    "cem": "cover-EM",
    "cem_strict": "cover-EM strict",
    "f1": "F1",
    "n_searches": "searches",
    "tokens": "tokens/answer",
    "wall_seconds_per_answer": "s/answer",
    "seconds": "latency s",
    "format_ok": "format-valid",
    "valid_actions": "valid actions",
    "answered": "answered",
    "demo_leak": "demo leak",
}
#: Per-method figures that have no per-hop value (the method's wall time is shared by its hop levels).
METHOD_KEYS = ("wall_seconds_per_answer", "tool_share")
FEATURES_FILE = "features.parquet"



@dataclass
class EvalResult:
    method: str
    trajectories: list[Trajectory]
    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)
    rubric: Any = None
    """The method's reward rubric (scored beside its rows in ``features.parquet``); None: no reward."""
    features: pd.DataFrame | None = None
    """The trajectories' features (no embeddings): the rows' answer outcomes were read from them, and
    ``features.parquet`` is written from them."""

    @property
    def tool_seconds(self) -> float:
        """Seconds spent inside tools, summed over the trajectories."""
        return float(sum(t.tool_latency_s for t in self.trajectories))


def evaluate(
    method: str | EvalEntry | Protocol,
    examples: list[Example],
    backend: Backend,
    toolbox: Toolbox | Callable[[Example], Toolbox] | None = None,
    config: RolloutConfig | None = None,
    progress: bool = True,
    meta: dict[str, Any] | None = None,
    protocol_kwargs: dict[str, Any] | None = None,
    on_turn: Callable[[Trajectory, Any], None] | None = None,
) -> EvalResult:
    """Roll out ``method`` (an :class:`EvalEntry`, a method name, or a bare Protocol) on ``examples`` and score it.

    ``toolbox`` is one Toolbox for all questions, or a function ``example -> Toolbox`` giving each
    question its own tools (``--corpus per-question``); then each question is rolled out on its own.
    ``protocol_kwargs`` go over a method name's declared protocol arguments (:meth:`EvalEntry.parse`).
    ``on_turn(trajectory, turn)`` sees each turn as it is appended (:func:`~workbench.rollout.engine.rollout`).
    """
    if isinstance(method, Protocol):
        label, protocol, rubric = method.name, method, None
    else:
        entry = method if isinstance(method, EvalEntry) else EvalEntry.parse(method, protocol_kwargs)
        label, protocol, rubric = entry.label, entry.protocol, entry.rubric
    factory = toolbox if toolbox is not None and not isinstance(toolbox, Toolbox) else None
    if factory is not None:
        toolbox = factory(examples[0]) if examples else Toolbox()
    toolbox = toolbox or Toolbox()
    missing = [t for t in protocol.required_tools if t not in toolbox]
    if missing:
        raise ValueError(
            f"method {label!r} needs tools {missing} but the toolbox has {toolbox.names()}; "
            "register them with Toolbox.register(name, fn)"
        )
    cfg = config or RolloutConfig()
    t0 = time.perf_counter()
    tmeta = {"method": label, **(meta or {})}
    if factory is None:
        trajs = rollout(examples, protocol, toolbox, backend, cfg, progress=progress, meta=tmeta, on_turn=on_turn)
    else:  # per-question tools: one rollout per question (the engine shares one toolbox per batch)
        from tqdm.auto import tqdm

        trajs = [t for ex in tqdm(examples, desc=label, disable=not progress)
                 for t in rollout([ex], protocol, factory(ex), backend, cfg, progress=False, meta=tmeta,
                                  on_turn=on_turn)]
    for t in trajs:  # one run holds several methods: ids and groups are per method
        t.id, t.group_id = f"{label}:{t.id}", f"{label}:{t.group_id}"
    secs = time.perf_counter() - t0
    from workbench.rewards.features import compute_features

    feats = compute_features(trajs, examples, encoder=False, cache=False)  # once: the tables and the rewards read it
    rows = score(trajs, examples, feats)
    summary = summarize(rows)
    summary["wall_seconds"] = secs
    summary["wall_seconds_per_answer"] = secs / len(trajs) if trajs else float("nan")
    summary["tool_share"] = sum(t.tool_latency_s for t in trajs) / secs if secs > 0 else 0.0
    return EvalResult(label, trajs, rows, summary, secs, {"protocol": protocol.config(), "rollout": cfg.to_dict()},
                      rubric, feats)


def write_eval_run(
    run: Run, results: list[EvalResult], examples: list[Example], features: bool = True,
    timings: dict[str, float] | None = None, extra_metrics: dict[str, Any] | None = None,
) -> Run:
    """Write trajectories (all methods in one table, with their metric columns), examples, with ``features``
    the reward features table (``features.parquet``, no embeddings; each method's rubric scored beside its
    rows) that the reward playground and the dashboard read, then ``metrics.json`` (with ``extra_metrics``)
    and last the run's completion marker. Each file is written once."""
    trajs = [t for r in results for t in r.trajectories]
    rows = [row for r in results for row in r.rows]
    extra = {k: [row[k] for row in rows] for k in ("em", "cem", "cem_strict", "f1")}
    for k in ("format_ok", "demo_leak"):  # flags: bool columns (NULL for a failed trajectory), as training writes them
        extra[k] = [None if row[k] is None or row[k] != row[k] else bool(row[k]) for row in rows]
    extra["method"] = [t.meta.get("method", t.protocol) for t in trajs]
    run.write_trajectories(trajs, extra_columns=extra)
    run.write_examples(examples)
    run.update_config(methods={r.method: r.config for r in results})
    timings = dict(timings or {})
    if features:
        from workbench.rewards.features import compute_features, save_features
        from workbench.rewards.run_rewards import add_rewards

        t0 = time.perf_counter()
        parts = [r.features if r.features is not None else compute_features(r.trajectories, examples, encoder=False,
                                                                             cache=False) for r in results]
        feats = pd.concat(parts, ignore_index=True) if parts else compute_features([], examples, encoder=False)
        save_features(run, add_rewards(feats, [r.rubric for r in results for _ in r.trajectories]), FEATURES_FILE)
        timings["features_s"] = time.perf_counter() - t0
    rollout_s = sum(r.seconds for r in results)
    tool_s = sum(r.tool_seconds for r in results)
    metrics: dict[str, Any] = {
        "methods": {r.method: r.summary for r in results},
        "n_examples": len(examples),
        "n_trajectories": len(trajs),
        "rollout_seconds": rollout_s,
        "tool_seconds": tool_s,
        "tool_share": tool_s / rollout_s if rollout_s > 0 else 0.0,
        **({"timings": timings} if timings else {}),
        **(extra_metrics or {}),
    }
    run.write_metrics(metrics)
    run.mark_complete()
    return run


# --------------------------------------------------------------------------- tables


def _summaries(results_or_metrics: Any) -> dict[str, dict[str, Any]]:
    """``{method: summary}`` from a list of EvalResult, a metrics dict, or a Run."""
    if isinstance(results_or_metrics, Run):
        results_or_metrics = results_or_metrics.metrics()
    if isinstance(results_or_metrics, dict):
        return dict(results_or_metrics.get("methods") or {})
    return {r.method: r.summary for r in results_or_metrics}


def metrics_table(results_or_metrics: Any, by_hops: bool = False) -> pd.DataFrame:
    """The summary as a DataFrame: one row per method (index ``method``), or with ``by_hops`` one row
    per method and hop count (index ``method, hops``). Columns: n and the means of ``MEAN_KEYS``."""
    records = []
    for method, s in _summaries(results_or_metrics).items():
        if by_hops:
            for h, hs in (s.get("by_hops") or {}).items():
                records.append({"method": method, "hops": int(h), **{k: hs.get(k) for k in ("n", *MEAN_KEYS)}})
        else:
            records.append({"method": method, **{k: s.get(k) for k in ("n", *MEAN_KEYS, *METHOD_KEYS)}})
    index = ["method", "hops"] if by_hops else ["method"]
    cols = index + ["n", *MEAN_KEYS] + ([] if by_hops else list(METHOD_KEYS))
    df = pd.DataFrame(records, columns=cols)
    df["n"] = df["n"].astype("Int64")
    return df.set_index(index)


def format_table(results_or_metrics: Any, by_hops: bool = False) -> str:
    """A plain-text metrics table: one row per method (or per method and hop count)."""
    df = metrics_table(results_or_metrics, by_hops=by_hops)
    first = ["method", "hops"] if by_hops else ["method"]
    head = first + list(SUMMARY_COLUMNS.values())
    fmt = {"em": ".3f", "cem": ".3f", "cem_strict": ".3f", "f1": ".3f", "n_searches": ".2f", "tokens": ".1f",
           "seconds": ".2f", "wall_seconds_per_answer": ".2f", "format_ok": ".2f", "valid_actions": ".2f", "answered": ".2f", "demo_leak": ".2f"}
    body = []
    for key, row in df.iterrows():
        keys = [str(k) for k in (key if isinstance(key, tuple) else (key,))]
        body.append(keys + [str(row["n"])] + [_fmt(row.get(k), fmt[k]) for k in list(SUMMARY_COLUMNS)[1:]])
    widths = [max(len(x) for x in col) for col in zip(head, *body)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < len(first) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and np.isnan(v)) else format(float(v), spec)


def flat_metrics(metrics: dict[str, Any] | Run) -> dict[str, Any]:
    """Flat numbers of an eval run's ``metrics.json`` for notebooks and regressions:
    ``n_trajectories``, ``tool_share`` and ``<method>.<metric>`` for n, em, cem, cem_strict, f1, searches,
    tokens, format_ok, answered, demo_leak."""
    if isinstance(metrics, Run):
        metrics = metrics.metrics()
    out: dict[str, Any] = {"n_trajectories": metrics.get("n_trajectories"), "tool_share": metrics.get("tool_share")}
    for method, s in (metrics.get("methods") or {}).items():
        for k in ("n", "em", "cem", "cem_strict", "f1", "n_searches", "tokens", "format_ok", "answered", "demo_leak"):
            out[f"{method}.{k}"] = s.get(k)
    return out


# --------------------------------------------------------------------------- run_eval


@dataclass
class EvalData:
    """What an evaluation runs on: questions, the passages to search (if any), the world (if any)."""

    examples: list[Example]
    passages: list[Passage] | None
    world: Any = None
    dataset: str = "world"
    corpus: str = "world"
    """Where the passages come from: ``world``, ``contexts`` (the dataset's own paragraphs) or a file."""
    info: dict[str, Any] = field(default_factory=dict)
    setting: str = "world"
    """``world``, ``pooled``, ``per-question`` or ``file`` (:func:`~workbench.eval.config.corpus_setting`)."""
    kg: Any = None
    """A KnowledgeGraph read from ``--kg`` files (None: the world's graph, if any)."""

    def question_passages(self, example: Example) -> list[Passage]:
        """The passages ``example`` searches in the per-question setting: its own paragraphs."""
        from workbench.data.loaders import corpus_from_contexts

        return corpus_from_contexts([example], fill_supporting=False)


def load_eval_data(cfg: EvalConfig) -> EvalData:
    """The questions, corpus and knowledge graph of ``cfg``: the world's split, or a benchmark file.

    A benchmark file's corpus follows ``cfg.corpus`` (:func:`~workbench.eval.config.corpus_setting`):
    a corpus file; ``pooled`` (default): one corpus from the context paragraphs of all its questions
    (so the first ``limit`` questions are searched among the paragraphs of the whole file);
    ``per-question``: each question only its own paragraphs (``passages`` then holds the pooled
    paragraphs, for counting). Each question's ``supporting_ids`` point into the context corpus.
    ``cfg.kg`` files are read into ``kg`` and each question's entities linked to it
    (``meta["kg_entities"]``).
    """
    from workbench.data.loaders import corpus_from_contexts, load_corpus, load_dataset
    from workbench.eval.config import corpus_setting

    setting = corpus_setting(cfg)
    passages = None
    if setting == "file":  # a faiss index's corpus is read on demand (the index's rows point into it)
        from workbench.data.jsonl_corpus import open_corpus

        passages = open_corpus(cfg.corpus) if cfg.index else load_corpus(cfg.corpus)
    if str(cfg.dataset).lower() == "world":
        from workbench.data.world import load_world

        if setting == "per-question":
            raise ValueError("--corpus per-question needs a benchmark file whose questions carry their own "
                             "paragraphs (HotpotQA, 2Wiki, MuSiQue, IRCoT); the world has one shared corpus")
        world = load_world()
        examples = world.split(cfg.split or "dev")
        data = EvalData(examples, passages if passages is not None else list(world.passages), world, "world",
                        str(cfg.corpus) if setting == "file" else "world", {"world": world.fingerprint()},
                        setting="file" if setting == "file" else "world")
    else:
        examples = load_dataset(cfg.dataset, split=cfg.split, format=cfg.format)
        if not examples:
            raise ValueError(f"dataset {cfg.dataset!r} has no questions")
        if passages is None:
            built = corpus_from_contexts(examples)
            data = EvalData(examples, built or None, None, examples[0].dataset, "contexts", setting=setting)
        else:
            data = EvalData(examples, passages, None, examples[0].dataset, str(cfg.corpus), setting=setting)
    if not data.examples:
        raise ValueError(f"no questions in split {cfg.split!r} of {cfg.dataset!r}")
    data.examples = data.examples[: cfg.limit] if cfg.limit else data.examples
    if data.setting == "per-question":
        from workbench.data.corpora import check_own_paragraphs

        check_own_paragraphs(data.examples)
        sizes = [len(e.meta["contexts"]) for e in data.examples]
        data.info["passages_per_question"] = sum(sizes) / len(sizes)
    if cfg.kg:
        from workbench.tools.kg.files import load_kg
        from workbench.tools.kg.linking import link_examples

        data.kg = load_kg(cfg.kg)
        data.info["kg"] = {"files": list(cfg.kg), **{k: data.kg.stats.get(k) for k in (
            "source", "entities", "relations", "triples", "labels", "files_by_role")}}
        data.info["kg"]["linked_share"] = link_examples(data.examples, data.kg)
    return data


def missing_tools(protocol: Protocol, data: EvalData) -> list[str]:
    """Why each tool ``protocol`` needs cannot be built from ``data`` (empty: all available)."""
    from workbench.tools.toolbox import ToolContext, unavailable_tools

    ctx = ToolContext(world=data.world, corpus=data.passages, kg=data.kg)
    out = []
    for tool, needs in unavailable_tools(protocol, ctx):
        if tool == "kg":
            out.append(f"the 'kg' tool needs {needs}: pass --kg FILE... (Wikidata5M, CoDEx or FB15k-237 triples "
                       f"with their label files), or use --dataset world; dataset {data.dataset!r} has none")
        elif needs.startswith("a passage corpus"):
            out.append(f"the {tool!r} tool needs {needs}, and dataset {data.dataset!r} has no context "
                       "paragraphs to build one from: pass a FlashRAG corpus (--corpus FILE)")
        else:
            out.append(f"the {tool!r} tool needs {needs}")
    return out


def _say(log: Callable[[str], None] | None, msg: str) -> None:
    if log is not None:
        log(msg)


def _print(msg: str) -> None:
    print(msg, flush=True)


def load_backend(cfg: EvalConfig) -> tuple[Backend, str, str]:
    """``(backend, rollout engine, what was loaded)``: ``cfg.model`` with ``cfg.adapter`` attached (for the ``+lora``
    entries) in the rollout engine ``cfg.rollout_engine`` chooses."""
    from workbench.core.models import load_policy
    from workbench.rollout.backends import make_backend
    from workbench.rollout.backends.quant import choose_engine

    policy, tokenizer = load_policy(cfg.model, device=cfg.device, allow_pickle=cfg.allow_pickle_weights or None)
    n_params = sum(p.numel() for p in policy.parameters()) / 1e6
    what = f"{cfg.model} ({n_params:.1f}M parameters"
    if cfg.adapter:
        from workbench.eval.adapters import attach_adapter, resolve_adapter

        policy = attach_adapter(policy, cfg.adapter)
        what += f", LoRA adapter {resolve_adapter(cfg.adapter)} for the +lora methods"
    engine, why = choose_engine(cfg.rollout_engine, policy)
    backend = make_backend("hf", policy, tokenizer=tokenizer, engine=engine,
                           batch_bytes=cfg.batch_mib << 20 if cfg.batch_mib else None)
    return backend, engine, what + f", {backend.device}; rollout engine {engine}: {why})"


def run_eval(
    methods: str | Sequence[str] = ("direct", "search_r1"),
    dataset: str | os.PathLike = "world",
    model: str | Backend = DEFAULT_MODEL,
    *,
    out: str | os.PathLike | None = None,
    name: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = _print,
    loaded: dict[tuple[Any, ...], tuple[Backend, str, str]] | None = None,
    **options: Any,
) -> Run:
    """Evaluate ``methods`` on ``dataset`` with ``model`` and write an eval run; returns the Run.

    Args:
        methods: protocol name(s), a list or one comma-separated string.
        dataset: ``world``, a dataset name, or a benchmark file path (see ``EvalConfig.dataset``).
        model: a model alias / path, or a ready :class:`Backend` (e.g. a ``ScriptedBackend`` in tests,
            an ``OpenAIBackend`` for a server).
        out: the runs root the run directory is created in (default ``runs/``).
        name: label in the run id (default ``<dataset>-<methods>``).
        progress: tqdm progress bars during rollouts.
        log: where phase messages go (default print; None = quiet).
        loaded: models loaded by earlier calls, by what loads them (model, adapter, engine, device...): a call
            that needs one of them takes it instead of loading it again (a suite's datasets share one model).
        **options: the other :class:`~workbench.eval.config.EvalConfig` fields: ``limit``, ``split``,
            ``retriever``, ``corpus``, ``group_size``, ``temperature``, ``max_turns``,
            ``max_new_tokens``, ``seed``, ``device``, ``skip_unavailable``.

    Every input is checked (methods, files, tools each method needs) before the model loads.
    """
    backend = model if isinstance(model, Backend) else None
    model_name = getattr(backend, "name", "backend") if backend is not None else str(model)
    options, note = with_adapter_settings(methods, options, None if backend is not None else model_name)
    cfg = EvalConfig(methods=methods, dataset=str(dataset), model=model_name, **options)
    if note:
        _say(log, f"[adapter] {note}")
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    data = load_eval_data(cfg)
    timings["data_s"] = time.perf_counter() - t0
    where = f"world {data.info['world']}" if data.world is not None else f"{data.dataset} ({cfg.dataset})"
    _say(log, f"[data] {where}: {len(data.examples)} questions, {len(data.passages or [])} passages "
              f"(corpus: {data.corpus}, {data.setting}) ({timings['data_s']:.1f}s)")
    if data.kg is not None:
        k = data.info["kg"]
        _say(log, f"[kg] {data.kg!r} from {', '.join(cfg.kg or [])}; entities linked in "
                  f"{100 * k['linked_share']:.0f}% of the questions")

    runnable = []
    for e in cfg.entries:
        why = missing_tools(e.protocol, data)
        if not why:
            runnable.append(e)
            continue
        msg = f"method {e.label!r} cannot run on {data.dataset!r}: " + "; ".join(why)
        if not cfg.skip_unavailable:
            raise ValueError(msg + " (drop it from the methods, or skip such methods with --skip-unavailable)")
        _say(log, f"[skip] {msg}")
    if not runnable:
        raise ValueError(f"none of the methods {', '.join(cfg.methods)} can run on {data.dataset!r}")
    labels = [e.label for e in runnable]
    name = name or f"{data.dataset}-{'-'.join(labels)}"
    run_label(name)  # a name no run folder can take fails now, not after the evaluation

    served = None
    if cfg.retrieval_url:  # the tools call a running serve-retrieval: checked before the model loads
        from workbench.tools.remote import check_server

        served = check_server(cfg.retrieval_url, {e.label: e.protocol.required_tools for e in runnable})

    t0 = time.perf_counter()
    engine = None
    if backend is None:
        key = (cfg.model, cfg.adapter, cfg.rollout_engine, cfg.device, cfg.batch_mib, cfg.allow_pickle_weights)
        if loaded is not None and key in loaded:
            backend, engine, what = loaded[key]
            what += ", loaded for an earlier dataset"
        else:
            backend, engine, what = load_backend(cfg)
            if loaded is not None:
                loaded[key] = (backend, engine, what)
    else:
        what = f"{model_name} (given backend)"
    timings["model_s"] = time.perf_counter() - t0
    _say(log, f"[model] {what} ({timings['model_s']:.1f}s)")

    from workbench.eval.adapters import adapter_state
    from workbench.eval.toolboxes import method_toolboxes

    t0 = time.perf_counter()
    toolboxes, built = method_toolboxes([e.protocol for e in runnable], data, cfg.retriever, backend.tokenizer, served,
                                        cfg.retrieval_url, index=cfg.index, encoder=cfg.dense_encoder())
    timings["index_s"] = time.perf_counter() - t0
    _say(log, f"[tools] {built} ({timings['index_s']:.2f}s)")

    _say(log, f"[eval] {len(data.examples)} questions x {cfg.group_size} rollout(s): {', '.join(labels)}")
    results = []
    for e in runnable:
        rc = cfg.rollout_config(max_turns=1 if not e.protocol.required_tools else None)
        tb = toolboxes[tuple(sorted(e.protocol.required_tools))]
        with adapter_state(getattr(backend, "source", getattr(backend, "model", None)), e.trained):
            results.append(evaluate(e, data.examples, backend, tb, rc, progress=progress, meta={"model": model_name}))
        _say(log, f"       {e.label}: {results[-1].seconds:.1f}s")
    timings["eval_s"] = sum(r.seconds for r in results)

    run = None
    try:  # a full disk: the scores computed are not lost in a traceback (RunNotSaved keeps them)
        run = Run.create(out, kind="eval", name=name, config={
            "model": model_name, "dataset": data.dataset, "dataset_path": None if data.world else str(cfg.dataset),
            "split": cfg.split or data.examples[0].split, "limit": cfg.limit, "seed": cfg.seed,
            **data.info, "retriever": cfg.retriever, "corpus": data.corpus, "corpus_setting": data.setting,
            "n_passages": len(data.passages or []),
            **({"retrieval_server": {"url": cfg.retrieval_url, **{k: served.get(k) for k in ("passages", "retriever")}}}
               if served is not None else {}),
            "eval": cfg.to_dict(), "rollout": cfg.rollout_config().to_dict(), "rollout_engine": engine})
        write_eval_run(run, results, data.examples, features=True, timings=timings)
        write_card(run, {e.label: e.protocol for e in runnable}, len(data.examples))
    except OSError as e:
        raise RunNotSaved(e, run, out, results) from None
    report_run(run, cfg.report_to, say=log)  # a copy for the --report-to trackers, read from the run's files
    return run


def write_card(run: Run, protocols: dict[str, Protocol], n_questions: int) -> None:
    """The run's eval card (:mod:`workbench.eval.card`): its settings, with hashes of the files it read."""
    from workbench.eval.card import CARD_FILE, build_card
    from workbench.util.gitinfo import code_version
    from workbench.util.io import atomic_write_json

    atomic_write_json(run.path / CARD_FILE, build_card(run.config, protocols, code_version(), n_questions=n_questions))


class RunNotSaved(OSError):
    """An evaluation that finished but whose run could not be written (a full disk, a folder gone): one line saying
    why, where, and what the run folder holds; ``results`` keeps what was computed, so a caller can still show the
    scores (``workbench eval`` prints its table before the error)."""

    def __init__(self, error: OSError, run: Run | None, root: str | os.PathLike | None, results: list[EvalResult]):
        why = f"{error.strerror or error} writing {error.filename or 'the run'}"
        if run is None:
            left = f"no run folder could be made under {root or 'runs/'}"
        else:
            try:
                files = sorted(p.name for p in run.path.iterdir() if not p.name.startswith("."))
            except OSError:  # the folder itself went
                files = []
            left = f"{run.path} holds only {', '.join(files) or 'nothing'} and stays incomplete"
        super().__init__(f"{why}: the evaluation finished, but its results were not saved ({left}); free space "
                         "there, or pass --out on another disk, and run it again")
        self.results = results


def tool_share(run: Run | dict[str, Any]) -> float:
    """Share of rollout wall time spent inside tools, from an eval run's metrics."""
    metrics = run.metrics() if isinstance(run, Run) else run
    return float(metrics.get("tool_share", 0.0))


def run_dir_hint(run: Run) -> str:
    """How to look at a run: the notebooks and the dashboard."""
    return (f"run written to {run.path}\n"
            f"look at it: `make lab` and open notebooks/01_trajectory_inspector.ipynb with run_dir = {str(run.path)!r}; "
            f"`workbench dashboard --runs {Path(run.path).parent}` for all runs")
