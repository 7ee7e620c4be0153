"""The ``compute_score`` an exported ``reward.py`` calls (verl's ``custom_reward_function``).

It wraps :func:`workbench.rewards.export.to_verl` for a method's reward preset and protocol with
``on_missing="nan"`` and the corpus the rollouts searched (so rendered passages resolve to their ids),
and never raises: data without our extras (Search-R1's parquet: no ``hops``, no supporting titles)
gets the computable components and NaN for the rest, with the reason logged; an unexpected error is
logged with its traceback and scored NaN rather than killing a verl reward worker.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=8)
def _corpus(corpus: str | None) -> Any:
    from workbench.rewards.export import PassageIndex

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
    from workbench.rewards.export import to_verl

    m = get_method(method)
    if m.reward is None:
        raise ValueError(f"method {method!r} declares no reward preset: nothing to export")
    inner = to_verl(m.rubric(), m.get_protocol(), return_dict=True, on_missing="nan", encoder=encoder,
                    passages=_corpus(corpus), **kw)
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
