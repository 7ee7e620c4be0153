"""Calling an LLM for a feature (judges, the evidence model): a stable model id for cache keys, a
batched ``prompts -> replies`` caller over a Backend or a callable, and cached calls where a
failed call is recorded (and retried next time), never scored."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeAlias

from workbench.rewards.cache import FeatureCache, cache_key
from workbench.rollout.backends.base import Backend, ChatError

LLM: TypeAlias = Backend | Callable[[str], str]
"""A model a feature asks: a :class:`~workbench.rollout.backends.base.Backend` (its ``chat_batch``) or a
``str -> str`` callable."""


def guess_model_id(llm: LLM) -> str:
    """A stable name for a model, used in cache keys (set ``model_id=`` explicitly where this guesses poorly)."""
    for obj in (llm, getattr(llm, "model", None)):
        if obj is None:
            continue
        for attr in ("model_id", "model_name", "name_or_path"):
            v = getattr(obj, attr, None)
            if isinstance(v, str) and v:
                return v
        cfg = getattr(obj, "config", None)
        v = getattr(cfg, "_name_or_path", None)
        if isinstance(v, str) and v:
            return v
    return getattr(llm, "__qualname__", None) or type(llm).__qualname__


def batch_caller(llm: LLM) -> Callable[[list[str]], list[str]]:
    """``prompts -> replies`` for a Backend (one ``chat_batch``; or ``chat`` per prompt), or a
    ``str -> str`` callable (one call each). Prompts that fail raise :class:`ChatError` with the
    replies of the others and each failure's message."""
    if hasattr(llm, "chat_batch"):
        return lambda prompts: list(llm.chat_batch(list(prompts)))
    if hasattr(llm, "chat"):
        return lambda prompts: _one_by_one(llm.chat, prompts)
    if callable(llm):
        return lambda prompts: _one_by_one(llm, prompts)
    raise TypeError(f"expected a Backend or a str -> str callable, got {type(llm).__name__}")


def _one_by_one(call: Callable[[str], str], prompts: Sequence[str]) -> list[str]:
    replies: list[str | None] = []
    errors: list[str | None] = []
    for p in prompts:
        try:
            replies.append(call(p))
            errors.append(None)
        except Exception as e:  # this prompt failed; the others keep their replies
            replies.append(None)
            errors.append(f"{type(e).__name__}: {e}")
    if any(e is not None for e in errors):
        raise ChatError(replies, errors)
    return replies  # type: ignore[return-value]


def cached_calls(
    llm_batch: Callable[[list[str]], list[str]],
    prompts: Sequence[str | None],
    namespace: Sequence[str],
    cache: FeatureCache,
) -> list[tuple[str | None, str | None, bool]]:
    """Reply per prompt as ``(raw, error, cached)``; None prompts are skipped. Each distinct prompt is sent once.

    Only replies are cached. A prompt whose call failed (a :class:`ChatError` from the backend:
    connection refused, timeout, HTTP status...; or any exception of the whole call) gets
    ``raw=None`` and the failure's message as ``error``, and is sent again next time.
    """
    keys = [None if p is None else cache_key(*namespace, p) for p in prompts]
    got = cache.get_many([k for k in keys if k is not None])
    todo = list(dict.fromkeys(p for p, k in zip(prompts, keys) if p is not None and k not in got))
    replies: dict[str, tuple[str | None, str | None]] = {}
    if todo:
        outs: list[str | None]
        errs: list[str | None]
        try:
            outs, errs = list(llm_batch(todo)), [None] * len(todo)
            if len(outs) != len(todo):
                raise RuntimeError(f"model returned {len(outs)} replies for {len(todo)} prompts")
        except ChatError as e:  # some prompts failed: keep the others' replies
            outs, errs = list(e.replies), list(e.errors)
            if len(outs) != len(todo) or len(errs) != len(todo):
                outs, errs = [None] * len(todo), [str(e)] * len(todo)
        except Exception as e:  # the whole call failed: a missing judgment, recorded (and retried next time)
            outs, errs = [None] * len(todo), [f"{type(e).__name__}: {e}"] * len(todo)
        new = {}
        for p, o, err in zip(todo, outs, errs):
            if err is not None or o is None:
                replies[p] = (None, err or "model returned nothing (None)")
                continue
            replies[p] = (str(o), None)
            new[cache_key(*namespace, p)] = str(o).encode("utf-8")
        cache.put_many(new)
    out: list[tuple[str | None, str | None, bool]] = []
    for p, k in zip(prompts, keys):
        if p is None:
            out.append((None, None, False))
        elif k in got:
            out.append((got[k].decode("utf-8"), None, True))
        else:
            raw, err = replies[p]
            out.append((raw, err, False))
    return out
