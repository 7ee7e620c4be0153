"""Expert traces from the world: the trajectory an expert would write for each question.

Every world question carries its KG path (one ``head --relation--> tail`` per hop), the
resolved decomposition and the supporting passage of each hop. So do two published layouts, over each
question's own paragraphs (:func:`benchmark_hops`): MuSiQue (its ``question_decomposition``: a sub-question, its
answer and its paragraph per hop) and 2WikiMultiHopQA (its ``evidences`` triples, each hop's paragraph the one
titled by the triple's head). For a protocol, the expert
trace is: a short reasoning text, one search per hop whose query the protocol's real search
tool answers (the hop's supporting passage is in the top-k), the observations the protocol
renders itself, and the final answer in the protocol's format.

How a trace is made (nothing is assembled by hand):

1. :func:`plan_expert` picks, per hop, the first query formulation (entity name + relation
   words, its aliases, the entity alone, the sub-question, the passage title) whose search
   returns the supporting passage, probing the real tool of the protocol's toolbox. A question
   where no formulation works is dropped with the reason.
2. The protocol's :class:`ExpertWriter` (each method package defines its own in ``expert.py``; the
   method declaration holds it) writes the expert's turns.
3. The real rollout engine runs them through a :class:`~workbench.rollout.backends.scripted.ScriptedBackend`
   whose script is ``(prompt_text, turn_index) -> text``: the engine tokenizes, masks, calls the
   tools and renders the observations exactly as in a model rollout.
4. :func:`check_trace` verifies the result: the intended actions were parsed, every hop's search
   really returned its supporting passage, ``format_flags(traj)["format_ok"]`` (and the writer's
   own flags) hold, no turn was cut, and the answer scores cover-EM 1.

:func:`expert_traces` does all four for a list of questions and returns the valid trajectories,
the dropped questions with their reasons and the yield per hop count; ``workbench expert`` writes them as an
eval-style run (:func:`workbench.eval.expert.write_expert_run`), so the trajectory inspector shows them.

Logprobs of expert tokens are not a model's: they are recorded as 0.0 (``meta["source"] == "expert"``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.core.trajectory import Trajectory
from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.protocols.base import ANSWER, SEARCH, Protocol
from workbench.rewards.metrics import cover_exact_match
from workbench.tools.base import Toolbox

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from workbench.data.world import World


# =============================================================================== the expert's plan


@dataclass
class Hop:
    """One hop of a question as the expert searches it."""

    head: str
    relation: str
    tail: str
    subquestion: str
    support_id: str
    support_title: str
    support_text: str = ""
    support_source: str = ""
    tail_forms: list[str] = field(default_factory=list)
    """Other names of the tail (entity aliases), for finding the evidence sentence."""
    query: str = ""
    """The query that retrieves the supporting passage (chosen by :func:`plan_expert`)."""
    formulation: str = ""
    """Which formulation worked (``entity+relation``, ``entity+alias``, ``entity``, ``subquestion``, ``title``)."""
    tool: str = "search"
    """The search tool (or plan source) that found it."""

    @property
    def fact(self) -> str:
        """The hop's fact as a sentence (``"Pelme University is located in Nonwick."``; a hop known only by its
        sub-question: ``'The answer to "Who founded X?" is Y.'``)."""
        if not (self.head and self.relation):
            return f'The answer to "{self.subquestion}" is {self.tail}.'
        return fact_sentence(self.head, self.relation, self.tail)


@dataclass
class ExpertPlan:
    """What the expert will write for one question, and the protocol's writer that writes it."""

    example: Example
    hops: list[Hop]
    answer: str
    writer: ExpertWriter
    outline: bool = False
    """Write the plan out (:func:`steps`): how many searches and which relations first, then ``Step k of n`` before
    each search, so that a small policy can count where it is on a deep question."""
    residual: bool = False
    """After each hop, write the question that is left with the entity found in its place (:func:`left_questions`):
    what remains shows in the text, without counting."""

    def to_meta(self) -> dict[str, Any]:
        return {"answer": self.answer,
                "hops": [{"query": h.query, "formulation": h.formulation, "tool": h.tool, "support_id": h.support_id}
                         for h in self.hops]}


