"""Scoring completion *text* with a Rubric: what the scale-out trainers' reward functions run.

TRL's reward functions (:func:`workbench.integrations.trl.to_trl`) and verl's ``compute_score``
(:func:`workbench.integrations.verl.reward.to_verl`) are thin adapters over :class:`TextScorer`.

It works from completion *text*: :func:`trajectory_from_text` splits a completion into the
policy turns and the observations the environment appended, parses each turn with the
protocol (``Protocol.parse_in_context``, as the rollout engine does), replays the protocol's
``act`` with no tools (for what the protocol records about an action itself, e.g. the NL-DAG
validation behind ``dag_valid``), rebuilds the search results from the rendered
observations and asks the protocol for its format flags. The
rebuilt :class:`~workbench.core.trajectory.Trajectory` then goes through the same
``compute_features`` and the same :class:`~workbench.rewards.rubric.Rubric` as stored
trajectories: the arithmetic exists once.

What text cannot carry by itself: passage ids and the untruncated passage text. Pass the corpus
(``passages=``: a list of passages or a :class:`PassageIndex`) and each rendered passage is resolved
back to its corpus record (by title, then by its text), so ``recall_id`` and the embedding recall see
the same passages as on stored trajectories; without it ``recall_id`` is NaN and ``recall`` uses titles
and embeddings of the rendered, possibly truncated, text. Observations delivered as chat turns inside a
flat string cannot be told apart from policy text: pass TRL's conversational message lists instead
(every non-assistant role is an observation; an assistant message is split at inline observations).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from workbench.core.trajectory import OBSERVATION, POLICY, Trajectory, Turn
from workbench.core.types import Passage, ToolCall
from workbench.data.example import Example
from workbench.protocols.base import ANSWER, INVALID, SEARCH, Action, Protocol
from workbench.rewards.features import as_example, compute_features
from workbench.rewards.rubric import RewardTable, Rubric
from workbench.tools.base import Toolbox

log = logging.getLogger(__name__)

#: Tags that wrap environment output in some protocol.
OBSERVATION_TAGS = ("information", "result", "observation", "tool_response", "documents")

Completion = str | Sequence[Mapping[str, Any]]
#: What :func:`~workbench.data.example.as_example` reads a question's gold from: an ``Example``, a dataset row, or the
#: gold answers themselves.
ExampleLike = Example | Mapping[str, Any] | str | Sequence[str]


# ============================================================================= text → trajectory


def _obs_tags(protocol: Protocol) -> tuple[str, ...]:
    return tuple(t for t in OBSERVATION_TAGS if t in tuple(protocol.tags)) or OBSERVATION_TAGS


#: Turns whose parse gives the usual invalid-action reasons, to see how a protocol's message varies with them.
_PROBE_TURNS = ("no action here", "<search> </search>", "<search> x", "<answer> </answer>",
                '<search> {"query": "x" "y"} </search>', "<search> {broken </search>", "<search> [] </search>")


def _invalid_re(protocol: Protocol) -> re.Pattern[str] | None:
    """A pattern for the protocol's invalid-action message.

    Some protocols quote the reason in it (for some reasons only), so the message is rendered
    for the reasons the protocol's own parser gives on typical invalid turns; the pattern is
    their common prefix, anything short, and their common suffix.
    """
    reasons = {"", "QQ reason QQ"}
    for turn in _PROBE_TURNS:
        try:
            action = protocol.parse(turn)
        except Exception:  # parse is not meant to raise
            continue
        if action.kind == INVALID:
            reasons.add(action.reason)
    msgs = []
    for reason in sorted(reasons):
        try:
            msg = protocol.invalid_observation(Action(INVALID, reason=reason)).text.strip()
        except Exception:  # a protocol that cannot render it here: rely on tagged observations only
            continue
        if msg:
            msgs.append(msg)
    if not msgs:
        return None
    if len(set(msgs)) == 1:
        return re.compile(re.escape(msgs[0]))
    head = os.path.commonprefix(msgs)
    tail = os.path.commonprefix([m[len(head) :][::-1] for m in msgs])[::-1]
    return re.compile(re.escape(head) + r".{0,600}?" + re.escape(tail), re.DOTALL)


def split_turns(text: str, protocol: Protocol) -> list[tuple[str, str]]:
    """``[(kind, text), ...]`` with kind ``policy`` / ``observation``, as the engine appended them inline.

    A policy turn ends at the protocol's first stop string (or at the invalid-action message
    the engine appended after a turn without an action); an observation is the tagged block
    (``<information>...</information>`` etc.) or the invalid-action message that follows.
    An observation at the very start is one too for retrieve-first protocols (those with an
    ``initial_observation``). Text after the first answer is ignored (the engine stops there).
    """
    stops = [s for s in protocol.stop if s]
    tags = _obs_tags(protocol)
    open_re = re.compile(r"\s*<\s*(" + "|".join(map(re.escape, tags)) + r")\s*>", re.IGNORECASE)
    invalid = _invalid_re(protocol)
    out: list[tuple[str, str]] = []
    pos, n = 0, len(text)

    def observation_at(at: int) -> int:
        """End of the observation starting at ``at`` (after whitespace), or -1."""
        m = open_re.match(text, at)
        if m:
            close = re.compile(rf"<\s*/\s*{re.escape(m.group(1))}\s*>", re.IGNORECASE).search(text, m.end())
            return _skip_space(text, n if close is None else close.end())
        if invalid is not None:
            start = _skip_space(text, at)
            m = invalid.match(text, start)
            if m:
                return _skip_space(text, m.end())
        return -1

    env_first = type(protocol).initial_observation is not Protocol.initial_observation
    end = observation_at(0) if env_first else -1
    if end != -1:
        out.append((OBSERVATION, text[:end]))
        pos = end
    while pos < n:
        ends = [i + len(s) for s in stops if (i := text.find(s, pos)) != -1]
        stop_end = min(ends) if ends else -1
        inv = invalid.search(text, pos) if invalid is not None else None
        if inv is not None and (stop_end == -1 or inv.start() < stop_end):
            out.append((POLICY, text[pos : inv.start()]))
            end = _skip_space(text, inv.end())
            out.append((OBSERVATION, text[inv.start() : end]))
            pos = end
            continue
        if stop_end == -1:
            out.append((POLICY, text[pos:]))
            break
        out.append((POLICY, text[pos:stop_end]))
        if protocol.parse(text[pos:stop_end]).kind == ANSWER:
            break
        pos = stop_end
        end = observation_at(pos)
        if end != -1:
            out.append((OBSERVATION, text[pos:end]))
            pos = end
    if out and out[-1][0] == POLICY and not out[-1][1].strip():
        out.pop()  # trailing whitespace after the last observation
    return out


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


_HIT_START_RE = re.compile(r"(?:Doc\s+\d+\s*)?\(Title:\s*|Result\s+\d+:\s*Title:\s*", re.IGNORECASE)
#: Section headers that end the last passage of a block (DynaSearcher's KG part, Shi & Shen's node headers).
_SECTION_RE = re.compile(r"\n(?=Knowledge graph:|Documents:|Node \S+ \()")


def parse_passages(observation: str) -> list[dict[str, Any]]:
    """Hits rendered by ``render_passages`` (``Doc 1(Title: t) text``, ``(Title: t) text``,
    ``Result 1: Title: t Abstract: text``) back into dicts with ``title`` and ``text`` (no ids).

    >>> [h["title"] for h in parse_passages("<information>Doc 1(Title: Avatar (2009 film)) A film.\\nDoc 2(Title: Pandora) A moon.</information>")]
    ['Avatar (2009 film)', 'Pandora']
    """
    body = re.sub(r"<\s*/?\s*(" + "|".join(OBSERVATION_TAGS) + r")\s*>", "\n", observation, flags=re.IGNORECASE)
    starts = list(_HIT_START_RE.finditer(body))
    hits = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(body)
        chunk = _SECTION_RE.split(body[m.end() : end], maxsplit=1)[0]
        if m.group(0).lower().lstrip().startswith("result"):
            title, _, text = chunk.partition(" Abstract:")
        else:
            title, text = _balanced_title(chunk)
        hits.append({"id": "", "title": title.strip(), "text": text.strip(), "score": 0.0, "source": ""})
    return hits


def _balanced_title(chunk: str) -> tuple[str, str]:
    """Split ``t) text`` at the ``)`` that closes ``(Title:`` (titles may contain parentheses)."""
    depth = 0
    for i, ch in enumerate(chunk):
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                return chunk[:i], chunk[i + 1 :]
            depth -= 1
    return chunk, ""


def _norm_title(t: str) -> str:
    return " ".join(str(t).split()).casefold()


def _norm_text(t: str) -> str:
    return " ".join(str(t).split()).rstrip("…").rstrip()


class PassageIndex(Mapping[str, Passage]):
    """The corpus as ``id → Passage`` (what ``compute_features(passages=...)`` takes), plus
    :meth:`resolve`: a passage parsed from observation text → its corpus record.

    >>> idx = PassageIndex([Passage("p1", "Oslo", "Capital of Norway."), Passage("p2", "Oslo", "A 1990 film.")])
    >>> idx.resolve({"title": "Oslo", "text": "A 1990 film."})["id"]
    'p2'
    >>> idx.resolve({"title": "Bergen", "text": "x"}) is None
    True
    """

    def __init__(self, passages: Sequence[Passage] | Mapping[str, Passage]):
        items = passages.values() if isinstance(passages, Mapping) else passages
        self._by_id = {str(p.id): p for p in items}
        self._by_title: dict[str, list[Passage]] = {}
        for p in self._by_id.values():
            self._by_title.setdefault(_norm_title(p.title), []).append(p)

    def __getitem__(self, pid: str) -> Passage:
        return self._by_id[pid]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_id)

    def __len__(self) -> int:
        return len(self._by_id)

    def resolve(self, hit: Mapping[str, Any]) -> dict[str, Any] | None:
        """The corpus record (as a hit dict) a rendered passage came from, or None when not unique.

        Rendering cleans the text and may cut it (``…``): a candidate with the same title matches
        when its cleaned text equals the parsed text or starts with it (cut).
        """
        from workbench.tools.base import clean_text

        cands = self._by_title.get(_norm_title(hit.get("title") or ""), [])
        if len(cands) > 1:
            text = _norm_text(hit.get("text") or "")
            cut = str(hit.get("text") or "").rstrip().endswith("…")
            cands = [p for p in cands if (_norm_text(clean_text(p.text)).startswith(text) if cut
                                          else _norm_text(clean_text(p.text)) == text)]
        if len(cands) != 1:
            return None
        p = cands[0]
        return {"id": p.id, "title": p.title, "text": p.text, "score": float(hit.get("score") or 0.0),
                "source": p.source}


def as_passage_index(passages: Sequence[Passage] | Mapping[str, Passage] | None) -> PassageIndex | None:
    """None, a PassageIndex, an ``id → Passage`` mapping or a sequence of passages → a PassageIndex (or None)."""
    if passages is None or isinstance(passages, PassageIndex):
        return passages
    return PassageIndex(passages)


def _resolve_hits(hits: list[dict[str, Any]], index: PassageIndex | None) -> list[dict[str, Any]]:
    if index is None:
        return hits
    return [index.resolve(h) or h for h in hits]


def _message_parts(messages: Sequence[Mapping[str, Any]], proto: Protocol) -> list[tuple[str, str]]:
    """Chat messages → turns: non-assistant messages are observations; an assistant message is split
    at the observations the engine appended inline (a whole Search-R1 rollout can be one message)."""
    parts: list[tuple[str, str]] = []
    for m in messages:
        content = str(m.get("content") or "")
        if m.get("role") != "assistant":
            parts.append((OBSERVATION, content))
            continue
        split = split_turns(content, proto)
        parts += split if split else [(POLICY, content)]
    return parts


def trajectory_from_text(
    completion: Completion, protocol: Protocol, example: Example | None = None, id: str = "text-0",
    question: str = "", passages: Sequence[Passage] | Mapping[str, Passage] | None = None,
) -> Trajectory:
    """Rebuild a :class:`Trajectory` (turns, actions, search results, answer, flags) from a completion.

    ``completion``: the response text as the engine appended it inline (the prompt excluded),
    or a list of chat messages (assistant = policy, any other role = observation).

    Each turn is parsed with ``protocol.parse_in_context``. For each search, the protocol's
    ``act`` is replayed against an empty toolbox (no search runs), so that what the protocol
    records about the action itself (e.g. the NL-DAG validation behind ``dag_valid``) is
    recomputed by the protocol's own code; the passages come from the observation text. A
    protocol configured with non-default tools (e.g. an NL-DAG source registry) must be passed
    as that configured instance.

    ``passages``: the corpus (a list of passages, an id → Passage mapping or a :class:`PassageIndex`):
    each parsed passage is resolved to its corpus record (id, full text, source) where unique.
    """
    proto = _protocol(protocol)
    index = as_passage_index(passages)
    if isinstance(completion, str):
        parts = split_turns(completion, proto)
    else:
        parts = _message_parts(completion, proto)
    ex_id = example.id if example is not None and example.id else id
    ex = example if example is not None else Example(id=ex_id, question=question, answers=[])
    traj = Trajectory(id=id, example_id=ex_id, question=question or ex.question, protocol=proto.name, prompt_ids=[],
                      group_id=ex_id)
    # the prompt the protocol builds for this question (its demonstrations' answers are what demo_leak compares)
    traj.prompt_text = "\n".join(str(m["content"]) for m in proto.messages(ex))
    replay = Toolbox({}, timeout_s=None)
    for kind, text in parts:
        if kind == POLICY:
            if traj.answer is not None:
                break
            action = proto.parse_in_context(text, traj)
            stopped = any(s and text.rstrip().endswith(s) for s in proto.stop)
            traj.turns.append(Turn(POLICY, text, [], None, "stop" if stopped else "eos", action.to_dict()))
            if action.kind == ANSWER:
                traj.answer = proto.answer_text(action)
        else:
            calls: list[ToolCall] = []
            last = traj.turns[-1].action if traj.turns and traj.turns[-1].kind == POLICY else None
            if last and last.get("kind") == SEARCH:
                calls = _replay(proto, Action(**last), replay, ex)
                payload = last.get("payload")
                query = payload.get("query", "") if isinstance(payload, dict) else str(payload or "")
                calls.append(ToolCall("observation", {"query": query}, results=_resolve_hits(parse_passages(text), index),
                                      meta={"parsed_from_text": True}))
            traj.turns.append(Turn(OBSERVATION, text, [], None, None, None, calls))
    traj.finish_reason = "answer" if traj.answer is not None else "max_turns"
    traj.flags = proto.format_flags(traj)
    return traj


def _replay(proto: Protocol, action: Action, toolbox: Toolbox, example: Example) -> list[ToolCall]:
    """The protocol's own records of a search action (tool-call meta), from ``act`` with no tools."""
    try:
        calls = proto.act(action, toolbox, example).tool_calls
    except Exception:  # act is not meant to raise; if it does, the text still gives the passages
        return []
    for c in calls:
        c.results = []  # nothing was searched here; the passages are parsed from the observation
    return calls


def features_from_texts(
    completions: Sequence[Completion], examples: Sequence[ExampleLike], protocol: Protocol, *,
    questions: Sequence[str] | None = None, ids: Sequence[str] | None = None,
    passages: Sequence[Passage] | Mapping[str, Passage] | None = None,
    **feature_kwargs: Any,
) -> pd.DataFrame:
    """The features table of completions (one row each), via :func:`trajectory_from_text` and ``compute_features``.

    ``examples``: one per completion: an ``Example``, a dataset row dict, or gold answers.
    ``passages``: the corpus, to resolve rendered passages to ids (see :func:`trajectory_from_text`);
    it also gives ``compute_features`` the gold passage texts.
    ``feature_kwargs`` go to ``compute_features`` (``encoder``, ``judges``, ``evidence_model``, ``cache``...).
    """
    if len(examples) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(examples)} examples")
    proto = _protocol(protocol)
    index = as_passage_index(passages)
    trajs, exs = [], {}
    for i, (comp, ex_like) in enumerate(zip(completions, examples)):
        q = questions[i] if questions is not None else ""
        ex = as_example(ex_like, question=q)
        ex = dataclasses.replace(ex, id=f"row{i}", question=ex.question or q)
        tid = ids[i] if ids is not None else f"text-{i}"
        trajs.append(trajectory_from_text(comp, proto, ex, id=tid, question=ex.question, passages=index))
        exs[ex.id] = ex
    if index is not None:
        feature_kwargs.setdefault("passages", index)
    return compute_features(trajs, exs, **feature_kwargs)


