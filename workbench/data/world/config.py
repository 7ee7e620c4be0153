"""A world's config (``WorldConfig``) and the default one, read from ``data/world.json``."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from workbench.util.paths import repo_root


@dataclass
class WorldConfig:
    """Seed and sizes of the synthetic world; the same config always gives the same world."""

    seed: int = 13
    """Seeds every random stream (one ``random.Random(f"{seed}:{stage}")`` per build stage)."""
    n_entities: int = 300
    """Named entities (people, places, organisations, works, awards); date/year ``value``
    entities come on top. At least 40 (enough for three-generation families)."""
    n_passages: int = 1000
    """Corpus size: fact passages topped up with distractors (at least 10% distractors, so
    the corpus can exceed this when the facts alone need more passages)."""
    n_questions: int = 600
    """Questions over all splits (fewer only if a tiny world runs out of distinct ones)."""
    splits: tuple[float, float, float] = (0.7, 0.15, 0.15)
    """train / dev / test shares, applied per question type (stratified)."""

    def __post_init__(self) -> None:
        self.splits = tuple(float(s) for s in self.splits)  # JSON gives a list
        for name in ("seed", "n_entities", "n_passages", "n_questions"):
            if not isinstance(getattr(self, name), int) or isinstance(getattr(self, name), bool):
                raise TypeError(f"WorldConfig.{name} must be an int, got {getattr(self, name)!r}")
        if self.n_entities < 40:
            raise ValueError(f"WorldConfig: n_entities={self.n_entities} is too small; use at least 40")
        if self.n_passages < 0 or self.n_questions < 1:
            raise ValueError(
                f"WorldConfig: need n_passages >= 0 and n_questions >= 1 (got {self.n_passages}, {self.n_questions})"
            )
        if len(self.splits) != 3 or min(self.splits) < 0 or abs(sum(self.splits) - 1.0) > 1e-6:
            raise ValueError(
                f"WorldConfig: splits must be three shares >= 0 summing to 1 (train, dev, test), got {self.splits}"
            )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["splits"] = list(self.splits)
        return d

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> WorldConfig:
        """Read a JSON object of config fields; an unknown key is an error."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: not a readable world config JSON file ({type(e).__name__}: {e}); pass a file "
                             "like data/world.json") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a world config must be a JSON object, got {type(data).__name__}")
        valid = [f.name for f in fields(cls)]
        for key in data:
            if key not in valid:
                raise ValueError(f"{path}: unknown world config key {key!r}; valid keys: {', '.join(valid)}")
        try:
            return cls(**data)
        except TypeError as e:  # a value of the wrong type, named by __post_init__
            raise ValueError(f"{path}: {e}") from None


def default_world_config() -> WorldConfig:
    """The project's default world: ``<repo>/data/world.json``."""
    return WorldConfig.from_file(repo_root() / "data" / "world.json")
