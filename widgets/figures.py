"""Plotly figures built from run tables, how they are saved, and their static copies (views only)."""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

if TYPE_CHECKING:
    import ipywidgets as W

#: The one copy of plotly.js that saved figures (and the static dashboard) beside it load.
PLOTLY_JS = "plotly.min.js"
#: A directory holding this file is a run directory: figures under it share its plotly.js.
_RUN_MARKER = "config.json"


def metrics_bar(summary: pd.DataFrame, metrics: tuple[str, ...] = ("em", "cem", "f1")) -> go.Figure:
    """Grouped bars: one group per metric, one bar per method."""
    fig = go.Figure()
    for method, row in summary.iterrows():
        fig.add_bar(name=str(method), x=list(metrics), y=[row.get(m) for m in metrics])
    fig.update_layout(barmode="group", title="Answer metrics by method", yaxis_range=[0, 1], height=350)
    return fig


def searches_histogram(df: pd.DataFrame) -> go.Figure:
    """Distribution of search counts per trajectory, per method."""
    fig = go.Figure()
    for method, g in df.groupby("method"):
        fig.add_histogram(x=g["n_searches"], name=str(method), opacity=0.7)
    fig.update_layout(barmode="overlay", title="Searches per trajectory", xaxis_title="searches", height=300)
    return fig


def table_view(df: pd.DataFrame, labels: dict[str, str] | None = None, digits: int = 3) -> Any:
    """``df`` as a table that fits a notebook cell: headers renamed by ``labels`` and wrapped, floats with ``digits``
    decimals, a missing value shown as ``workbench.eval.compare.MISSING``."""
    from workbench.eval.compare import MISSING

    def label(c: Any) -> str:  # wraps between words and after a slash, never inside a word
        return str((labels or {}).get(c, c)).replace("_", " ").replace("/", "/\u200b")

    shown = df.rename(columns=label)
    lists = [c for c in shown.columns
             if shown[c].dtype == object and shown[c].map(lambda v: isinstance(v, (list, tuple))).any()]
    return (shown.style.format(precision=digits, na_rep=MISSING)
            .format(lambda v: " | ".join(map(str, v)) if isinstance(v, (list, tuple)) else v, subset=lists,
                    na_rep=MISSING)
            .set_table_styles([{"selector": "th", "props": "white-space:normal;max-width:7em;font-size:12px;"
                                                            "overflow-wrap:normal;padding:2px 6px"},
                               {"selector": "td", "props": "font-size:12px;padding:2px 6px"}]))


# --------------------------------------------------------------------------- saved figures


def asset_dir(path: str | os.PathLike) -> Path:
    """Where the plotly.js shared by the figure file ``path`` lives: the run directory above it (the nearest
    folder with a ``config.json``, or one that already holds ``plotly.min.js``), else the figure's own folder."""
    start = Path(path).resolve().parent
    for d in (start, *start.parents):
        if (d / PLOTLY_JS).is_file() or (d / _RUN_MARKER).is_file():
            return d
    return start


def shared_plotlyjs(directory: str | os.PathLike) -> Path:
    """``<directory>/plotly.min.js``, written once (atomically) from the installed plotly."""
    from plotly.offline import get_plotlyjs

    from workbench.util.io import atomic_write_text

    target = Path(directory) / PLOTLY_JS
    if not target.is_file():
        atomic_write_text(target, get_plotlyjs())
    return target


