"""Execute the parameterized notebooks headlessly with papermill."""

from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

from workbench.util.paths import repo_root

log = logging.getLogger(__name__)

KERNEL = "workbench"


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def _has_groups(config: dict[str, Any]) -> bool:
    """A run rolled out several samples a question (a training run, or an eval with ``--group-size`` > 1)."""
    sizes = [config.get("group_size"), (config.get("eval") or {}).get("group_size"),
             (config.get("rollout") or {}).get("group_size")]
    return config.get("kind") == "train" or any(isinstance(g, int) and g > 1 for g in sizes)


def _uses_kg(config: dict[str, Any]) -> bool:
    """A run with a method whose protocol searches the knowledge graph (DynaSearcher's, say)."""
    from workbench.methods import get_method

    names = list((config.get("eval") or {}).get("methods") or config.get("methods") or [])
    names += [config["method"]] if isinstance(config.get("method"), str) else []
    for name in names:
        try:
            if "kg" in get_method(str(name).split("+", 1)[0]).tools:
                return True
        except (KeyError, ValueError):
            continue  # a method this install does not know
    return False


#: What a notebook's default run must have to show anything: "the newest run" is the newest that has it.
NEEDS = {"groups": ("groups of samples (group size > 1)", _has_groups),
         "kg": ("a method that searches the knowledge graph", _uses_kg)}


def pick_run(run_dir: str = "", parameter: str = "run_dir", required: bool = True, needs: str | None = None) -> Any:
    """The run a notebook opens: ``run_dir``, else the newest complete run under ``runs/`` (``list_runs()[0]``) or,
    with ``needs`` (a key of :data:`NEEDS`), the newest complete run that has what the notebook shows (the reward
    playground needs groups, the KG explorer KG searches; the quickstart's run has neither), saying which it took.
    Without one: a FileNotFoundError naming the notebook's ``parameter``, or None when not ``required``."""
    from workbench.storage.runs import list_runs, newest_run, open_run

    if needs is not None and needs not in NEEDS:
        raise ValueError(f"pick_run(needs={needs!r}): one of {', '.join(sorted(NEEDS))}")
    if run_dir:
        return open_run(run_dir)
    try:
        newest = newest_run()
    except FileNotFoundError as e:
        if not required:
            return None
        raise FileNotFoundError(f"{e}; or set {parameter} in the notebook's parameters cell") from None
    if needs is None:
        return newest
    what, has = NEEDS[needs]
    for run in (r for r in list_runs() if r.complete):
        try:
            ok = has(run.config)
        except (OSError, ValueError):
            continue  # an unreadable config.json: not this run
        if ok:
            if run.path != newest.path:
                print(f"{parameter}: {run.path.name}, the newest run with {what}; the newest run, {newest.path.name}, "
                      f"has none (set {parameter} to choose)")
            return run
    print(f"{parameter}: no run under {newest.path.parent} has {what}; showing the newest, {newest.path.name}")
    return newest


def notebook_path(name: str) -> Path:
    """``01_trajectory_inspector`` (or with ``.ipynb``) -> its path; a clear error listing valid names."""
    stem = name[:-6] if name.endswith(".ipynb") else name
    p = notebooks_dir() / f"{stem}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in notebooks_dir().glob("*.ipynb"))
        raise FileNotFoundError(f"no notebook {name!r}; valid names: {', '.join(valid)}")
    return p


#: The kernelspec of the ``workbench`` kernel as ``make setup`` registers it (and JupyterLab copies into a notebook).
KERNELSPEC = {"display_name": "Python (workbench)", "language": "python", "name": KERNEL}


def normal_form(path: str | os.PathLike, python_version: str | None = None) -> str:
    """The text JupyterLab saves for the notebook at ``path`` right after opening it with the workbench kernel.

    JupyterLab writes the running kernel's ``kernelspec`` and full ``language_info`` into the notebook's metadata
    when the kernel starts, so a committed notebook that lacks a field of them shows as changed before anyone
    edits it. The normal form: nbformat 4.5 (cell ids), those two fields as the kernel reports them (ipykernel's
    ``language_info``; ``python_version`` in place of this interpreter's, as its ``version``), nbformat's JSON
    layout and a final newline. ``Path(p).write_text(normal_form(p))`` puts a notebook in it.
    """
    import nbformat
    from ipykernel.ipkernel import IPythonKernel

    nb = nbformat.read(str(path), as_version=4)
    if nb.nbformat_minor < 5:  # JupyterLab saves 4.5, which gives each cell an id
        nb = nbformat.v4.upgrade(nb, from_version=4, from_minor=nb.nbformat_minor)
    nbformat.validate(nb)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = dict(IPythonKernel.language_info)
    if python_version:
        nb.metadata["language_info"]["version"] = python_version
    return nbformat.writes(nb) + "\n"