def features_from_text(completion: Completion, example_like: ExampleLike, protocol: Protocol,
                       **kw: Any) -> pd.DataFrame:
    """One completion's features (a one-row table); see :func:`features_from_texts`."""
    return features_from_texts([completion], [example_like], protocol, **kw)


# ============================================================================= shared scorer


class TextScorer:
    """Completions → RewardTable under one rubric, remembering the last batch (TRL calls every
    component function on the same batch)."""

    def __init__(self, rubric: Rubric, protocol: Protocol, feature_kwargs: Mapping[str, Any]):
        self.rubric = rubric
        self.protocol = _protocol(protocol)
        self.feature_kwargs = dict(feature_kwargs)
        self._last: tuple[str, RewardTable] | None = None

    def score(self, completions: Sequence[Completion], examples: Sequence[ExampleLike],
              questions: Sequence[str]) -> RewardTable:
        key = json.dumps([list(completions), [_jsonable(e) for e in examples], list(questions)], default=str,
                         ensure_ascii=False)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        df = features_from_texts(completions, examples, self.protocol, questions=questions, **self.feature_kwargs)
        table = self.rubric(df)
        self._last = (key, table)
        return table

    def score_trajectories(self, trajs: Sequence[Mapping[str, Any]], examples: Sequence[ExampleLike]) -> RewardTable:
        """Trajectories as dicts (``Trajectory.to_dict()``, e.g. from TRL's rollout function in
        ``workbench.integrations.trl``) → RewardTable: their own turns, passage ids and flags, nothing rebuilt
        from text, so the features are those of the Rubric on stored trajectories."""
        key = json.dumps(["trajectories", [_jsonable(t) for t in trajs], [_jsonable(e) for e in examples]],
                         default=str, ensure_ascii=False)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        rebuilt, exs = [], {}
        for i, (d, ex_like) in enumerate(zip(trajs, examples)):
            traj = Trajectory.from_dict(dict(d))
            ex = as_example(ex_like, question=traj.question)
            ex = dataclasses.replace(ex, id=f"row{i}", question=ex.question or traj.question)
            traj.example_id = ex.id
            rebuilt.append(traj)
            exs[ex.id] = ex
        table = self.rubric(compute_features(rebuilt, exs, **self.feature_kwargs))
        self._last = (key, table)
        return table


