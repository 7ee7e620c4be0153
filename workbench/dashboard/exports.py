"""Tables the served dashboard hands the browser as files: CSV (a spreadsheet) and Parquet (pandas, DuckDB,
polars), each table's "export" buttons built by :func:`download_buttons`."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pandas as pd

#: The files a filtered table exports to.
EXPORT_KINDS = ("csv", "parquet")


def export_table(df: pd.DataFrame, kind: str) -> io.BytesIO:
    """``df`` as a CSV or Parquet file in memory (what a download button hands the browser)."""
    buf = io.BytesIO()
    if kind == "csv":
        buf.write(df.to_csv(index=False).encode("utf-8"))
    elif kind == "parquet":
        df.to_parquet(buf, index=False)
    else:
        raise ValueError(f"export kind {kind!r} is not one of {EXPORT_KINDS}")
    buf.seek(0)
    return buf


def download_buttons(rows: Callable[[], pd.DataFrame], stem: str, label: str = "export", width: int = 130) -> list[Any]:
    """One Panel download button per kind of :data:`EXPORT_KINDS`: ``rows()`` (called when clicked, so it is what the
    table shows then) as ``<stem>.<kind>``."""
    import panel as pn

    return [pn.widgets.FileDownload(callback=lambda kind=kind: export_table(rows(), kind), filename=f"{stem}.{kind}",
                                    label=f"{label} {kind.upper()}", button_type="light", width=width, embed=False)
            for kind in EXPORT_KINDS]
