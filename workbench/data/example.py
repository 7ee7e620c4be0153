"""``Example``: one question with its gold answers and what is known about how to answer it."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class Example:
    """A question with gold answers (aliases) and its multi-hop annotations.

    Every loader (the synthetic world, FlashRAG, HotpotQA, 2Wiki, MuSiQue, Bamboogle)
    produces this one shape; fields a dataset does not annotate stay empty / None.
    """

    id: str
    question: str
    answers: list[str]
    """Gold answer and its aliases; metrics take the max over them."""
    dataset: str = "world"
    split: str = "dev"
    hops: int | None = None
    """Number of retrieval hops the question needs (gold ``i`` of DynaSearcher Eq. 5)."""
    qtype: str | None = None
    """Question type, e.g. ``1hop``, ``compositional``, ``comparison``, ``inference``, ``chain``."""
    decomposition: list[str] = field(default_factory=list)
    """Sub-questions, one per hop, in order."""
    kg_path: list[dict[str, str]] = field(default_factory=list)
    """Gold KG path: dicts with ``head``, ``relation``, ``tail`` names (and ``*_id`` where known)."""
    supporting_ids: list[str] = field(default_factory=list)
    supporting_titles: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    """Sources the supporting passages come from (``wiki``, ``news``, ``academic``)."""
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.question, str):
            raise TypeError(f"Example {self.id!r}: question must be a string, got {type(self.question).__name__}")
        if isinstance(self.answers, str):
            self.answers = [self.answers]
        self.answers = [str(a) for a in (self.answers or [])]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Example:
        known = {f.name for f in fields(cls)}
        extra = {k: v for k, v in d.items() if k not in known}
        kwargs = {k: v for k, v in d.items() if k in known}
        if extra:
            kwargs.setdefault("meta", {})
            kwargs["meta"] = {**kwargs["meta"], **extra}
        return cls(**kwargs)


def save_examples(examples: list[Example], path: str | Path) -> Path:
    """Write examples as JSON lines (atomically)."""
    from workbench.util.io import atomic_write_text

    text = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in examples)
    return atomic_write_text(path, text)


def load_examples(path: str | Path) -> list[Example]:
    """Read examples written by :func:`save_examples`."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"examples file not found: {path}")
    out = []
    with path.open(encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(Example.from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError) as e:
                raise ValueError(f"{path}:{i}: not a valid example line ({e})") from e
    return out


def as_example(obj: Any, id: str = "", question: str = "") -> Example:
    """An :class:`Example` from an Example, a dict (dataset row: ``answers`` / ``golden_answers`` /
    ``answer`` / ``ground_truth`` / ``target`` / ``solution``, plus ``hops``, ``supporting_titles``...),
    or bare gold answers (a string or a list)."""
    if isinstance(obj, Example):
        return obj
    if isinstance(obj, Mapping):
        d = dict(obj)
        answers: Any = None
        for k in ("answers", "golden_answers", "answer", "ground_truth", "target", "solution", "gold"):
            if d.get(k) is not None:
                answers = d[k]
                break
        if isinstance(answers, Mapping):  # e.g. verl/Search-R1 {"target": [...]}
            return as_example({**{k: v for k, v in d.items() if k not in ("ground_truth",)}, **answers}, id, question)
        known = {"hops", "qtype", "decomposition", "kg_path", "supporting_ids", "supporting_titles", "sources", "dataset",
                 "split", "meta"}
        kw = {k: _plain(d[k]) for k in known if k in d and d[k] is not None}
        if "hops" in kw:
            kw["hops"] = _int_or_none(kw["hops"])
        return Example(id=str(d.get("id") or id), question=str(d.get("question") or question),
                       answers=as_answers(answers), **kw)
    return Example(id=id, question=question, answers=as_answers(obj))


def _is_array(v: Any) -> bool:
    """Whether ``v`` is a numpy array (a Parquet or pandas row's list); numpy is not imported for it: without numpy
    loaded no value is one, and the command line's parsers read this module."""
    np = sys.modules.get("numpy")
    return np is not None and isinstance(v, np.ndarray)


def _plain(v: Any) -> Any:
    if _is_array(v):
        return [_plain(x) for x in v.tolist()]
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _int_or_none(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else int(f)


def as_answers(a: Any) -> list[str]:
    """Gold answers as a list of strings: a bare string is one alias, ``None`` none (missing entries dropped)."""
    if a is None:
        return []
    if isinstance(a, str):
        return [a]
    if _is_array(a):
        a = a.tolist()
    if isinstance(a, (list, tuple)):
        return [str(x) for x in a if x is not None]
    return [str(a)]
