"""The public signatures of ``rl/``, ``rollout/`` and ``rewards/`` name their types: no ``Any`` where one exists.

Read with ``ast``; nothing is imported. A function is public when its name, its class's and its module's do not start
with ``_`` (dunders such as ``__init__`` and ``__call__`` count; nested functions do not). It fails when

- a parameter with one of the names in :data:`TYPED` is annotated ``Any`` (bare, optional, or as the item of a
  sequence: ``Sequence[Any]``, ``list[Any] | None``) or not annotated at all: each of those names has a type here
  (``config`` a ``TrainConfig`` or a small ``Protocol`` of what is read of it, ``tokenizer`` transformers'
  ``PreTrainedTokenizerBase``, ``features`` a pandas ``DataFrame``...);
- it returns ``Any`` in the same sense, unless :data:`RETURNS_ANY` lists it with the reason.

``dict[str, Any]`` / ``Mapping[str, Any]`` (a JSON-like record: a metrics row, a config file) and ``**kwargs: Any``
say what they are and pass. Types that only a type checker needs are imported under ``if TYPE_CHECKING:``, so these
annotations load nothing (``tests/test_cli_fast.py`` checks that the command line imports no heavy module).

The rules are functions of a directory, so each is also checked against a small package written to ``tmp_path``
that breaks it on purpose.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("workbench/rl", "workbench/rollout", "workbench/rewards")

#: Parameter names that stand for a value with a type in the workbench (or its libraries), never for "anything".
TYPED = frozenset({
    "config",  # TrainConfig (or a Protocol of the fields read, where TrainConfig imports the module)
    "world",  # workbench.data.world.World
    "tokenizer", "tok",  # transformers.PreTrainedTokenizerBase
    "policy",  # workbench.rl.policy.LoRAPolicy
    "trainer",  # workbench.rl.trainer.Trainer, or the Protocol of what a step reads of it
    "model",  # a loaded causal LM (rollout.backends.base.CausalLM), a model path, or a LLM
    "backend", "base_backend",  # workbench.rollout.backends.base.Backend
    "llm",  # rewards.llm.LLM: a Backend or a str -> str callable
    "protocol",  # workbench.protocols.base.Protocol
    "toolbox",  # workbench.tools.base.Toolbox
    "rubric", "rubrics",  # workbench.rewards.rubric.Rubric
    "table", "tables",  # a pandas DataFrame (trackers), a RewardTable (rewards)
    "features",  # a pandas DataFrame of features (or a run that stores one)
    "example", "examples", "example_like",  # workbench.data.example.Example (or what as_example reads)
    "traj", "trajs", "trajectories",  # workbench.core.trajectory.Trajectory
    "run",  # workbench.storage.runs.Run
    "encoder", "evidence_model", "judges",  # rewards.embeddings / rewards.evidence / rewards.judges
    "cache",  # rewards.cache.CacheLike
    "passages",  # workbench.core.types.Passage, by id or in order
    "dtype",  # torch.dtype or its name
    "past",  # transformers' key/value Cache
    "lengths",  # policy tokens per trajectory
})

#: ``path::function`` -> why it returns ``Any``.
RETURNS_ANY = {
    "workbench/rl/__init__.py::__getattr__": "lazy re-export: the attribute's type depends on the name asked for",
    "workbench/rollout/__init__.py::__getattr__": "lazy re-export: the attribute's type depends on the name asked for",
    "workbench/rollout/backends/__init__.py::__getattr__": "lazy re-export of a backend class (on first use)",
}

#: One-parameter containers whose item is the value itself (``Sequence[Any]`` is as loose as ``Any``).
CONTAINERS = frozenset({"Sequence", "list", "Iterable", "Iterator", "Collection", "set", "frozenset", "tuple",
                        "Optional", "type"})


@dataclass(frozen=True)
class Loose:
    """A public signature's ``Any`` (``param`` is ``"return"`` for the return type; ``annotation`` None: missing)."""

    path: str
    line: int
    function: str
    param: str
    annotation: str | None

    def __str__(self) -> str:
        what = f"annotated {self.annotation}" if self.annotation is not None else "not annotated"
        return f"{self.path}:{self.line} {self.function}: {self.param} {what}"


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.Any, collections.abc.Sequence
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return node.value.rpartition(".")[2]
    return None


