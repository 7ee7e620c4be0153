"""A method: one published system, declared once in its own package with the objects it is made of.

A :class:`Method` holds its parts — the protocol class (how the agent talks), the reward preset and its stages,
the optimizer preset with the paper's training values, the expert's turn writer, and what the reward needs
computed — each with where the value comes from in the paper. ``workbench eval``, ``workbench train``, the
expert traces and the exports read these objects; nothing looks a method's parts up by name.

Each package in ``workbench/methods/`` defines ``METHODS`` (a tuple of declarations); ``workbench.methods`` lists
them (see ``docs/architecture.md``, "How to add a method").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from workbench.protocols.base import Protocol
from workbench.rewards.preset import FeatureNeeds, RewardPreset

if TYPE_CHECKING:
    from workbench.rl.expert import ExpertWriter
    from workbench.rl.train_config import TrainConfig


@dataclass(frozen=True)
class Method:
    """One published system (or baseline) as the workbench runs it."""

    name: str
    """The name ``--method`` takes (``workbench methods`` lists them)."""
    title: str
    """Paper title (or a one-line description for a baseline)."""
    citation: str
    """Authors and year, e.g. ``"Hao et al., 2025"``."""
    protocol: type[Protocol]
    """The protocol class: tags, prompts, parsing, actions (``protocol.py`` of its package, or another paper's)."""
    protocol_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the protocol for this method (e.g. ``{"variant": "tool_call"}``)."""
    reward: RewardPreset | None = None
    """The reward preset (``reward.py`` of its package); None for pure baselines."""
    reward_params: Mapping[str, Any] = field(default_factory=dict)
    """Preset parameter overrides (the preset's own defaults are the paper's)."""
    stages: Mapping[str, Any] = field(default_factory=dict)
    """Reward-stage schedule as TrainConfig fields (``stage_switch_step`` / ``stage_switch_searches``)."""
    optimizer: str | None = None
    """Optimizer preset of ``workbench.rl.config`` (grpo, dapo, gspo, dspo, dr_grpo, reinforce_pp)."""
    optimizer_overrides: Mapping[str, Any] = field(default_factory=dict)
    """LossConfig fields that differ from the preset for this paper."""
    expert: ExpertWriter | None = None
    """How the expert writes this protocol's turns (``expert.py`` of its package); None: no expert traces."""
    train: Mapping[str, Any] = field(default_factory=dict)
    """TrainConfig values ``workbench train --method`` uses here (LoRA on a small model); fields
    not named keep TrainConfig's CPU-sized defaults. The paper's full-scale values are in ``paper``."""
    paper: Mapping[str, Any] = field(default_factory=dict)
    """The paper's own training values (``lr``, ``group_size``, ``max_turns``, ``top_k``...), as
    published for full fine-tuning at scale; reported by ``workbench methods NAME`` and used by
    scale-out exports."""
    needs: FeatureNeeds | None = None
    """Expensive features beyond the reward preset's own declaration (None: the preset's)."""
    source: str = ""
    """Where the paper is: its arXiv id (with authors and title where the citation alone is ambiguous), or its title
    and venue when it has none."""
    notes: Mapping[str, str] = field(default_factory=dict)
    """Where each declared value comes from: field name -> "Sec. 4.1", "Table 3", "Eq. 11"..."""
    baseline: bool = False
    """A comparison method (no training recipe of its own)."""

    # ------------------------------------------------------------------ parts
    def get_protocol(self, **overrides: Any) -> Protocol:
        """The protocol instance with this method's keyword arguments (and ``overrides``)."""
        return self.protocol(**{**self.protocol_kwargs, **overrides})

    def training_protocol(self, **overrides: Any) -> Protocol:
        """The protocol as ``workbench train --method`` rolls it out: TrainConfig's default ``protocol_kwargs``
        (observations as chat turns), this method's arguments on top, then ``overrides`` — what expert traces and
        SFT must share with RL."""
        from workbench.rl.train_config import DEFAULT_PROTOCOL_KWARGS

        return self.protocol(**{**DEFAULT_PROTOCOL_KWARGS, **self.protocol_kwargs, **overrides})

    @property
    def tools(self) -> tuple[str, ...]:
        """Tool kinds the method needs (its protocol's ``required_tools``)."""
        return tuple(self.protocol.required_tools)

    def rubric(self, **params: Any) -> Any:
        """The reward rubric with this method's parameters (and ``params`` on top)."""
        if self.reward is None:
            raise ValueError(f"method {self.name!r} declares no reward preset; pass one with --reward")
        return self.reward(**{**self.reward_params, **params})

    def feature_needs(self) -> FeatureNeeds:
        """What the feature step must compute for this method's reward."""
        base = self.reward.needs if self.reward is not None else FeatureNeeds()
        return base | self.needs if self.needs is not None else base

    def train_defaults(self) -> dict[str, Any]:
        """TrainConfig fields this method sets (the user's own values go on top)."""
        out: dict[str, Any] = {"method": self.name, "protocol": self.protocol.name}
        if self.protocol_kwargs:
            out["protocol_kwargs"] = dict(self.protocol_kwargs)
        if self.reward is not None:
            out["reward"] = self.reward.name
        if self.reward_params:
            out["reward_params"] = dict(self.reward_params)
        if self.optimizer:
            out["preset"] = self.optimizer
        if self.optimizer_overrides:
            out["loss_overrides"] = dict(self.optimizer_overrides)
        return {**out, **dict(self.train), **dict(self.stages)}

    def train_config(self, config_class: type[TrainConfig] | None = None, **overrides: Any) -> TrainConfig:
        """The run this method declares (:meth:`train_defaults`), with ``overrides`` on top: every part still
        mixes (``train_config(preset="dspo")`` is this method with the DSPO optimizer). ``config_class``: a
        TrainConfig subclass to build (``SFTConfig``).

        ``protocol_kwargs`` from the method are merged over TrainConfig's default ``{"observation_mode": "chat"}``.
        Dict fields that refine a part merge with the method's (``protocol_kwargs``, ``reward_params``,
        ``loss_overrides`` key by key) as long as that part is the method's; choosing another part (``protocol``,
        ``reward``, ``preset``) drops the method's refinements of it: ``preset="dspo"`` gives DSPO as published,
        not DSPO with the method's GRPO tweaks."""
        from workbench.rl.train_config import DEFAULT_PROTOCOL_KWARGS, TrainConfig

        cls = config_class or TrainConfig
        base = {k: v for k, v in self.train_defaults().items() if k not in cls.KEEPS_OWN}
        base["protocol_kwargs"] = {**DEFAULT_PROTOCOL_KWARGS, **base.get("protocol_kwargs", {})}
        for part, refine in (("protocol", "protocol_kwargs"), ("reward", "reward_params"), ("preset", "loss_overrides")):
            if part in overrides and overrides[part] != base.get(part):
                base.pop(refine, None)
                if refine == "protocol_kwargs":
                    base[refine] = dict(DEFAULT_PROTOCOL_KWARGS)
            elif refine in overrides and refine in base:
                overrides = {**overrides, refine: {**base[refine], **overrides[refine]}}
        return cls.from_dict({**base, **overrides})

    def summary(self) -> dict[str, Any]:
        """A flat description for ``workbench methods`` and the dashboard."""
        return {"method": self.name, "paper": f"{self.title} ({self.citation})", "protocol": self.protocol.name,
                "tools": ",".join(self.tools) or "-", "reward": self.reward.name if self.reward else "-",
                "optimizer": self.optimizer or "-", "needs": self.feature_needs().describe(), "baseline": self.baseline,
                "source": self.source}
