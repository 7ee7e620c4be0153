"""``workbench ask``: one question to one method, its turns shown as they happen, saved as a one-trajectory run.

The question takes an evaluation's path (:class:`~workbench.eval.config.EvalConfig`: the method name, ``+lora`` with
``--adapter``, the corpus, ``--retrieval-url``, the faiss ``--index``), is rolled out by the engine, which hands each
turn over as soon as it is appended (``rollout(on_turn=...)``: the policy's turn once generated and parsed, the
observation once its tool answered), and is written as a run of kind ``ask`` (``trajectories.parquet``,
``examples.jsonl``, ``features.parquet``, ``metrics.json``, the completion marker) that the trajectory inspector and
the dashboard open like an eval run. :func:`turn_steps` says what a turn shows: the thought, the query, the passages
found, the answer.

By default the question goes to the trained agent: Search-R1's protocol with the shipped SFT + GRPO adapter
(``search_r1+lora``, :data:`~workbench.eval.adapters.TRAINED_ADAPTER`, the demo's) over the synthetic world,
observations as chat turns (the layout ``workbench train`` and ``sft`` train on).

    >>> run = ask("Who founded Tarnholm Mills?", on_step=print)          # doctest: +SKIP
    >>> Asker().ask("Where is Ulmbridge?", method="search_r1", corpus="wiki.jsonl").trajectory.answer  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.core.trajectory import POLICY, Trajectory, Turn
from workbench.core.types import Hit
from workbench.data.example import Example
from workbench.eval.adapters import TRAINED_ADAPTER
from workbench.eval.config import (  # ASK_FIELDS, DEFAULT_METHOD: re-exported
    ASK_FIELDS,
    CORPUS_SETTINGS,
    DEFAULT_METHOD,
    DEFAULT_MODEL,
    TRAINED,
    EvalConfig,
    EvalEntry,
    protocol_takes,
    with_adapter_settings,
)
from workbench.protocols.base import ANSWER, INVALID, SEARCH
from workbench.rl.train_config import DEFAULT_PROTOCOL_KWARGS
from workbench.rollout.backends.base import Backend
from workbench.storage.runs import Run

if TYPE_CHECKING:
    from workbench.tools.base import Toolbox



#: What a step of a turn is: the policy's reasoning, its query, what the tool found (or its error), its answer, an
#: action that could not be parsed, or an observation that is not a tool's (a format hint).
STEP_KINDS = ("thought", "search", "passages", "error", "answer", "invalid", "observation")


@dataclass
class Step:
    """One thing a turn shows (:data:`STEP_KINDS`)."""

    kind: str
    text: str
    hits: list[Hit] = field(default_factory=list)
    seconds: float | None = None


def _thought(text: str, tags: tuple[str, ...]) -> str:
    """The policy's words before its action: a ``<think>`` block, or the text before the first action tag."""
    low = text.lower()
    start, end = low.find("<think>"), low.find("</think>")
    if start >= 0:
        return text[start + 7: end if end > start else len(text)].strip()
    cuts = [i for i in (low.find(f"<{t}") for t in tags if t != "think") if i >= 0]
    return text[: min(cuts)].strip() if cuts else ""


def turn_steps(turn: Turn, tags: tuple[str, ...] = ("search", "answer")) -> list[Step]:
    """What ``turn`` shows, in order. A policy turn: its thought (``tags``: the protocol's, to find where the action
    starts), then its query, answer or why its action is invalid. An observation: each tool call's hits or error (a
    knowledge-graph call's triples as text), or the observation's text when no tool ran."""
    if turn.kind == POLICY:
        action = turn.action or {}
        steps = [Step("thought", t)] if (t := _thought(turn.text, tags)) else []
        payload = action.get("payload")
        if not isinstance(payload, str):
            import json

            payload = json.dumps(payload, ensure_ascii=False, default=str)
        kind = action.get("kind")
        if kind == SEARCH:
            steps.append(Step("search", payload))
        elif kind == ANSWER:
            steps.append(Step("answer", payload))
        elif kind == INVALID:
            steps.append(Step("invalid", str(action.get("reason") or "no action")))
        return steps
    steps = []
    for call in turn.tool_calls:
        if call.error:
            steps.append(Step("error", f"{call.name} failed: {call.error}", seconds=call.latency_s))
            continue
        hits = call.hits()
        what = (f"{len(hits)} passage(s)" if hits or not call.results else
                "; ".join(f"{t.head} — {t.relation} — {t.tail}" for t in call.triples()) or f"{len(call.results)} result(s)")
        steps.append(Step("passages", what if call.name == "search" else f"{call.name}: {what}", hits, call.latency_s))
    return steps or [Step("observation", turn.text.strip())]