def save_figure(fig: go.Figure, path: str | os.PathLike) -> Path:
    """Write ``fig`` as an HTML page that opens offline, loading plotly.js from one shared file: the run's
    ``plotly.min.js`` (:func:`asset_dir`) instead of one 4.8 MB copy per folder of figures."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    js = shared_plotlyjs(asset_dir(path))
    fig.write_html(str(path), include_plotlyjs=os.path.relpath(js, path.parent).replace(os.sep, "/"), full_html=True)
    return path


_INLINED_PLOTLYJS = r"<script[^>]*>\s*/\*\*\s*\*\s*plotly\.js v[0-9.]+.*?</script>"


def externalize_plotlyjs(page: str, path: str | os.PathLike) -> str:
    """``page`` (to be saved at ``path``) with each inlined copy of plotly.js replaced: the first by a
    ``<script src>`` of the shared ``plotly.min.js`` (:func:`asset_dir`), the others dropped."""
    import re

    path = Path(path)
    matches = list(re.finditer(_INLINED_PLOTLYJS, page, flags=re.S))
    if not matches:
        return page
    js = shared_plotlyjs(asset_dir(path))
    src = html.escape(os.path.relpath(js, path.resolve().parent).replace(os.sep, "/"))
    parts, last = [], 0
    for i, m in enumerate(matches):
        parts += [page[last : m.start()], f'<script type="text/javascript" src="{src}"></script>' if i == 0 else ""]
        last = m.end()
    return "".join(parts) + page[last:]


# --------------------------------------------------------------------------- figures inside widgets
# A view whose figures follow its controls draws each figure, whole, into an ``Output`` widget on every change.
# Not a ``go.FigureWidget`` updated in place: its updates reach the browser as one-off messages (restyle, relayout)
# that a view created later never sees (a reloaded page; a view made while the browser still loads the widget's
# module), and its synced state keeps the traces it was created with, because plotly refreshes that state only
# when the figure itself is displayed, not as a child of a box: a reloaded page shows it empty. And plotly.js,
# redrawing a scatter trace in place, draws no text label again at a point whose label was once empty. An
# ``Output`` widget's outputs are synced state, and each change is a fresh plot.


def figure_view(fig: go.Figure) -> W.Output:
    """An ``ipywidgets.Output`` showing ``fig``; :func:`redraw` it after changing the figure."""
    import ipywidgets

    out = ipywidgets.Output()
    redraw(out, fig)
    return out


def redraw(out: W.Output, fig: go.Figure) -> None:
    """Show ``fig`` in the ``Output`` widget ``out`` instead of what it showed: plotly's own mime bundle (JupyterLab
    draws it; a static rendering reads it), set as the widget's outputs, so it needs no kernel to be shown."""
    import plotly.io as pio

    bundle = pio.renderers["plotly_mimetype"].to_mimebundle(fig.to_dict())
    text = f"<plotly figure: {fig.layout.title.text or 'untitled'}>"
    out.outputs = ({"output_type": "display_data", "metadata": {}, "data": {**bundle, "text/plain": text}},)


# --------------------------------------------------------------------------- executed notebooks
# A notebook executed headlessly (papermill) has no widget state and no kernel once saved. So that it
# reads well rendered statically (nbconvert HTML, nbviewer), ``workbench.apps.notebooks.static_outputs``
# gives every plotly figure a ``text/html`` rendering (plotly.js embedded once per notebook, by
# plotly's ``notebook`` renderer) and every ipywidget the ``text/html`` snapshot below. JupyterLab
# still prefers the interactive mime types; nbconvert picks ``text/html`` when there is no widget state.

STATIC_NOTE = "Static snapshot of an interactive view: open in JupyterLab to interact."


def widget_html(w: Any) -> str:
    """A widget's current values as static HTML, with a one-line note: text and HTML widgets as they
    show, controls as ``description: value``, figures drawn by plotly.js, ``Output`` widgets' outputs."""
    body = _widget_part(w)
    return (f"<div class='wb-static-widget'><div style='font-size:12px;color:#666;font-style:italic'>"
            f"{html.escape(STATIC_NOTE)}</div>{body}</div>")


