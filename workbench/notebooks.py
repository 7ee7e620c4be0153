"""Execute the parameterized notebooks headlessly with papermill."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from workbench.paths import repo_root

log = logging.getLogger(__name__)

KERNEL = "workbench"


def notebooks_dir() -> Path:
    return repo_root() / "notebooks"


def notebook_path(name: str) -> Path:
    """``01_trajectory_inspector`` (or with ``.ipynb``) -> its path; a clear error listing valid names."""
    stem = name[:-6] if name.endswith(".ipynb") else name
    p = notebooks_dir() / f"{stem}.ipynb"
    if not p.exists():
        valid = sorted(q.stem for q in notebooks_dir().glob("*.ipynb"))
        raise FileNotFoundError(f"no notebook {name!r}; valid names: {', '.join(valid)}")
    return p


def kernel_name(preferred: str = KERNEL) -> str:
    """The ``workbench`` kernel when installed (``make setup`` registers it), else ``python3``."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if preferred in specs:
        return preferred
    log.warning("Jupyter kernel %r not found (run `make setup` to register it); using 'python3'", preferred)
    return "python3"


def execute_notebook(
    name: str,
    output: str | os.PathLike,
    parameters: dict[str, Any] | None = None,
    kernel: str = KERNEL,
    cell_timeout: int = 600,
    progress: bool = False,
    cwd: str | os.PathLike | None = None,
) -> Path:
    """Run notebook ``name`` with ``parameters`` via papermill and save the executed copy at ``output``.

    Always passes a kernel name and a per-cell timeout (a dead kernel must not hang a run).
    Raises ``papermill.PapermillExecutionError`` (which names the failing cell) on an error.
    """
    import papermill as pm

    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    pm.execute_notebook(
        str(notebook_path(name)),
        str(output),
        parameters=parameters or {},
        kernel_name=kernel_name(kernel),
        execution_timeout=cell_timeout,
        progress_bar=progress,
        cwd=str(cwd) if cwd else str(notebooks_dir()),
        log_output=False,
        store_widget_state=False,  # the widget state embeds plotly's JS per figure (~5 MB each)
    )
    return output