def format_step(step: Step, width: int = 160) -> str:
    """A step as terminal lines: its text (an observation's cut to ``width``), then one line per passage."""
    def cut(s: str, n: int) -> str:
        s = " ".join(str(s).split())
        return s if len(s) <= n else s[: n - 1] + "…"

    label = {"passages": "found", "observation": "shown"}.get(step.kind, step.kind)
    secs = f" ({1000 * step.seconds:.0f} ms)" if step.seconds is not None else ""
    text = cut(step.text, width) if step.kind == "observation" else " ".join(step.text.split())
    lines = [f"  {label:<8} {text}{secs}"]
    for i, h in enumerate(step.hits, 1):
        lines.append(f"           {i}. {cut(h.title, 40)} [{h.score:.3f}] {cut(h.text, width - 60)}")
    return "\n".join(lines)


@dataclass
class Answered:
    """A question asked: the run written, its one trajectory, and the seconds it took (model loading excluded)."""

    run: Run
    trajectory: Trajectory
    seconds: float


def _config(question: str, method: str, options: dict[str, Any]) -> tuple[EvalConfig, str | None]:
    """The question's EvalConfig, and a one-line note of the settings taken from the adapter (None: none)."""
    if not str(question).strip():
        raise ValueError("the question is empty: ask something, e.g. workbench ask \"Who founded Tarnholm Mills?\"")
    unknown = sorted(set(options) - set(ASK_FIELDS))
    if unknown:
        raise TypeError(f"ask: unknown option(s) {unknown}; valid: {', '.join(ASK_FIELDS)}")
    if "," in method:
        raise ValueError(f"--method {method}: ask one method at a time (workbench eval compares several)")
    if (options.get("corpus") or "").strip() in CORPUS_SETTINGS:
        raise ValueError(f"--corpus {options['corpus']}: a question has no paragraphs of its own; pass 'world' or a "
                         "corpus file")
    options = dict(options)
    if options.get("corpus") == "world":
        options["corpus"] = None
    if method.endswith(TRAINED) and not options.get("adapter") and (TRAINED_ADAPTER / "adapter_model.safetensors").exists():
        options["adapter"] = str(TRAINED_ADAPTER)  # the shipped trained adapter
    options, note = with_adapter_settings(method, options, options.get("model") or DEFAULT_MODEL)
    if options.get("protocol_kwargs") is None:  # the layout the adapters were trained on, where the protocol takes it
        base = EvalEntry.parse(method).method.protocol
        options["protocol_kwargs"] = protocol_takes(base, dict(DEFAULT_PROTOCOL_KWARGS))
    return EvalConfig(methods=method, dataset="world", **options), note


