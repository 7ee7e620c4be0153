"""Gold passages hop by hop: where a trajectory's searches returned each of its question's gold passages.

A question that carries supporting facts (the world's supporting passages, HotpotQA's, 2Wiki's and MuSiQue's
supporting titles: ``Example.supporting_ids`` / ``supporting_titles``) names its gold passages in order; gold passage
``k`` is called *hop k* (the world's and MuSiQue's lists are in hop order; HotpotQA and 2Wiki list their supporting
facts in the dataset's order). :func:`gold_retrievals` says, for each, every place a search returned it: the turn
(its position in ``Trajectory.turns``, the number the transcript shows) and the rank (1 = the first result of
that call).

A retrieved passage is matched as the ``recall`` features match it (``features.py`` computes ``recall_id`` and
``recall_title`` through this function): by passage id when the question has gold ids and every retrieved passage
carries one (:func:`matches_by_id`), else by normalized title (:func:`~workbench.rewards.metrics.normalize_answer`).
KG triples are not passages and never match.

>>> from workbench.core.trajectory import OBSERVATION, Trajectory, Turn
>>> from workbench.core.types import ToolCall
>>> from workbench.data.example import Example
>>> ex = Example("q", "Where was Einstein born?", ["Ulm"], supporting_titles=["Albert Einstein", "Ulm"])
>>> call = ToolCall("search", {"query": "Einstein"}, results=[{"title": "Physics", "text": ""},
...                                                              {"title": "albert  einstein", "text": ""}])
>>> t = Trajectory("t", "q", ex.question, "search_r1", [], turns=[Turn(OBSERVATION, "", [], tool_calls=[call])])
>>> [(g.hop, g.turn, g.rank) for g in gold_retrievals(t, ex)]
[(1, 0, 2), (2, None, None)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from workbench.core.trajectory import Trajectory
from workbench.rewards.metrics import normalize_answer

if TYPE_CHECKING:
    from workbench.data.example import Example

__all__ = ["EVIDENCE_KINDS", "GoldRetrieval", "evidence_kind", "gold_retrievals", "is_passage", "matches_by_id"]

#: How much of a question's gold evidence a trajectory retrieved (:func:`evidence_kind`), with a reader's label.
EVIDENCE_KINDS = {"all": "all gold retrieved", "some": "some gold retrieved", "none": "no gold retrieved",
                  "no-gold": "no gold facts"}


@dataclass(frozen=True)
class GoldRetrieval:
    """One gold passage of a question and the places a trajectory's searches returned it."""

    hop: int
    """Its position among the question's gold passages, from 1."""
    title: str | None
    id: str | None
    by: str
    """How retrieved passages were matched to it: ``"id"`` or ``"title"``."""
    found: tuple[tuple[int, int, int], ...] = ()
    """``(turn, call, rank)`` of every result that is this passage, in the trajectory's order: the turn's position
    in ``Trajectory.turns``, the call's among that turn's tool calls, the rank among that call's results (from 1)."""

    @property
    def retrieved(self) -> bool:
        return bool(self.found)

    @property
    def turn(self) -> int | None:
        """The turn of the first search that returned it (None: never returned)."""
        return self.found[0][0] if self.found else None

    @property
    def rank(self) -> int | None:
        """Its rank in that first search's results (None: never returned)."""
        return self.found[0][2] if self.found else None


def is_passage(result: object) -> bool:
    """A tool result that is a passage (a dict with a title or a text), not a KG triple or a tool's own record."""
    return isinstance(result, dict) and ("title" in result or "text" in result)


def matches_by_id(gold_ids: Sequence[str], hits: Iterable[Mapping[str, Any]]) -> bool:
    """Gold passages are matched by id: the question has gold ids and every retrieved passage carries one (no
    passages: nothing to match, by id)."""
    return bool(gold_ids) and all(h.get("id") for h in hits)


def gold_retrievals(traj: Trajectory, example: Example, by: str | None = None) -> list[GoldRetrieval]:
    """Each of ``example``'s gold passages, in order, with every ``(turn, call, rank)`` at which ``traj``'s tool
    calls returned it ([] when the question names no gold passage).

    Args:
        example: the trajectory's :class:`~workbench.data.example.Example` (``supporting_ids``,
            ``supporting_titles``; anything with those attributes).
        by: ``"id"`` or ``"title"`` to match one way; None: by id where :func:`matches_by_id` holds (or the question
            names ids and no titles), else by title.
    """
    titles = [str(t) for t in getattr(example, "supporting_titles", None) or []]
    ids = [str(i) for i in getattr(example, "supporting_ids", None) or []]
    places = [(i, j, rank, r) for i, turn in enumerate(traj.turns) for j, call in enumerate(turn.tool_calls or [])
              for rank, r in enumerate(call.results or [], 1) if is_passage(r)]
    if by is None:
        by = "id" if matches_by_id(ids, (r for *_, r in places)) or (ids and not titles) else "title"
    if by not in ("id", "title"):
        raise ValueError(f"by={by!r}; valid: 'id', 'title' or None")
    keys = ids if by == "id" else [normalize_answer(t) for t in titles]

    def key(r: Mapping[str, Any]) -> str:
        return str(r.get("id") or "") if by == "id" else normalize_answer(r.get("title"))

    found: dict[str, list[tuple[int, int, int]]] = {k: [] for k in keys}
    for i, j, rank, r in places:
        k = key(r)
        if k in found:
            found[k].append((i, j, rank))
    paired = len(titles) == len(ids)  # the world names both, one per hop: show the title of an id, and the id
    return [GoldRetrieval(hop=n, title=titles[n - 1] if by == "title" or paired else None,
                          id=ids[n - 1] if by == "id" or paired else None, by=by, found=tuple(found[k]))
            for n, k in enumerate(keys, 1)]


def evidence_kind(golds: Sequence[GoldRetrieval]) -> str:
    """``all`` / ``some`` / ``none`` of the gold passages retrieved, or ``no-gold`` (:data:`EVIDENCE_KINDS`).

    >>> evidence_kind([]), evidence_kind([GoldRetrieval(1, "A", None, "title", ((2, 0, 3),))])
    ('no-gold', 'all')
    """
    if not golds:
        return "no-gold"
    n = sum(g.retrieved for g in golds)
    return "all" if n == len(golds) else "some" if n else "none"