def _jsonable(x: Any) -> Any:
    if isinstance(x, Example):
        return x.to_dict()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def missing_message(rubric: Rubric, table: RewardTable, name: str, rows: list[int]) -> str:
    """The one-line error for a rewarded component that came out NaN on ``rows``, naming what to configure."""
    absent = f"; absent feature columns: {', '.join(table.absent_columns)}" if table.absent_columns else ""
    return (f"{rubric.name}: component {name!r} is missing (NaN) for completions {rows[:10]}{absent}. "
            "Configure the feature it needs (judges=, evidence_model=, encoder=, dataset columns such as hops or "
            "supporting_titles) or pass on_missing='none' to return None for them.")


def _protocol(protocol: Protocol) -> Protocol:
    if not isinstance(protocol, Protocol):
        raise TypeError(f"expected a Protocol instance, got {type(protocol).__name__} {protocol!r}: build one from its "
                        "name with workbench.methods.get_protocol(name)")
    return protocol


def configured_rubric(rubric: Rubric, weights: Mapping[str, float] | None, params: Mapping[str, Any]) -> Rubric:
    """``rubric`` with ``params`` and ``weights`` on top (validated by the rubric)."""
    if not isinstance(rubric, Rubric):
        raise TypeError(f"expected a Rubric, got {type(rubric).__name__} {rubric!r}: build one from a preset's name "
                        "with workbench.methods.get_preset(name)")
    rubric = rubric.with_params(**params) if params else rubric
    return rubric.with_weights(**weights) if weights else rubric
