"""``EvalConfig``: what one evaluation run evaluates, written once.

The attribute docstrings below are the documentation of ``run_eval``'s options *and* the
``--help`` text of ``workbench eval`` (read with :func:`field_docs`), so the two cannot drift.

    >>> cfg = EvalConfig(methods="direct, search_r1", limit=2)
    >>> cfg.methods, cfg.rollout_config().max_turns
    (('direct', 'search_r1'), 4)
    >>> EvalConfig(methods="search-r1")
    Traceback (most recent call last):
    ...
    ValueError: unknown method 'search-r1'; valid methods: direct, dynasearcher, ircot, iter_retgen, rsearch_dag, rsearch_evidence, search_r1, vanilla_rag, when_to_search
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.rollout.engine import RolloutConfig

DEFAULT_MODEL = "smollm2-135m"


def valid_methods() -> list[str]:
    """Protocol names ``--method`` accepts (``workbench.protocols.PROTOCOLS``)."""
    from workbench.protocols import PROTOCOLS

    return sorted(PROTOCOLS)


def parse_methods(methods: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``"direct,search_r1"`` or a list -> a tuple of known protocol names (order kept, repeats dropped).

    >>> parse_methods(" direct ,search_r1,direct")
    ('direct', 'search_r1')
    """
    items = methods.split(",") if isinstance(methods, str) else list(methods)
    names = list(dict.fromkeys(str(m).strip() for m in items if str(m).strip()))
    valid = valid_methods()
    if not names:
        raise ValueError(f"no method given; valid methods: {', '.join(valid)}")
    for name in names:
        if name not in valid:
            raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(valid)}")
    return tuple(names)


@dataclass
class EvalConfig:
    """Options of an evaluation run (``workbench eval`` flags; ``run_eval`` keyword arguments)."""

    methods: tuple[str, ...] = ("direct", "search_r1")
    """Protocol name(s) to evaluate, comma-separated: direct, search_r1, dynasearcher, rsearch_evidence,
    rsearch_dag, when_to_search, vanilla_rag, iter_retgen, ircot."""

    dataset: str = "world"
    """``world`` (the synthetic multi-hop world), a dataset name found by ``load_dataset`` (hotpotqa,
    2wiki, musique, bamboogle), or a path to a benchmark file (HotpotQA, 2Wiki, MuSiQue, Bamboogle,
    FlashRAG JSONL)."""

    model: str = DEFAULT_MODEL
    """Model alias, local path (directory or .gguf) or an HF id already in the local cache."""

    limit: int | None = None
    """Evaluate the first N questions of the split (None: all of them)."""

    split: str | None = None
    """World split (train, dev, test; default dev). For a file: the split label (default: guessed
    from the file name)."""

    retriever: str = "bm25"
    """Passage search: bm25, or dense (chromadb + all-MiniLM-L6-v2)."""

    corpus: str | None = None
    """FlashRAG corpus JSONL to search. Default: the world's passages, or for a benchmark file a
    corpus built from the context paragraphs of all its questions."""

    group_size: int = 1
    """Rollouts per question (G); more than 1 needs temperature > 0 to differ."""

    temperature: float = 0.0  # greedy: evaluation, not exploration
    """Sampling temperature (0 = greedy)."""

    max_turns: int = 4  # R-Search uses 4 turns
    """Policy turns per trajectory (each search is a turn); methods without tools (direct) get 1."""

    max_new_tokens: int = 256
    """Tokens per policy turn."""

    seed: int = 0
    """Sampling seed."""

    device: str = "auto"
    """cpu, cuda, or auto (CUDA when available)."""

    skip_unavailable: bool = False
    """Skip (with a message) methods whose tools the dataset cannot provide (e.g. dynasearcher's
    knowledge graph outside the world) instead of stopping with an error."""

    def __post_init__(self) -> None:
        self.methods = parse_methods(self.methods)
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 (the number of questions to evaluate; None = all), got {self.limit}")
        from workbench.tools.toolbox import RETRIEVERS

        if self.retriever not in RETRIEVERS:
            raise ValueError(f"unknown retriever {self.retriever!r}; valid: {', '.join(RETRIEVERS)}")
        if not str(self.dataset).strip():
            raise ValueError("dataset is empty: pass 'world', a dataset name or a file path")
        self.rollout_config()  # validates group_size, max_turns, max_new_tokens, temperature

    def rollout_config(self, max_turns: int | None = None) -> RolloutConfig:
        from workbench.rollout.engine import RolloutConfig

        return RolloutConfig(
            group_size=self.group_size,
            max_turns=self.max_turns if max_turns is None else max_turns,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["methods"] = list(self.methods)
        return d


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass, one line each: field name -> text.

    >>> field_docs(EvalConfig)["seed"]
    'Sampling seed.'
    """
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for prev, node in zip(body, body[1:]):
        if (isinstance(prev, ast.AnnAssign) and isinstance(prev.target, ast.Name) and isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            docs[prev.target.id] = " ".join(node.value.value.split())
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in docs.items() if k in names}
