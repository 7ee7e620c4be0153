"""The ``compute_score`` an exported ``reward.py`` calls (verl's ``custom_reward_function``).

It wraps :func:`to_verl` (a Rubric as verl's ``compute_score``) for a method's reward preset and protocol with
``on_missing="nan"`` and the corpus the rollouts searched (so rendered passages resolve to their ids),
and never raises: data without our extras (Search-R1's parquet: no ``hops``, no supporting titles)
gets the computable components and NaN for the rest, with the reason logged; an unexpected error is
logged with its traceback and scored NaN rather than killing a verl reward worker.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.protocols.base import Protocol
    from workbench.rewards.rubric import Rubric

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def corpus_index(corpus: str | None) -> Any:
    """The corpus named ``corpus`` (``world`` or a corpus file) as a :class:`PassageIndex`, built once per name;
    None for none."""
    from workbench.rewards.from_text import PassageIndex

    if not corpus:
        return None
    if corpus == "world":
        from workbench.data.world import load_world

        return PassageIndex(list(load_world().passages))
    from workbench.data.corpora import load_corpus

    return PassageIndex(load_corpus(corpus))


def make_compute_score(method: str, *, corpus: str | None = "world", return_dict: bool = True,
                       encoder: Any = None, **kw: Any) -> Callable[..., Any]:
    """verl's ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` for ``method``.

    ``return_dict=True``: ``{"score": total, <component>: value, ...}`` (verl logs the components and
    writes them into its rollout dumps, which ``workbench import verl`` reads back).
    """
    from workbench.methods import get_method

    m = get_method(method)
    if m.reward is None:
        raise ValueError(f"method {method!r} declares no reward preset: nothing to export")
    inner = to_verl(m.rubric(), m.get_protocol(), return_dict=True, on_missing="nan", encoder=encoder,
                    passages=corpus_index(corpus), **kw)
    names: list[str] = []

    def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                      **_: Any) -> float | dict[str, float]:
        try:
            out = inner(data_source, solution_str, ground_truth, extra_info)
            if not names:
                names.extend(k for k in out if k != "score")
        except Exception:  # never kill the worker: log the traceback, score NaN
            log.exception("%s reward failed on a %r sample; scoring it NaN", method, data_source)
            out = {"score": math.nan, **{n: math.nan for n in names}}
        return out if return_dict else out["score"]

    compute_score.__doc__ = f"verl reward of the workbench method {method!r} (preset {m.reward.name!r})."
    return compute_score


def to_verl(
    rubric: Rubric, protocol: Protocol, *, return_dict: bool = False,
    on_missing: str = "raise", weights: Mapping[str, float] | None = None, judges: Sequence[Any] = (),
    evidence_model: Any = None, encoder: Any = None, cache: Any = True, passages: Any = None, **params: Any,
) -> Callable[..., float | dict[str, float]]:
    """A verl ``compute_score(data_source, solution_str, ground_truth, extra_info=None)`` for a Rubric whose
    completions ``protocol`` parses (``params`` and ``weights`` go over the rubric's).

    Returns the rubric total as a float, or with ``return_dict=True`` a dict with ``score``
    (verl's reward) and one entry per component (logged by verl as extra info). A NaN total
    raises (``on_missing="raise"``) or is returned as NaN with the reason logged as a warning
    (``on_missing="nan"``: what an exported reward module uses, so that data without our extras,
    e.g. Search-R1's parquet without ``hops``, scores the computable components and never kills a
    worker). ``passages``: the corpus, to resolve rendered passages to ids (as in
    :func:`workbench.integrations.trl.to_trl`). ``extra_info`` may carry ``question``, ``hops``, ``supporting_titles``,
    ``supporting_ids``.
    """
    import numpy as np

    from workbench.rewards.from_text import TextScorer, as_passage_index, configured_rubric, missing_message

    if on_missing not in ("raise", "nan"):
        raise ValueError(f"on_missing must be 'raise' or 'nan', got {on_missing!r}")
    rubric = configured_rubric(rubric, weights, params)
    scorer = TextScorer(rubric, protocol, {"judges": judges, "evidence_model": evidence_model, "encoder": encoder,
                                           "cache": cache, "passages": as_passage_index(passages)})

    def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None,
                      **_: Any) -> float | dict[str, float]:
        info = dict(extra_info) if isinstance(extra_info, Mapping) else {}
        gt = ground_truth.tolist() if isinstance(ground_truth, np.ndarray) else ground_truth
        example = {**info, "ground_truth": gt}
        for k in ("answers", "golden_answers", "answer", "target", "solution", "gold"):
            example.pop(k, None)  # ground_truth is the gold answer verl passes
        table = scorer.score([solution_str], [example], [str(info.get("question") or "")])
        total = float(table.total[0])
        if math.isnan(total):
            missing = [n for n in rubric.weights if rubric.weights[n] and math.isnan(float(table.frame[n].iloc[0]))]
            msg = missing_message(rubric, table, ", ".join(missing) or "total", [0])
            if on_missing == "raise":
                raise ValueError(msg)
            log.warning("%s (data_source=%r; the score is NaN)", msg, data_source)
        if not return_dict:
            return total
        return {"score": total, **{n: float(table.frame[n].iloc[0]) for n in rubric.weights}}

    compute_score.__doc__ = f"verl reward for the {rubric.name!r} rubric (parameters {rubric.params})."
    return compute_score