def _widget_part(w: Any) -> str:
    import ipywidgets as W

    layout = getattr(w, "layout", None)
    if layout is not None and (getattr(layout, "display", None) == "none" or getattr(layout, "visibility", None) == "hidden"):
        return ""
    if _is_figure_widget(w):
        return _figure_html(w)
    if isinstance(w, (W.Tab, W.Accordion)):
        # the open tab first, as the reader left it; the others folded
        titles = list(getattr(w, "titles", ()) or ())
        chosen = w.selected_index if isinstance(w.selected_index, int) else None
        order = ([chosen] if chosen is not None else []) + [i for i in range(len(w.children)) if i != chosen]

        def title(i: int) -> str:
            return html.escape(str(titles[i]) if i < len(titles) and titles[i] else f"tab {i + 1}")

        return "".join(
            f"<div style='margin:6px 0'><div style='font-weight:bold;border-bottom:1px solid #ddd'>{title(i)} "
            f"<span style='font-weight:normal;color:#666'>(open tab)</span></div>{_widget_part(w.children[i])}</div>"
            if i == chosen else
            f"<details style='margin:4px 0'><summary style='font-weight:bold'>{title(i)}</summary>"
            f"{_widget_part(w.children[i])}</details>" for i in order)
    if isinstance(w, W.Box):
        flex = "display:flex;flex-wrap:wrap;gap:8px;align-items:flex-start" if isinstance(w, W.HBox) else ""
        return f"<div style='{flex}'>" + "".join(_widget_part(c) for c in w.children) + "</div>"
    if isinstance(w, (W.HTML, W.HTMLMath)):
        return f"<div>{w.value}</div>"
    if isinstance(w, W.Label):
        return f"<div>{html.escape(str(w.value))}</div>"
    if isinstance(w, W.Output):
        return "".join(_output_html(o) for o in w.outputs)
    if isinstance(w, W.Image):
        import base64

        return f"<img src='data:image/{w.format};base64,{base64.b64encode(w.value).decode()}'>"
    if isinstance(w, W.Button):
        return ""
    if isinstance(w, (W.FloatProgress, W.IntProgress)):
        return f"<progress value='{w.value - w.min}' max='{max(w.max - w.min, 1e-9)}' style='width:200px'></progress>"
    if isinstance(w, W.ValueWidget):
        from ipywidgets.widgets.widget_selection import _MultipleSelection, _Selection

        desc = getattr(w, "description", "") or type(w).__name__
        value = w.label if isinstance(w, (_Selection, _MultipleSelection)) else w.value
        return (f"<span style='display:inline-block;margin:2px 10px 2px 0;font-size:13px'><b>{html.escape(str(desc))}</b>: "
                f"{html.escape(_short(value))}</span>")
    return ""


def _is_figure_widget(w: Any) -> bool:
    try:
        return isinstance(w, go.FigureWidget)
    except ImportError:  # FigureWidget needs anywidget; without it there are none
        return False


def _short(v: Any, limit: int = 120) -> str:
    text = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _figure_html(fig: go.Figure) -> str:
    """A figure as an HTML fragment; plotly.js comes from the notebook renderer's one embedded copy."""
    import plotly.io as pio

    pio.renderers._activate_pending_renderers()  # the `notebook` renderer embeds plotly.js (once) if not yet done
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, default_width="100%", validate=False)


def _output_html(out: dict[str, Any]) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        return f"<pre>{html.escape(''.join(out.get('text', '')))}</pre>"
    if kind == "error":
        return f"<pre style='color:#b00020'>{html.escape(str(out.get('ename')))}: {html.escape(str(out.get('evalue')))}</pre>"
    data = out.get("data", {})
    if "text/html" in data:
        return "".join(data["text/html"]) if isinstance(data["text/html"], list) else str(data["text/html"])
    if "application/vnd.plotly.v1+json" in data:
        return _figure_html(go.Figure(data["application/vnd.plotly.v1+json"]))
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            return f"<img src='data:{mime};base64,{data[mime]}'>"
    if "text/plain" in data:
        text = data["text/plain"]
        return f"<pre>{html.escape(''.join(text) if isinstance(text, list) else str(text))}</pre>"
    return ""