def kernel_name(preferred: str = KERNEL) -> str:
    """The ``workbench`` kernel when installed (``make setup`` registers it), else ``python3``."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if preferred in specs:
        return preferred
    log.warning("Jupyter kernel %r not found (run `make setup` to register it); using 'python3'", preferred)
    return "python3"


#: Tag of the cell :func:`execute_notebook` puts first (before the parameters) in each executed copy.
SETUP_TAG = "injected-setup"
SETUP_SOURCE = (
    "# injected by workbench.apps.notebooks.execute_notebook: figures and widgets also keep a static HTML copy,\n"
    "# so this executed notebook reads well without a kernel (nbconvert --to html, nbviewer)\n"
    "from workbench.apps.notebooks import static_outputs\n"
    "static_outputs()"
)


#: Figures carry both the plotly mime type (JupyterLab draws it) and HTML with plotly.js (static renderings).
STATIC_PLOTLY_RENDERER = "plotly_mimetype+notebook"


def static_outputs() -> None:
    """In a kernel: every plotly figure also keeps a static ``text/html`` rendering (plotly.js embedded once,
    by plotly's ``notebook`` renderer), every ipywidget a ``text/html`` snapshot of its current values with
    a note (``widgets.figures.widget_html``). Cheap: nothing heavy is imported until a figure or widget shows.

    A widget's output carries a display id, and after each cell every shown widget whose snapshot changed is
    sent again (``update_display_data``): the executed notebook shows each widget as the last cell left it (an
    inspector that a later cell filtered, or opened on a diff), not as it was when first shown."""
    import sys

    if "plotly.io" in sys.modules:
        sys.modules["plotly.io"].renderers.default = STATIC_PLOTLY_RENDERER
    else:  # plotly reads it when first imported
        os.environ["PLOTLY_RENDERER"] = STATIC_PLOTLY_RENDERER
    from IPython import get_ipython

    ip = get_ipython()
    if ip is None:
        return
    ip.display_formatter.formatters["text/html"].for_type_by_name("ipywidgets.widgets.widget", "Widget", _widget_html)
    for publisher in (ip.display_pub, ip.displayhook):  # ipykernel's: hooks see each message before it is sent
        if hasattr(publisher, "register_hook") and _tag_widget_display not in getattr(publisher, "_hooks", []):
            publisher.register_hook(_tag_widget_display)
    if _refresh_snapshots not in ip.events.callbacks["post_run_cell"]:
        ip.events.register("post_run_cell", _refresh_snapshots)


#: Widgets shown in this kernel: model id -> (weak reference, the snapshot last sent).
_SHOWN: dict[str, tuple[Any, str]] = {}
_WIDGET_ID = re.compile(r"<div data-wb-widget='([0-9a-f]+)'>")


def _drop_dead_owner(w: Any) -> None:
    """A ``tqdm.notebook`` bar's box keeps only a weak proxy to its bar (``pbar``), which its ``repr`` reads: once
    the bar object is collected (a finished bar left on screen), every render of the box would raise
    ``ReferenceError``. Drop the dead proxy, so the box renders as the plain HBox it is, with its final values."""
    pbar = getattr(w, "pbar", None)
    if pbar is None:
        return
    try:
        pbar.n  # noqa: B018 - touching the proxy tells whether its bar is alive
    except ReferenceError:
        w.pbar = None


def _widget_html(w: Any) -> str:
    from widgets.figures import widget_html

    snap = widget_html(w)
    mid = getattr(w, "model_id", None)
    if not mid:
        return snap
    _SHOWN[mid] = (weakref.ref(w), snap)
    return f"<div data-wb-widget='{mid}'>{snap}</div>"


def _tag_widget_display(msg: dict[str, Any]) -> dict[str, Any]:
    """A displayed widget's output gets a display id (``wb-widget-<model id>``), so a later update can replace it."""
    content = msg.get("content") or {}
    page = (content.get("data") or {}).get("text/html")
    m = _WIDGET_ID.match(page) if isinstance(page, str) else None
    if m:
        content["transient"] = {**(content.get("transient") or {}), "display_id": f"wb-widget-{m.group(1)}"}
    return msg


def _refresh_snapshots(*_: Any) -> None:
    """Send the widgets whose snapshot changed since they were shown again (the whole bundle, interactive view
    included), under their display id."""
    from IPython import get_ipython

    ip = get_ipython()
    for mid, (ref, last) in list(_SHOWN.items()):
        w = ref()
        if w is None or getattr(w, "comm", None) is None:  # collected, or closed (a finished progress bar): gone
            _SHOWN.pop(mid, None)
            if w is not None:
                ip.display_pub.publish(data={"text/plain": "", "text/html": ""}, metadata={},
                                       transient={"display_id": f"wb-widget-{mid}"}, update=True)
            continue
        _drop_dead_owner(w)
        data, md = ip.display_formatter.format(w)  # re-snapshots it into _SHOWN
        if _SHOWN[mid][1] != last:
            ip.display_pub.publish(data=data, metadata=md, transient={"display_id": f"wb-widget-{mid}"}, update=True)


def with_setup_cell(nb: Any) -> Any:
    """``nb`` with the static-outputs setup cell first (tagged ``injected-setup``; its input hidden)."""
    import nbformat

    cell = nbformat.v4.new_code_cell(SETUP_SOURCE, metadata={"tags": [SETUP_TAG, "remove_input"],
                                                             "jupyter": {"source_hidden": True}})
    nb.cells = [c for c in nb.cells if SETUP_TAG not in c.get("metadata", {}).get("tags", [])]
    nb.cells.insert(0, cell)
    return nb


def execute_notebook(
    name: str,
    output: str | os.PathLike,
    parameters: dict[str, Any] | None = None,
    kernel: str = KERNEL,
    cell_timeout: int = 600,
    progress: bool = False,
    cwd: str | os.PathLike | None = None,
    static: bool = True,
) -> Path:
    """Run notebook ``name`` with ``parameters`` via papermill and save the executed copy at ``output``.

    Always passes a kernel name and a per-cell timeout (a dead kernel must not hang a run).
    With ``static`` a first cell (:func:`with_setup_cell`) makes every figure and widget keep a static
    ``text/html`` copy. The kernel talks over IPC sockets, not TCP, where the OS has them (no
    unencrypted ports, no "TCP without encryption" warning from the kernel).
    Raises ``papermill.PapermillExecutionError`` (which names the failing cell) on an error.
    """
    import nbformat
    import papermill as pm
    from traitlets.config import Config

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    nb = nbformat.read(str(notebook_path(name)), as_version=4)
    if static:
        nb = with_setup_cell(nb)
    sockets = tempfile.mkdtemp(prefix="wb-kernel-") if os.name == "posix" else None
    # IPC sockets in a folder of this call's own: kernels run side by side (regress --jobs) never share one
    config = Config({"KernelManager": {"transport": "ipc", "ip": f"{sockets}/k"}}) if sockets else Config()
    try:
        pm.execute_notebook(
            nb,
            str(output),
            parameters=parameters or {},
            kernel_name=kernel_name(kernel),
            execution_timeout=cell_timeout,
            progress_bar=progress,
            # the kernel starts in the folder (nbclient's resources path), and this process's working directory is left
            # alone: papermill's own cwd= changes it for the whole call, which races when notebooks run in threads
            # (the demo's) and could leave it changed after both return
            cwd=None,
            resources={"metadata": {"path": str(cwd) if cwd else str(notebooks_dir())}},
            log_output=False,
            store_widget_state=False,  # the widget state embeds plotly's JS per figure (~5 MB each)
            config=config,
            kernel_manager_class=quiet_shutdown_manager(),
        )
    finally:
        if sockets:
            shutil.rmtree(sockets, ignore_errors=True)
    return output


@functools.cache
def quiet_shutdown_manager() -> type:
    """nbclient's kernel manager (jupyter_client's ``AsyncKernelManager``) without the interrupt it sends before
    each shutdown request: a kernel still finishing a message when that SIGINT lands logs ``[IPKernelApp] ERROR |
    KeyboardInterrupt caught in kernel`` to the terminal, where a notebook that ran fine then looks failed (seen in
    ``make demo``'s output). The shutdown request goes over the control channel, which ipykernel serves beside a
    busy shell, and a kernel that does not exit within its wait is killed, so nothing is left running. Built on first
    use (jupyter_client is imported only where a notebook runs), one class for every call."""
    from jupyter_client.manager import AsyncKernelManager

    class QuietShutdownKernelManager(AsyncKernelManager):
        async def _async_interrupt_kernel(self) -> None:
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return QuietShutdownKernelManager


def render_html(notebook: str | os.PathLike, html_path: str | os.PathLike | None = None,
                share_plotlyjs: bool = True) -> Path:
    """Render an executed notebook to an HTML page (nbconvert's ``lab`` template; the injected setup
    cell's input hidden) beside it, or at ``html_path``. Its figures draw offline. With ``share_plotlyjs``
    the plotly.js the notebook embeds is loaded from the run's shared ``plotly.min.js`` instead
    (``widgets.figures.externalize_plotlyjs``), so the page is small; without it the page is one file."""
    import nbformat
    from nbconvert import HTMLExporter
    from nbconvert.preprocessors import TagRemovePreprocessor

    from workbench.util.io import atomic_write_text

    notebook = Path(notebook)
    target = Path(html_path) if html_path else notebook.with_suffix(".html")
    nb = nbformat.read(str(notebook), as_version=4)
    exporter = HTMLExporter(template_name="lab")
    exporter.register_preprocessor(TagRemovePreprocessor(remove_input_tags={"remove_input"}, enabled=True), enabled=True)
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": notebook.stem}})
    if share_plotlyjs:
        from widgets.figures import externalize_plotlyjs

        body = externalize_plotlyjs(body, target)
    return atomic_write_text(target, body)
