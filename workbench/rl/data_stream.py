"""``DataStream``: the training questions as an endless, resumable stream (curriculum or shuffled)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from workbench.data.example import Example

if TYPE_CHECKING:
    from workbench.data.world import World

#: Question orders (``TrainConfig.curriculum``): shuffled per epoch, fewer hops first, fewer sources first.
CURRICULA = ("none", "hops", "sources")

T = TypeVar("T")


class DataStream:
    """An endless, resumable stream of examples: epoch by epoch, in curriculum or shuffled order.

    The order of epoch e depends only on ``(seed, e)``, so ``state_dict()`` = ``(epoch, pos)``
    is all a resume needs.
    """

    def __init__(self, examples: Sequence[Example], seed: int = 0, curriculum: str = "none"):
        if not examples:
            raise ValueError("DataStream: no training examples (check the dataset and split)")
        if curriculum not in CURRICULA:
            raise ValueError(f"curriculum {curriculum!r} is not one of {CURRICULA}")
        self.examples = list(examples)
        self.seed = seed
        self.curriculum = curriculum
        self.epoch = 0
        self.pos = 0
        self._order = self.order(0)

    def order(self, epoch: int) -> list[int]:
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.examples)).tolist()
        if self.curriculum == "none":
            return perm
        rank = {i: r for r, i in enumerate(perm)}  # ties keep the epoch's shuffle

        def key(i: int) -> tuple:
            ex = self.examples[i]
            hops = ex.hops if ex.hops is not None else 99
            if self.curriculum == "hops":
                return (hops, rank[i])
            return (len(set(ex.sources)) or 99, hops, rank[i])

        return sorted(range(len(self.examples)), key=key)

    def take(self, n: int) -> list[Example]:
        out = []
        for _ in range(n):
            if self.pos >= len(self._order):
                self.epoch += 1
                self.pos = 0
                self._order = self.order(self.epoch)
            out.append(self.examples[self._order[self.pos]])
            self.pos += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = int(state["epoch"]), int(state["pos"])
        self._order = self.order(self.epoch)


def repeat_by_hops(items: Sequence[T], hops_of: Callable[[T], int | None], repeats: dict[str, int] | None) -> list[T]:
    """``items`` with each one of ``h`` hops repeated ``repeats[str(h)]`` times (once where not named), each copy
    beside the original: what a :class:`DataStream` then shuffles (``TrainConfig.hop_repeats``)."""
    if not repeats:
        return list(items)
    return [x for x in items for _ in range(int(repeats.get(str(hops_of(x)), 1)))]


class SplitSettings(Protocol):
    """What :func:`split_examples` reads of a :class:`~workbench.rl.train_config.TrainConfig` (which imports this
    module, so the type is described here)."""

    @property
    def split(self) -> str: ...

    @property
    def eval_split(self) -> str: ...

    @property
    def question_types(self) -> Sequence[str] | None: ...

    @property
    def eval_limit(self) -> int: ...


def split_examples(config: SplitSettings, world: World | None, examples: Sequence[Example] | None,
                   eval_examples: Sequence[Example] | None) -> tuple[list[Example], list[Example]]:
    """``(train, held_out)`` for a TrainConfig: the given examples or the world's splits, filtered by
    ``question_types``, held-out cut to ``eval_limit``; a held-out question that is also a training
    question is an error."""
    train = list(examples) if examples is not None else world.split(config.split)
    if eval_examples is not None:
        held = list(eval_examples)
    elif world is not None:
        held = world.split(config.eval_split)
    else:
        held = []
    if config.question_types:
        types = set(config.question_types)
        train = [e for e in train if e.qtype in types]
        held = [e for e in held if e.qtype in types]
        if not train:
            raise ValueError(f"TrainConfig.question_types {sorted(types)}: no training question has these types")
    held = held[: config.eval_limit]
    seen = {e.id for e in train}
    leaked = [e.id for e in held if e.id in seen]
    if leaked:
        raise ValueError(f"{len(leaked)} held-out questions are also training questions (e.g. {leaked[0]!r}); "
                         "use a different eval_split")
    return train, held


def carve_validation(train: Sequence[Example], n: int, seed: int) -> tuple[list[Example], list[Example]]:
    """``(train, validation)``: ``n`` of the training questions, drawn by ``seed`` and kept in their order, set aside
    (``TrainConfig.val_questions``), so the adapter can be chosen on questions that are neither trained on nor the
    reported held-out ones. Raises ``ValueError`` when too few would be left to train on."""
    if n <= 0:
        return list(train), []
    if n >= len(train):
        raise ValueError(f"TrainConfig.val_questions {n}: only {len(train)} training questions; set aside fewer")
    picked = set(np.random.default_rng([seed, 7]).choice(len(train), size=n, replace=False).tolist())
    return [e for i, e in enumerate(train) if i not in picked], [e for i, e in enumerate(train) if i in picked]
