"""ipywidgets + plotly builders used by the notebooks (views only; computation lives in ``workbench``)."""