def is_loose(ann: ast.expr) -> bool:
    """``Any``, or a union / optional / one-item container with a loose member (``dict[str, Any]`` is not)."""
    if _name(ann) == "Any":
        return True
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):  # X | Y
        return is_loose(ann.left) or is_loose(ann.right)
    if isinstance(ann, ast.Subscript):
        outer, inner = _name(ann.value), ann.slice
        items = list(inner.elts) if isinstance(inner, ast.Tuple) else [inner]
        if outer == "Union":
            return any(is_loose(x) for x in items)
        if outer == "tuple" and len(items) == 2 and isinstance(items[1], ast.Constant) and items[1].value is ...:
            return is_loose(items[0])  # tuple[Any, ...]
        if outer in CONTAINERS and len(items) == 1:
            return is_loose(items[0])
    return False


def public_functions(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """``(function, qualified name)`` of the module's public functions and its public classes' methods."""

    def public(name: str) -> bool:
        return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and public(node.name):
                yield node, prefix + node.name
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                yield from walk(node.body, f"{prefix}{node.name}.")

    yield from walk(tree.body, "")


def loose_signatures(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Loose]:
    """Every named parameter of :data:`TYPED` and every return type that is loose (see the module docstring)."""
    out = []
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if path.name.startswith("_") and path.name != "__init__.py":
                continue
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for fn, qual in public_functions(tree):
                a = fn.args
                for p in a.posonlyargs + a.args + a.kwonlyargs:
                    if p.arg in TYPED and (p.annotation is None or is_loose(p.annotation)):
                        ann = None if p.annotation is None else ast.unparse(p.annotation)
                        out.append(Loose(rel, fn.lineno, qual, p.arg, ann))
                if fn.returns is not None and is_loose(fn.returns) and f"{rel}::{qual}" not in RETURNS_ANY:
                    out.append(Loose(rel, fn.lineno, qual, "return", ast.unparse(fn.returns)))
    return out


# ----------------------------------------------------------------------------- the packages


def test_public_signatures_name_their_types():
    bad = loose_signatures(ROOT)
    assert not bad, ("public signatures with Any where a concrete type exists (import it under `if TYPE_CHECKING:`, or "
                     "describe what is read with a small typing.Protocol where importing it would be a cycle):\n"
                     + "\n".join(f"  {b}" for b in bad))


def test_every_allowed_any_return_still_exists():
    found = set()
    for key in RETURNS_ANY:
        rel, _, qual = key.partition("::")
        path = ROOT / rel
        if path.exists():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found |= {f"{rel}::{q}" for fn, q in public_functions(tree)
                      if f"{rel}::{q}" == key and fn.returns is not None and is_loose(fn.returns)}
    gone = sorted(set(RETURNS_ANY) - found)
    assert not gone, f"take these off RETURNS_ANY (gone, or typed now): {gone}"


# ----------------------------------------------------------------------------- the rules, on packages that break them


def test_loose_parameters_and_returns_are_found(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "mod.py").write_text(
        "from __future__ import annotations\n"
        "from collections.abc import Mapping, Sequence\n"
        "from typing import Any, Optional\n\n"
        "def build(config: Any, tokenizer, rows: Any) -> Any: ...\n"  # rows: not a typed name
        "def score(features: 'Any', trajs: Sequence[Any] | None = None, *,\n"
        "          model: Optional[Any] = None) -> list[Any]: ...\n"
        "def fine(config: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]: ...\n"
        "def _private(config: Any) -> Any: ...\n\n"
        "class Store:\n"
        "    def __init__(self, run: Any, cache: tuple[Any, ...]): ...\n"
        "    def _load(self, run: Any) -> Any: ...\n\n"
        "class _Hidden:\n"
        "    def open(self, run: Any) -> Any: ...\n",
        encoding="utf-8")
    (pkg / "_impl.py").write_text("from typing import Any\ndef build(config: Any) -> Any: ...\n", encoding="utf-8")
    got = {(b.function, b.param, b.annotation) for b in loose_signatures(tmp_path, ("pkg",))}
    assert got == {
        ("build", "config", "Any"), ("build", "tokenizer", None), ("build", "return", "Any"),
        ("score", "features", "'Any'"), ("score", "trajs", "Sequence[Any] | None"), ("score", "model", "Optional[Any]"),
        ("score", "return", "list[Any]"),
        ("Store.__init__", "run", "Any"), ("Store.__init__", "cache", "tuple[Any, ...]"),
    }
    assert str(next(b for b in loose_signatures(tmp_path, ("pkg",)) if b.param == "tokenizer")) == (
        "pkg/mod.py:5 build: tokenizer not annotated")