class Asker:
    """Answers questions one at a time (a lock), keeping the loaded model and the built tools between them: the
    dashboard's Ask tab holds one for its server. ``backend``: a ready backend to use instead of loading
    ``model`` (tests give a scripted one)."""

    def __init__(self, backend: Backend | None = None):
        self._given = backend
        self._lock = threading.Lock()
        self._backends: dict[tuple, tuple[Backend, str]] = {}
        self._data: dict[tuple, Any] = {}
        self._tools: dict[tuple, tuple[Any, str]] = {}

    @property
    def busy(self) -> bool:
        """Whether a question is being answered now."""
        return self._lock.locked()

    def _backend(self, cfg: EvalConfig, log: Callable[[str], None]) -> Backend:
        if self._given is not None:
            return self._given
        key = (cfg.model, cfg.adapter, cfg.device, cfg.rollout_engine, cfg.batch_mib, cfg.allow_pickle_weights)
        if key not in self._backends:
            from workbench.eval.runner import load_backend

            # said before the load, which takes about a minute on a CPU: a page or a terminal is not silent meanwhile
            log(f"[model] loading {cfg.model}{' and the adapter' if cfg.adapter else ''} (once: later questions "
                f"reuse it; about a minute on a CPU)…")
            t0 = time.perf_counter()
            backend, _, what = load_backend(cfg)
            self._backends = {key: (backend, what)}  # one model in memory at a time
            log(f"[model] {what} ({time.perf_counter() - t0:.1f}s)")
        return self._backends[key][0]

    def _toolbox(self, cfg: EvalConfig, entry: EvalEntry, backend: Backend, log: Callable[[str], None]) -> Toolbox:
        from workbench.eval.runner import load_eval_data, missing_tools
        from workbench.eval.toolboxes import method_toolboxes

        need = tuple(sorted(entry.protocol.required_tools))
        dkey = (cfg.corpus, cfg.index, cfg.kg)
        key = (dkey, need, cfg.retriever, cfg.encoder, cfg.query_prefix, cfg.pooling, cfg.retrieval_url,
               id(backend.tokenizer))
        if key in self._tools:
            return self._tools[key][0]
        t0 = time.perf_counter()
        served, data = None, None
        if cfg.retrieval_url:  # the server answers every tool: no corpus here
            from workbench.tools.remote import check_server

            served = check_server(cfg.retrieval_url, {entry.label: entry.protocol.required_tools})
        else:
            if dkey not in self._data:
                self._data = {dkey: load_eval_data(cfg)}  # one corpus in memory at a time
            data = self._data[dkey]
            why = missing_tools(entry.protocol, data)
            if why:
                raise ValueError(f"method {entry.label!r} cannot run here: " + "; ".join(why))
        toolboxes, built = method_toolboxes([entry.protocol], data, cfg.retriever, backend.tokenizer, served,
                                            cfg.retrieval_url, index=cfg.index, encoder=cfg.dense_encoder())
        self._tools = {k: v for k, v in self._tools.items() if k[0] == dkey}
        self._tools[key] = (toolboxes[need], built)
        log(f"[tools] {built} ({time.perf_counter() - t0:.2f}s)")
        return toolboxes[need]

    def ask(self, question: str, method: str = DEFAULT_METHOD, *, answers: list[str] | None = None,
            on_step: Callable[[Step], None] | None = None, out: str | os.PathLike | None = None,
            log: Callable[[str], None] | None = None, **options: Any) -> Answered:
        """Roll ``question`` out with ``method`` (``on_step`` sees each :class:`Step` as it happens) and write it as a
        run under ``out``. ``answers``: gold answers, if you know them (the run then scores the answer). ``options``:
        :data:`ASK_FIELDS` (the :class:`EvalConfig` fields of the same names)."""
        from workbench.eval.adapters import adapter_state
        from workbench.eval.runner import evaluate, write_eval_run

        say = log or (lambda msg: None)
        cfg, note = _config(question, method, options)
        if note:
            say(f"[adapter] {note}")
        entry = cfg.entries[0]
        with self._lock:
            backend = self._backend(cfg, say)
            toolbox = self._toolbox(cfg, entry, backend, say)
            qid = "ask-" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:10]
            example = Example(qid, question.strip(), list(answers or []), dataset="ask", split="ask")
            tags = tuple(getattr(entry.protocol, "tags", ()) or ("search", "answer"))

            def on_turn(traj: Trajectory, turn: Turn) -> None:
                if on_step is not None:
                    for step in turn_steps(turn, tags):
                        on_step(step)

            rc = cfg.rollout_config(max_turns=1 if not entry.protocol.required_tools else None)
            t0 = time.perf_counter()
            with adapter_state(getattr(backend, "source", getattr(backend, "model", None)), entry.trained):
                result = evaluate(entry, [example], backend, toolbox, rc, progress=False,
                                  meta={"model": cfg.model if self._given is None else getattr(backend, "name", "backend")},
                                  on_turn=on_turn)
            seconds = time.perf_counter() - t0
        run = Run.create(out, kind="ask", name=f"ask-{entry.label}",
                         config={"model": cfg.model if self._given is None else getattr(backend, "name", "backend"),
                                 "dataset": "ask", "question": example.question, "method": entry.label,
                                 "adapter": cfg.adapter if entry.trained else None, "corpus": cfg.corpus or "world",
                                 "retriever": cfg.retriever, "index": cfg.index, "retrieval_url": cfg.retrieval_url,
                                 "eval": cfg.to_dict(), "rollout": rc.to_dict()})
        write_eval_run(run, [result], [example], features=True, timings={"ask_s": seconds})
        return Answered(run, result.trajectories[0], seconds)


def ask(question: str, method: str = DEFAULT_METHOD, **kwargs: Any) -> Answered:
    """One question with a fresh :class:`Asker` (loads the model): :meth:`Asker.ask`'s arguments."""
    return Asker().ask(question, method, **kwargs)
