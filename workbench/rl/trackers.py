"""Experiment trackers: a copy of a run's logs in TensorBoard, Weights & Biases, MLflow or Trackio (``--report-to``).

The run directory stays the source of truth (``config.json``, ``metrics.jsonl``, ``steps/``, ``metrics.json``): a
tracker gets what is written there, when it is written, through its library's own API, offline, into the run
directory. Several at once: ``--report-to tensorboard,trackio``.

============  ==========================  ==========================================  ======================================
name          library (extra)             where, in the run directory                 look at it
============  ==========================  ==========================================  ======================================
tensorboard   torch.utils.tensorboard     ``tensorboard/`` (event files)              ``tensorboard --logdir <run>/tensorboard``
              (``.[tensorboard]``)
wandb         wandb (``.[wandb]``)        ``wandb/offline-run-*/`` (offline mode)     ``wandb sync <run>/wandb/offline-run-*``
                                                                                      or ``wandb leet <run>/wandb``
mlflow        mlflow-skinny + SQLAlchemy  ``mlflow/mlflow.db`` (SQLite store) and     ``mlflow ui --backend-store-uri
              (``.[mlflow]``)             ``mlflow/artifacts/``                       sqlite:///<run>/mlflow/mlflow.db``
trackio       trackio (``.[trackio]``)    ``trackio/workbench.db`` (local store)      ``TRACKIO_DIR=<run>/trackio trackio
                                                                                      show --project workbench``
============  ==========================  ==========================================  ======================================

What each one gets: the run's ``config.json`` once; every finite number of each ``metrics.jsonl`` row under its own
name at the row's ``step`` (loss, KL, reward mean/std per component, kept-group share, rollout/trainer logprob
difference, seconds per phase, the held-out ``eval_*`` rows...); a completions table per training step
(``completions``: question, gold answers, the turns' text, answer, searches, cover-EM, the reward and its components,
advantage, kept), and for an evaluation one per method (``completions/<method>``) with ``metrics.json``'s numbers.

MLflow 3 refuses a ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE`` is set (its file store is in maintenance
mode), so the MLflow tracker writes MLflow's SQLite store. Trackio fixes its store directory when it is imported
(``TRACKIO_DIR``), so the Trackio tracker points trackio's module-level directories at ``<run>/trackio`` while its
run is open (as trackio's own tests do): one Trackio run per process at a time.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the command line reads tracker_names from here: no pandas when imported
    import pandas as pd

    from workbench.core.trajectory import Trajectory
    from workbench.data.example import Example
    from workbench.storage.runs import Run

PROJECT = "workbench"
"""The project / experiment name runs are logged under in every tracker (the run's id is the run name)."""
STEP_TABLE_ROWS = 64
"""Rows of a training step's completions table (the step's first trajectories, groups together)."""
EVAL_TABLE_ROWS = 1000
"""Rows of an evaluation's completions table per method."""
TEXT_CHARS = 4000
"""Characters of a table cell's text (the turns), the rest cut with an ellipsis."""


# ============================================================================= the trackers


class Tracker:
    """One library's logger for one run. A subclass per library, registered in :data:`TRACKERS` by its name."""

    name: ClassVar[str]
    module: ClassVar[str]
    """What must import for this tracker (checked before a run starts)."""
    extra: ClassVar[str]
    """The ``pyproject.toml`` extra that installs it."""

    def __init__(self, run_dir: Path, run_name: str, config: Mapping[str, Any]):
        self.run_dir, self.run_name = Path(run_dir), run_name

    @property
    def where(self) -> str:
        """Where it writes, and how to look at it (one line)."""
        raise NotImplementedError

    def log_scalars(self, values: Mapping[str, float], step: int) -> None:
        raise NotImplementedError

    def log_table(self, key: str, table: pd.DataFrame, step: int) -> None:
        """``table``: a pandas DataFrame (text and numbers)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


TRACKERS: dict[str, type[Tracker]] = {}
"""Tracker classes by name (``--report-to`` values)."""


def register_tracker(cls: type[Tracker]) -> type[Tracker]:
    TRACKERS[cls.name] = cls
    return cls


@register_tracker
class TensorBoardTracker(Tracker):
    """Event files under ``<run>/tensorboard/`` (``torch.utils.tensorboard.SummaryWriter``): scalars, the config as
    text (``config``), each table as a 2-D text tensor (TensorBoard's Text tab draws it as a table, header first)."""

    name, module, extra = "tensorboard", "tensorboard", "tensorboard"

    def __init__(self, run_dir: Path, run_name: str, config: Mapping[str, Any]):
        super().__init__(run_dir, run_name, config)
        from torch.utils.tensorboard import SummaryWriter

        self.dir = self.run_dir / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(self.dir))
        self._text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    @property
    def where(self) -> str:
        return f"{self.dir} (tensorboard --logdir {self.dir})"

    def _text(self, tag: str, data: Any, step: int) -> None:
        from tensorboard.plugins.text.summary_v2 import text_pb

        self.writer.file_writer.add_summary(text_pb(tag, data), step)

    def log_scalars(self, values: Mapping[str, float], step: int) -> None:
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def log_table(self, key: str, table: pd.DataFrame, step: int) -> None:
        import numpy as np

        rows = [[str(c) for c in table.columns]] + [[_cell(v) for v in r] for r in table.itertuples(index=False)]
        self._text(key, np.array(rows, dtype=object), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


@register_tracker
class WandbTracker(Tracker):
    """An offline W&B run under ``<run>/wandb/`` (``wandb.init(mode="offline", dir=<run>)``): scalars, the config,
    each table as a ``wandb.Table``. ``wandb sync`` uploads it later."""

    name, module, extra = "wandb", "wandb", "wandb"

    def __init__(self, run_dir: Path, run_name: str, config: Mapping[str, Any]):
        super().__init__(run_dir, run_name, config)
        import wandb

        self.wandb = wandb
        self.run = wandb.init(dir=str(self.run_dir), project=PROJECT, name=run_name, config=dict(config),
                              mode="offline", reinit="create_new",
                              settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))

    @property
    def where(self) -> str:
        return f"{self.run.dir.rsplit('/files', 1)[0]} (offline; wandb sync it, or wandb leet {self.run_dir / 'wandb'})"

    def log_scalars(self, values: Mapping[str, float], step: int) -> None:
        self.run.log(dict(values), step=step)

    def log_table(self, key: str, table: pd.DataFrame, step: int) -> None:
        self.run.log({key: self.wandb.Table(dataframe=table)}, step=step)

    def close(self) -> None:
        self.run.finish()


@register_tracker
class MLflowTracker(Tracker):
    """An MLflow run in the SQLite store ``<run>/mlflow/mlflow.db``, artifacts in ``<run>/mlflow/artifacts``
    (``MlflowClient``): scalars as metrics, the config as flattened params and as ``config.json``, each table as a
    JSON table artifact (``log_table``: MLflow's artifact view shows it)."""

    name, module, extra = "mlflow", "mlflow", "mlflow"
    PARAM_CHARS = 6000  # MLflow's longest param value
    PARAMS_PER_CALL = 100  # MLflow's log_batch limit

    def __init__(self, run_dir: Path, run_name: str, config: Mapping[str, Any]):
        super().__init__(run_dir, run_name, config)
        from mlflow import MlflowClient
        from mlflow.entities import Param

        self.dir = self.run_dir / "mlflow"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.uri = f"sqlite:///{self.dir / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(PROJECT)
        exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(
            PROJECT, artifact_location=(self.dir / "artifacts").as_uri())
        self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        params = [Param(k, str(v)[: self.PARAM_CHARS]) for k, v in flatten(config).items()]
        for i in range(0, len(params), self.PARAMS_PER_CALL):
            self.client.log_batch(self.run_id, params=params[i: i + self.PARAMS_PER_CALL])
        self.client.log_dict(self.run_id, dict(config), "config.json")

    @property
    def where(self) -> str:
        return f"{self.dir} (mlflow ui --backend-store-uri {self.uri})"

    def log_scalars(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in values.items()])

    def log_table(self, key: str, table: pd.DataFrame, step: int) -> None:
        self.client.log_table(self.run_id, data=table, artifact_file=f"{key}/step_{step:06d}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


@register_tracker
class TrackioTracker(Tracker):
    """A Trackio run in the local store ``<run>/trackio/`` (``trackio.init`` / ``log`` / ``finish``): scalars, the
    config, each table as a ``trackio.Table``. Trackio reads ``TRACKIO_DIR`` once, when imported: its module-level
    directories point at ``<run>/trackio`` while this run is open (one Trackio run per process at a time)."""

    name, module, extra = "trackio", "trackio", "trackio"
    #: trackio's module-level store paths (trackio/utils.py) and the modules that import them by name.
    PATHS = {"TRACKIO_DIR": ("trackio", "trackio.utils", "trackio.sqlite_storage", "trackio.bucket_storage",
                             "trackio.registry_bucket"),
             "MEDIA_DIR": ("trackio.utils", "trackio.media.media", "trackio.table", "trackio.run"),
             "ARTIFACTS_DIR": ("trackio.utils",)}

    def __init__(self, run_dir: Path, run_name: str, config: Mapping[str, Any]):
        super().__init__(run_dir, run_name, config)
        import trackio

        self.trackio = trackio
        self.dir = self.run_dir / "trackio"
        self._saved = self._point_store_at(self.dir)
        with contextlib.redirect_stdout(io.StringIO()):  # its dashboard hints: `where` says how to look
            self.run = trackio.init(project=PROJECT, name=run_name, config=dict(config), embed=False,
                                    resume="allow", auto_log_cpu=False, auto_log_gpu=False)
        from trackio.sqlite_storage import SQLiteStorage

        db = SQLiteStorage.get_project_db_path(PROJECT)
        if self.dir not in Path(db).parents:
            raise RuntimeError(f"trackio would write to {db}, not under {self.dir}: this trackio version keeps its store "
                               f"elsewhere; pin trackio as pyproject.toml's extra does")

    def _point_store_at(self, d: Path) -> dict[tuple[str, str], Any]:
        saved = {}
        values = {"TRACKIO_DIR": d, "MEDIA_DIR": d / "media", "ARTIFACTS_DIR": d / "artifacts"}
        for attr, modules in self.PATHS.items():
            for name in modules:
                mod = importlib.import_module(name)
                if hasattr(mod, attr):
                    saved[(name, attr)] = getattr(mod, attr)
                    setattr(mod, attr, values[attr])
        return saved

    @property
    def where(self) -> str:
        return f"{self.dir} (TRACKIO_DIR={self.dir} trackio show --project {PROJECT})"

    def log_scalars(self, values: Mapping[str, float], step: int) -> None:
        self.run.log(dict(values), step=step)

    def log_table(self, key: str, table: pd.DataFrame, step: int) -> None:
        self.run.log({key: self.trackio.Table(dataframe=table)}, step=step)

    def close(self) -> None:
        from trackio import context_vars

        try:
            with contextlib.redirect_stdout(io.StringIO()):
                if context_vars.current_run.get() is self.run:
                    self.trackio.finish()  # also forgets it: no second finish at exit
                else:
                    self.run.finish()
        finally:
            for (name, attr), value in self._saved.items():
                setattr(importlib.import_module(name), attr, value)


# ============================================================================= names -> trackers


def tracker_names(value: str | Sequence[str] | None) -> tuple[str, ...]:
    """The tracker names of a ``--report-to`` value (comma-separated or a list; ``none`` or empty: none), checked:
    an unknown name is a ValueError naming the valid ones, a library that is not installed a ModuleNotFoundError
    naming the extra that installs it.

    >>> tracker_names("none"), tracker_names("")
    ((), ())
    """
    parts = value.split(",") if isinstance(value, str) else list(value or ())
    names: list[str] = []
    for raw in parts:
        name = str(raw).strip().lower()
        if name in ("", "none") or name in names:
            continue
        if name not in TRACKERS:
            raise ValueError(f"--report-to: unknown tracker {name!r}; valid: {', '.join(TRACKERS)} (comma-separated), "
                             "or none")
        names.append(name)
    for name in names:
        cls = TRACKERS[name]
        if importlib.util.find_spec(cls.module) is None:
            raise ModuleNotFoundError(f"--report-to {name} needs the {cls.module} package: pip install -e '.[{cls.extra}]'")
    return tuple(names)


class Trackers:
    """The trackers of one run: opened on first use (reading the run's ``config.json`` then), every call sent to
    each. With no names it does nothing, so callers need not check.

    Args:
        names: a ``--report-to`` value (:func:`tracker_names`).
        run: the run (a :class:`workbench.storage.runs.Run`, or anything with ``path``, ``id`` and ``config``).
        say: where the line saying where each tracker writes goes (None: nowhere).
    """

    def __init__(self, names: str | Sequence[str] | None, run: Run | None = None,
                 say: Callable[[str], None] | None = print):
        self.names = tracker_names(names)
        self.run, self.say = run, say
        self.trackers: list[Tracker] | None = None

    def __bool__(self) -> bool:
        return bool(self.names)

    def _open(self) -> list[Tracker]:
        if self.trackers is None:
            self.trackers = []
            config = self.run.config
            for name in self.names:
                tracker = TRACKERS[name](Path(self.run.path), self.run.id, config)
                self.trackers.append(tracker)
                if self.say is not None:
                    self.say(f"[report-to] {name}: {tracker.where}")
        return self.trackers

    def log_row(self, row: Mapping[str, Any], step: int | None = None) -> None:
        """Every finite number of a ``metrics.jsonl`` row, at ``step`` (default: the row's ``step``)."""
        if not self.names:
            return
        values = scalars(row)
        step = int(row.get("step", 0) if step is None else step)
        if values:
            for t in self._open():
                t.log_scalars(values, step)

    def log_table(self, key: str, table: pd.DataFrame | None, step: int) -> None:
        if not self.names or table is None or not len(table):
            return
        for t in self._open():
            t.log_table(key, table, step)

    def log_step(self, row: Mapping[str, Any], trajectories: Sequence[Trajectory], features: pd.DataFrame | None = None,
                 examples: Iterable[Example] = ()) -> None:
        """A training step: its metrics row and its completions table (``completions``)."""
        if not self.names:
            return
        self.log_row(row)
        self.log_table("completions", completions_table(trajectories, features, examples, STEP_TABLE_ROWS),
                       int(row["step"]))

    def close(self) -> None:
        """Finish each tracker's run (flushes what it holds); later calls open them again."""
        trackers, self.trackers = self.trackers or [], None
        for t in trackers:
            t.close()


def report_run(run: Run, names: str | Sequence[str] | None, say: Callable[[str], None] | None = print,
               step: int = 0) -> None:
    """Send a finished run's files to the trackers ``names``: its config, every number of ``metrics.json`` (nested
    keys joined with ``/``) at ``step``, and one completions table per method of ``trajectories.parquet`` (beside
    ``features.parquet``'s rewards): what ``workbench eval --report-to`` logs."""
    trackers = Trackers(names, run, say)
    if not trackers:
        return
    import pandas as pd

    from workbench.rewards.feature_io import load_features

    trackers.log_row(flatten(run.metrics()), step)
    trajs = run.trajectories()
    feats = load_features(run) if run.exists("features.parquet") else None
    examples = run.examples() if run.exists("examples.jsonl") else []
    by_method: dict[str, list[int]] = {}
    for i, t in enumerate(trajs):
        by_method.setdefault(str(t.meta.get("method") or t.protocol), []).append(i)
    for method, idx in by_method.items():
        f = feats.iloc[idx].reset_index(drop=True) if isinstance(feats, pd.DataFrame) and len(feats) == len(trajs) else None
        trackers.log_table(f"completions/{method}", completions_table([trajs[i] for i in idx], f, examples,
                                                                      EVAL_TABLE_ROWS), step)
    trackers.close()


# ============================================================================= what they log


def scalars(row: Mapping[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics row (``step`` and text left out; a NaN is no point on a curve).

    >>> scalars({"step": 3, "loss": 0.5, "kl": float("nan"), "stage": 1, "note": "x", "ok": True})
    {'loss': 0.5, 'stage': 1.0, 'ok': 1.0}
    """
    out = {}
    for k, v in row.items():
        if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
            out[str(k)] = float(v)
    return out


def flatten(d: Mapping[str, Any], prefix: str = "", sep: str = "/") -> dict[str, Any]:
    """Nested keys joined with ``sep``; lists and other leaves kept as they are (an empty mapping leaves no key).

    >>> flatten({"a": 1, "b": {"c": 2, "d": {"e": [3]}}})
    {'a': 1, 'b/c': 2, 'b/d/e': [3]}
    """
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + sep, sep))
        else:
            out[key] = v
    return out


def completions_table(trajectories: Sequence[Trajectory], features: pd.DataFrame | None = None,
                      examples: Iterable[Example] = (), max_rows: int | None = None) -> pd.DataFrame:
    """One row per trajectory (the first ``max_rows``): ``step``, ``question``, ``gold`` (the example's answers,
    `` | ``-joined), ``turns`` (every turn's text, policy and observations, cut at :data:`TEXT_CHARS`), ``answer``,
    ``searches``, and from ``features`` (rows aligned with ``trajectories``) ``cem``, ``reward``, each
    ``reward_<component>``, ``advantage`` and ``kept`` where present."""
    import pandas as pd

    golds = {str(e.id): list(e.answers) for e in examples}
    trajs = list(trajectories)[:max_rows]
    table = pd.DataFrame({
        "step": [int(t.meta.get("step", 0) or 0) for t in trajs],
        "question": [t.question for t in trajs],
        "gold": [" | ".join(golds.get(str(t.example_id), [])) for t in trajs],
        "turns": [_cut(t.response_text) for t in trajs],
        "answer": ["" if t.answer is None else str(t.answer) for t in trajs],
        "searches": [int(t.n_searches) for t in trajs],
    })
    if features is not None and len(features) >= len(trajs):
        f = features.iloc[: len(trajs)].reset_index(drop=True)
        cols = [c for c in f.columns if c in ("cem", "reward", "advantage", "kept")
                or (c.startswith("reward_") and c != "reward_preset")]
        for c in cols:
            table[c] = f[c].astype(bool) if c == "kept" else pd.to_numeric(f[c], errors="coerce").astype(float)
    return table


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:.4g}"
    return str(v)
