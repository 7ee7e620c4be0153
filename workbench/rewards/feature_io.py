"""Reading and writing a run's features table (``features.parquet``), atomically, in the declared types
(``workbench.rewards.columns``: counts int64, flags bool, text string, NULL = missing; ``workbench schema``)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from workbench.storage.runs import Run, run_status

FEATURES_FILE = "features.parquet"


def save_features(run: Run | str | os.PathLike, df: pd.DataFrame, name: str = FEATURES_FILE) -> Path:
    """Write the features table to ``run.path / "features.parquet"`` (atomically). ``run``: a Run or a directory."""
    import pyarrow.parquet as pq

    from workbench.rewards.columns import arrow_table
    from workbench.util.io import atomic_path

    path = Path(getattr(run, "path", run)) / name
    table = arrow_table(df.reset_index(drop=True))  # a value that does not fit its column's type raises here
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return path


def load_features(run: Run | str | os.PathLike, name: str = FEATURES_FILE) -> pd.DataFrame:
    """Read a features table written by :func:`save_features`: numeric columns float64 (NaN = missing) as
    ``compute_features`` returns them (files from before the typed columns read the same)."""
    import pyarrow.parquet as pq

    from workbench.rewards.columns import frame_from_arrow

    path = Path(getattr(run, "path", run)) / name
    if not path.exists():
        status = run_status(path.parent)
        if not status.complete:
            raise FileNotFoundError(f"no features table at {path}: the run is incomplete ({status.note}); open a "
                                    "complete run (workbench.storage.runs.newest_run), or finish this one")
        raise FileNotFoundError(f"no features table at {path}; compute it with workbench.rewards.featurize_run(run)")
    return frame_from_arrow(pq.read_table(path))