# Fact sentences per relation name (the world's relations; anything else: "The <relation> of <head> is <tail>.").
FACTS: dict[str, str] = {
    "place of birth": "{h} was born in {t}.",
    "date of birth": "{h} was born on {t}.",
    "country of citizenship": "{h} is a citizen of {t}.",
    "father": "The father of {h} is {t}.",
    "mother": "The mother of {h} is {t}.",
    "spouse": "{h} is married to {t}.",
    "educated at": "{h} was educated at {t}.",
    "employer": "{h} works for {t}.",
    "award received": "{h} received the {t}.",
    "director": "{h} was directed by {t}.",
    "author": "{h} was written by {t}.",
    "founded by": "{h} was founded by {t}.",
    "located in the administrative territorial entity": "{h} is located in {t}.",
    "capital of": "{h} is the capital of {t}.",
    "capital": "The capital of {h} is {t}.",
    "country": "{h} is in {t}.",
    "headquarters location": "{h} is headquartered in {t}.",
    "inception": "{h} was founded in {t}.",
    "publication date": "{h} was published in {t}.",
}


def fact_sentence(head: str, relation: str, tail: str) -> str:
    """``"Zirnix Press was founded by Wevmund Ynlas Shystquist."``"""
    return FACTS.get(relation, "The {r} of {h} is {t}.").format(h=head, r=relation, t=tail)


