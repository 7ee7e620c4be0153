"""A reward preset: a paper's rubric under its name, with what it needs computed besides the cheap features.

:class:`RewardPreset` builds the paper's :class:`~workbench.rewards.rubric.Rubric` (its defaults are the paper's
values) and declares its :class:`FeatureNeeds` (embeddings, a judge, an evidence model). A method package defines
its preset (``workbench/methods/<paper>/reward.py``); the trainer, ``workbench eval`` and the exports read the
declaration, never a preset's name.

    >>> FeatureNeeds(encoder=True) | FeatureNeeds(judges=("yesno",))
    FeatureNeeds(encoder=True, evidence_model=False, judges=('yesno',))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from workbench.rewards.rubric import Rubric


@dataclass(frozen=True)
class FeatureNeeds:
    """Expensive features a reward reads (each one is NaN in the table when not computed)."""

    encoder: bool = False
    """Sentence embeddings: query similarity (When-to-Search Eq. 7–8) and recall by embedding
    (DynaSearcher Eq. 3: a gold passage counts if matched by title *or* embedding)."""

    evidence_model: bool = False
    """A cross-family model answering from the policy's evidence alone (R-Search Eq. 4)."""

    judges: tuple[str, ...] = ()
    """LLM judges the reward can read (``workbench.rewards.judges.JUDGES`` names). Optional:
    presets fall back to a string metric when no judge column is present."""

    def __or__(self, other: FeatureNeeds) -> FeatureNeeds:
        return FeatureNeeds(self.encoder or other.encoder, self.evidence_model or other.evidence_model,
                            tuple(dict.fromkeys((*self.judges, *other.judges))))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line: what must be computed ("nothing beyond the cheap features" when empty)."""
        parts = (["embeddings"] if self.encoder else []) + (["evidence model"] if self.evidence_model else []) + [
            f"judge {j} (optional)" for j in self.judges]
        return ", ".join(parts) or "nothing beyond the cheap features"

    def uncomputed(self, features: pd.DataFrame) -> list[tuple[str, tuple[str, ...], str]]:
        """What this reward needs that the features table lacks: ``(need, its columns, how to compute it)`` for each
        declared need whose columns are absent or all NaN (an eval run's features have no embeddings, judges or
        evidence model). Optional judges are listed only when the table has no column of any judge.

        >>> import pandas as pd
        >>> [n for n, _, _ in FeatureNeeds(evidence_model=True).uncomputed(pd.DataFrame({"evidence_f1": [None]}))]
        ['evidence model']
        """
        def empty(cols: tuple[str, ...]) -> bool:
            return all(c not in features.columns or features[c].isna().all() for c in cols)

        out = []
        if self.evidence_model and empty(NEED_COLUMNS["evidence_model"]):
            out.append(("evidence model", NEED_COLUMNS["evidence_model"], HOW_TO_COMPUTE["evidence_model"]))
        if self.encoder and empty(NEED_COLUMNS["encoder"]):
            out.append(("embeddings", NEED_COLUMNS["encoder"], HOW_TO_COMPUTE["encoder"]))
        judges = tuple(f"judge_{j}" for j in self.judges)
        if judges and empty(judges):
            out.append((f"judge {', '.join(self.judges)} (optional: the reward falls back to a string metric)", judges,
                        HOW_TO_COMPUTE["judges"].format(names=", ".join(repr(j) for j in self.judges))))
        return out


#: The feature columns each expensive need fills (NaN without it).
NEED_COLUMNS = {
    "evidence_model": ("evidence_f1",),
    "encoder": ("query_sim_mean", "query_sim_paper", "recall_embed"),
}
#: How to compute each need for a stored run (``featurize_run`` rewrites its ``features.parquet``) or in training.
HOW_TO_COMPUTE = {
    "evidence_model": ("workbench.rewards.featurize_run(run, evidence_model=\"<model path>\"), or train with "
                       "`workbench train --evidence-model PATH`"),
    "encoder": ("workbench.rewards.featurize_run(run, encoder=None) (the default all-MiniLM-L6-v2), or train with "
                "`workbench train --encoder default`"),
    "judges": "workbench.rewards.featurize_run(run, judges=[...]) with judges {names}, or `workbench train --judges NAME`",
}


@dataclass(frozen=True)
class RewardPreset:
    """A paper's reward: ``build(**params)`` returns its Rubric with the paper's defaults; ``needs`` is what the
    feature step must compute for it.

        >>> from workbench.rewards.rubric import Rubric
        >>> const = RewardPreset("const", lambda **kw: Rubric([lambda c: c["em"]], [1], kw, name="const"))
        >>> const().name, const.needs.describe()
        ('const', 'nothing beyond the cheap features')
    """

    name: str
    build: Callable[..., Rubric]
    needs: FeatureNeeds = FeatureNeeds()

    def __call__(self, weights: dict[str, float] | None = None, **params: Any) -> Rubric:
        """The rubric with ``params`` (validated by the rubric) and optional component ``weights`` overrides."""
        rubric = self.build(**params)
        return rubric.with_weights(**weights) if weights else rubric

    @property
    def doc(self) -> str:
        return self.build.__doc__ or ""