def query_formulations(hop: Hop, relation_aliases: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(name, query)`` candidates for a hop, in the order they are tried (duplicates dropped)."""
    cands = [("entity+relation", f"{hop.head} {hop.relation}")]
    cands += [("entity+alias", f"{hop.head} {a}") for a in relation_aliases]
    cands += [("entity", hop.head), ("subquestion", hop.subquestion.rstrip("?")), ("title", hop.support_title)]
    seen: set[str] = set()
    out = []
    for name, q in cands:
        q = " ".join(q.replace('"', " ").split())
        if q and q.lower() not in seen:
            seen.add(q.lower())
            out.append((name, q))
    return out


def evidence_sentence(hop: Hop) -> str:
    """The supporting passage's sentence that states the hop's fact (original wording): the first one
    naming the tail (or one of its forms) as whole words, else the one sharing most words with the
    fact, else the whole passage.

    >>> evidence_sentence(Hop("K", "country of citizenship", "Commonwealth of Rardriovia", "", "p", "",
    ...     "K is a Rardriovian director. She is a citizen of Rardriovia.", tail_forms=["Rardriovia"]))
    'She is a citizen of Rardriovia.'
    """
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", hop.support_text) if s.strip()]
    forms = [re.compile(rf"\b{re.escape(f)}\b", re.IGNORECASE) for f in (hop.tail, *hop.tail_forms) if f]
    for s in sentences:
        if any(f.search(s) for f in forms):
            return s
    words = set(re.findall(r"\w+", f"{hop.tail} {hop.relation}".lower()))
    scored = [(len(words & set(re.findall(r"\w+", s.lower()))), -i, s) for i, s in enumerate(sentences)]
    best = max(scored, default=(0, 0, ""))
    return best[2] if best[0] > 0 else hop.support_text


# =============================================================================== writers

Probe = Callable[[Protocol, Toolbox, Hop, str], "str | None"]
"""``(protocol, toolbox, hop, query) -> tool`` that returns the hop's supporting passage in its top-k, or None."""


def search_probe(protocol: Protocol, toolbox: Toolbox, hop: Hop, query: str) -> str | None:
    """The protocol's ``search`` tool with the protocol's ``top_k`` (what its ``act`` calls)."""
    call = toolbox.call("search", query=query, k=protocol.top_k)
    return "search" if call.ok and any(h.id == hop.support_id for h in call.hits()) else None


@dataclass(frozen=True)
class ExpertWriter:
    """How the expert writes one protocol's turns (each method package defines its own, ``expert.py``).

    ``turns(protocol, plan)`` returns the policy turn texts in order: one per search turn, the last
    one answers (each search turn must end with the protocol's stop string, as a model's turn does).
    ``probe`` checks a query against the real tool; ``required_flags`` are format flags that must be
    true besides ``format_ok``.
    """

    turns: Callable[[Protocol, ExpertPlan], list[str]]
    probe: Probe = search_probe
    required_flags: tuple[str, ...] = ()


def need(hop: Hop, first: bool = True) -> str:
    """``"I need to find: <sub-question>"`` (``"Next I need..."`` after the first hop)."""
    return f"{'I' if first else 'Next I'} need to find: {hop.subquestion}"


def outline(plan: ExpertPlan) -> str:
    """``"This question takes 3 searches: father, then father, then place of birth."`` (the relations left out where
    a hop has none, as a benchmark's sub-question hop)."""
    n, rels = len(plan.hops), [h.relation for h in plan.hops]
    what = ": " + ", then ".join(rels) if all(rels) else ""
    return f"This question takes {n} search{'es' if n > 1 else ''}{what}."


def left_questions(plan: ExpertPlan) -> list[str] | None:
    """The question left after each hop but the last, the entity that hop found in place of what it answered
    (``"Who founded the company that employs <the father found>?"``, then ``"Who founded <the company found>?"``);
    the one before the last search is the last hop's sub-question. None when the hops are not a chain (each hop's
    head the previous hop's tail: a comparison's are not) or a chain's wording is unknown (the world's chain templates
    have theirs, :data:`~workbench.data.world.templates.RESIDUALS`)."""
    from workbench.data.world.templates import RESIDUALS

    hops = plan.hops
    if any(not h.head or h.head != prev.tail for prev, h in zip(hops, hops[1:])):
        return None
    middle = RESIDUALS.get(str(plan.example.meta.get("template", "")), ())  # none for two hops: no middle question
    if len(middle) != len(hops) - 2:  # a one-hop question, or a chain whose wording is unknown
        return None
    return [m.format(a=h.tail) for m, h in zip(middle, hops)] + [hops[-1].subquestion]


def steps(plan: ExpertPlan) -> list[str]:
    """Reasoning before each search: what to find, after the previous hop's fact (with ``plan.outline``: the plan
    first, and which step of how many each search is; with ``plan.residual``: the question that is left, where the
    hops are a chain)."""
    left = left_questions(plan) if plan.residual else None
    if left is not None:
        return [need(h) if i == 0 else f"{plan.hops[i - 1].fact} Now the question is: {left[i - 1]}"
                for i, h in enumerate(plan.hops)]
    if not plan.outline:
        return [need(h) if i == 0 else f"{plan.hops[i - 1].fact} {need(h, False)}" for i, h in enumerate(plan.hops)]
    n = len(plan.hops)
    return [f"{outline(plan)} Step 1 of {n}: {need(h)}" if i == 0
            else f"{plan.hops[i - 1].fact} Step {i + 1} of {n}: {need(h)}" for i, h in enumerate(plan.hops)]


def conclusion(plan: ExpertPlan) -> str:
    """The last hop's fact and the answer (with ``plan.outline``: that it was the last step)."""
    fact, n = plan.hops[-1].fact, len(plan.hops)
    if not plan.outline:
        return f"{fact} So the answer is {plan.answer}."
    last = "That was the only step" if n == 1 else f"That was step {n} of {n}"
    return f"{fact} {last}, so the answer is {plan.answer}."


# =============================================================================== plan, run, check


class Dropped(Exception):
    """A question without a valid expert trace (the message says why)."""


def _hops(example: Example, world: Any) -> list[Hop]:
    path, subqs = example.kg_path, example.meta.get("decomposition_resolved") or example.decomposition
    if not path or len(path) != len(example.supporting_ids) or len(subqs) != len(path):
        raise Dropped(f"annotations do not align: {len(path)} KG hops, {len(example.supporting_ids)} supporting "
                      f"passages, {len(subqs)} sub-questions")
    hops = []
    for step, pid, title, q in zip(path, example.supporting_ids, example.supporting_titles or [""] * len(path), subqs):
        p = world.passage(pid) if world is not None else None
        tail_id = step.get("tail_id")
        ent = world.entities.get(tail_id) if world is not None and tail_id else None
        hops.append(Hop(step["head"], step["relation"], step["tail"], q, pid, title or (p.title if p else ""),
                        p.text if p else "", str(p.source) if p else "", list(ent.aliases) if ent is not None else []))
    return hops


_PLACEHOLDER = re.compile(r"#(\d+)")


def _resolve(text: str, answers: Sequence[str]) -> str:
    """MuSiQue's ``#k`` (the answer of hop k) replaced by that answer."""
    return _PLACEHOLDER.sub(lambda m: answers[int(m.group(1)) - 1] if 0 < int(m.group(1)) <= len(answers)
                            else m.group(0), text)


def benchmark_hops(example: Example, passages: Sequence[Passage]) -> list[Hop]:
    """The hops of a MuSiQue or 2WikiMultiHopQA question over its own paragraphs ``passages`` (as
    :func:`workbench.data.corpora.corpus_from_contexts` builds them from ``example.meta["contexts"]``).

    MuSiQue: one hop per ``question_decomposition`` entry; ``"A >> relation"`` gives head A and the relation,
    a natural sub-question only itself; ``#k`` is resolved to hop k's answer; the hop's paragraph is the one its
    ``paragraph_support_idx`` names. 2Wiki: one hop per ``evidences`` triple, its paragraph the supporting one titled by
    the head (else the supporting one naming the tail). Raises :class:`Dropped` for anything else.
    """
    from workbench.data.corpora import context_passage_id

    contexts = example.meta.get("contexts") or []
    if not contexts:
        raise Dropped("no paragraphs of its own (meta['contexts'])")
    ids = {context_passage_id(str(c.get("title", "")), str(c.get("text", ""))) for c in contexts}
    by_id = {p.id: p for p in passages if p.id in ids}

    def hop_of(ctx: dict[str, Any], head: str, relation: str, tail: str, subq: str) -> Hop:
        pid = context_passage_id(str(ctx.get("title", "")), str(ctx.get("text", "")))
        if pid not in by_id:
            raise Dropped(f"paragraph {ctx.get('title')!r} is not among the searched passages")
        return Hop(head, relation, tail, subq, pid, str(ctx.get("title", "")), str(ctx.get("text", "")))

    answers = [str(a) for a in example.meta.get("decomposition_answers") or []]
    support = example.meta.get("decomposition_support_pos", example.meta.get("decomposition_support_idx"))
    if example.decomposition and support is not None:  # MuSiQue
        if not (len(example.decomposition) == len(answers) == len(support)):
            raise Dropped(f"decomposition does not align: {len(example.decomposition)} sub-questions, "
                          f"{len(answers)} answers, {len(support)} paragraphs")
        hops = []
        for q, a, idx in zip(example.decomposition, answers, support):
            if not isinstance(idx, int) or not 0 <= idx < len(contexts):
                raise Dropped(f"sub-question {q!r}: its paragraph_support_idx names none of the question's "
                              f"{len(contexts)} paragraphs")
            q = _resolve(q, answers)
            head, sep, rel = (x.strip() for x in q.partition(">>"))
            if sep:
                hops.append(hop_of(contexts[idx], head, rel, a, f"the {rel} of {head}"))
            else:
                hops.append(hop_of(contexts[idx], "", "", a, q))
        return hops
    if example.kg_path:  # 2Wiki: evidences
        hops = []
        sup = [c for c in contexts if c.get("supporting")]
        for step in example.kg_path:
            head, rel, tail = str(step.get("head", "")), str(step.get("relation", "")), str(step.get("tail", ""))
            ctx = next((c for c in sup if str(c.get("title", "")).strip().lower() == head.strip().lower()), None)
            ctx = ctx or next((c for c in sup if tail and tail.lower() in str(c.get("text", "")).lower()), None)
            if ctx is None:
                raise Dropped(f"evidence ({head}, {rel}, {tail}): no supporting paragraph is titled {head!r} or "
                              f"names {tail!r}")
            hops.append(hop_of(ctx, head, rel, tail, f"the {rel} of {head}"))
        return hops
    raise Dropped("no per-hop annotation: a MuSiQue question_decomposition or 2Wiki evidences")


def plan_expert(example: Example, protocol: Protocol, writer: ExpertWriter, toolbox: Toolbox,
                world: World | None = None, passages: Sequence[Passage] | None = None) -> ExpertPlan:
    """The expert's plan for ``example``: a query per hop that ``writer``'s probe finds with the real tool;
    raises :class:`Dropped` (with the reason) when a hop has none. The hops come from the world's annotations,
    or, given the question's own ``passages``, from its benchmark's (:func:`benchmark_hops`)."""
    if not example.answers:
        raise Dropped("no gold answer")
    hops = benchmark_hops(example, passages) if passages is not None else _hops(example, world)
    for i, hop in enumerate(hops):
        rel_id = example.kg_path[i].get("relation_id") if i < len(example.kg_path) else None
        rel = world.relations.get(rel_id) if world is not None and rel_id else None
        tried = []
        for name, query in query_formulations(hop, rel.aliases if rel is not None else ()):
            tool = writer.probe(protocol, toolbox, hop, query)
            if tool is not None:
                hop.query, hop.formulation, hop.tool = query, name, tool
                break
            tried.append(query)
        else:
            raise Dropped(f"hop {i + 1}: no query retrieves {hop.support_id} ({hop.support_title!r}) in the top "
                          f"{protocol.top_k}; tried {tried}")
    return ExpertPlan(example, hops, example.answers[0], writer)


def run_expert(plan: ExpertPlan, protocol: Protocol, toolbox: Toolbox, tokenizer: PreTrainedTokenizerBase,
               max_new_tokens: int = 256, max_total_tokens: int = 4096,
               meta: dict[str, Any] | None = None) -> Trajectory:
    """Roll the expert's turns out through the real engine (scripted backend, real tools)."""
    from workbench.rollout.backends.scripted import ScriptedBackend
    from workbench.rollout.engine import RolloutConfig, rollout

    texts = plan.writer.turns(protocol, plan)

    def script(prompt_text: str, turn: int) -> str:
        return texts[turn] if turn < len(texts) else ""

    backend = ScriptedBackend(tokenizer, script, logprob=0.0)
    cfg = RolloutConfig(group_size=1, max_turns=len(texts), max_new_tokens=max_new_tokens,
                        max_total_tokens=max_total_tokens, temperature=0.0, seed=0)
    traj = rollout([plan.example], protocol, toolbox, backend, cfg, progress=False,
                   meta={"source": "expert", **(meta or {})})[0]
    traj.meta["expert"] = {**plan.to_meta(), "turns": len(texts)}
    return traj


def check_trace(traj: Trajectory, plan: ExpertPlan, protocol: Protocol) -> list[str]:
    """What is wrong with an expert trajectory (empty: valid)."""
    problems = []
    n_turns = traj.meta.get("expert", {}).get("turns")
    kinds = [a.get("kind") for a in traj.actions]
    if n_turns is not None and kinds != [SEARCH] * (n_turns - 1) + [ANSWER]:
        problems.append(f"actions parsed as {kinds}")
    if traj.finish_reason != "answer":
        problems.append(f"finished by {traj.finish_reason!r}")
    cut = [i for i, t in enumerate(traj.policy_turns) if t.finish_reason == "length"]
    if cut:
        problems.append(f"policy turn(s) {cut} cut at max_new_tokens")
    if not traj.flags.get("format_ok"):
        problems.append(f"format not ok: {traj.flags.get('format_errors') or traj.flags}")
    for flag in plan.writer.required_flags:
        if not traj.flags.get(flag):
            problems.append(f"flag {flag} is {traj.flags.get(flag)!r}")
    calls = [c for c in traj.tool_calls if isinstance(c.args, dict) and "query" in c.args]
    for i, hop in enumerate(plan.hops):
        found = [c for c in calls if c.args.get("query") == hop.query]
        if not found:
            problems.append(f"hop {i + 1}: query {hop.query!r} was not run")
        elif not any(h.id == hop.support_id for c in found for h in c.hits()):
            problems.append(f"hop {i + 1}: {hop.support_id} not in the results of {hop.query!r}")
    if cover_exact_match(traj.answer, plan.example.answers) != 1.0:
        problems.append(f"answer {traj.answer!r} does not cover {plan.example.answers}")
    return problems


# =============================================================================== many questions


@dataclass
class ExpertResult:
    """Valid expert trajectories, the dropped questions and the yield per hop count."""

    trajectories: list[Trajectory]
    dropped: list[dict[str, Any]] = field(default_factory=list)
    """``{"example_id", "hops", "qtype", "stage" (plan | check), "reason"}`` per dropped question."""
    examples: list[Example] = field(default_factory=list)
    seconds: float = 0.0

    def yield_by_hops(self) -> dict[str, dict[str, float]]:
        """``{hops: {"n", "valid", "yield"}}`` plus ``"all"``."""
        ok = {t.example_id for t in self.trajectories}
        groups: dict[str, list[Example]] = {}
        for e in self.examples:
            groups.setdefault(str(e.hops), []).append(e)
        groups["all"] = list(self.examples)
        return {h: {"n": len(es), "valid": sum(e.id in ok for e in es),
                    "yield": sum(e.id in ok for e in es) / len(es) if es else float("nan")}
                for h, es in groups.items()}


def expert_traces(examples: Sequence[Example], protocol: Protocol, writer: ExpertWriter,
                  toolbox: Toolbox | Callable[[Example], tuple[Toolbox, list[Passage]]],
                  tokenizer: PreTrainedTokenizerBase, world: World | None = None, *, method: str | None = None,
                  max_new_tokens: int = 256, max_total_tokens: int = 4096, progress: bool = False,
                  outline: bool = False, residual: bool = False) -> ExpertResult:
    """Plan (with ``writer``), roll out and check the expert trace of every question; keep the valid ones
    (``outline``: the traces write the plan out first and count the steps, :attr:`ExpertPlan.outline`;
    ``residual``: they write the question left after each hop, :attr:`ExpertPlan.residual`).

    ``toolbox``: one toolbox over the world's passages, or ``example -> (toolbox, passages)``: each question
    searching its own paragraphs, its hops from its benchmark's annotations (:func:`benchmark_hops`)."""
    from tqdm.auto import tqdm

    if outline and residual:
        raise ValueError("outline and residual are two ways to write the steps; give one of them")
    t0 = time.perf_counter()
    out = ExpertResult([], [], list(examples))
    label = method or protocol.name
    for ex in tqdm(examples, desc=f"expert {label}", disable=not progress):
        info = {"example_id": ex.id, "hops": ex.hops, "qtype": ex.qtype}
        tb, passages = toolbox(ex) if callable(toolbox) else (toolbox, None)
        try:
            plan = plan_expert(ex, protocol, writer, tb, world, passages)
        except Dropped as e:
            out.dropped.append({**info, "stage": "plan", "reason": str(e)})
            continue
        plan.outline, plan.residual = outline, residual
        traj = run_expert(plan, protocol, tb, tokenizer, max_new_tokens, max_total_tokens, meta={"method": label})
        problems = check_trace(traj, plan, protocol)
        if problems:
            out.dropped.append({**info, "stage": "check", "reason": "; ".join(problems)})
            continue
        out.trajectories.append(traj)
    out.seconds = time.perf_counter() - t0
    return out


def format_yield(results: dict[str, ExpertResult]) -> str:
    """A plain table: one row per method, the share of questions with a valid trace per hop count."""
    hops = sorted({h for r in results.values() for h in r.yield_by_hops() if h != "all"}, key=lambda h: (len(h), h))
    head = ["method", *[f"{h}-hop" for h in hops], "all"]
    rows = []
    for m, r in results.items():
        y = r.yield_by_hops()
        rows.append([m, *[(f"{y[h]['valid']}/{y[h]['n']} ({y[h]['yield']:.2f})" if h in y else "-") for h in [*hops, "all"]]])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in [head, *rows])
