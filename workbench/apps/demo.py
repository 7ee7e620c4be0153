"""``workbench demo``: the default model on the synthetic world, four ways, then every view of the workbench.

Builds (or loads) the default world, indexes its passages with BM25, loads the default model,
and evaluates dev questions with :func:`~workbench.eval.runner.run_eval` four ways: a direct
answer, the Search-R1 agent (search tool), the same agent with the shipped SFT + GRPO adapter
(``search_r1+lora``, :data:`DEMO_ADAPTER`) and the DynaSearcher agent (search + knowledge-graph
tools). Each question gets a *group* of samples at temperature > 0, so the reward playground has
advantages, kept groups and rank changes to show, and the KG explorer the agent's KG hits. It
prints the metrics tables and writes a run directory (with ``features.parquet``). Then it ends
with the workbench: the notebooks are executed into ``<run>/notebooks/`` and the static dashboard
is written to ``<run>/dashboard.html``. A notebook that fails is reported and skipped; the run stays.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.eval.adapters import TRAINED_ADAPTER
from workbench.eval.config import EvalEntry

if TYPE_CHECKING:  # the command line reads run_demo's defaults for its flags: the work imports them when it runs
    from workbench.storage.runs import Run

#: The methods the demo compares: no retrieval, the search agent (untrained, and with the shipped SFT + GRPO adapter
#: when it is there), the search + knowledge-graph agent.
DEMO_METHODS = ("direct", "search_r1", "search_r1+lora", "dynasearcher")

#: Observations as user turns (the layout ``workbench train``/``sft`` default to, so the adapter is evaluated on
#: the layout it learned), for every demo method whose protocol takes it; the untrained agent gets the same.
DEMO_PROTOCOL_KWARGS = {"observation_mode": "chat"}

#: The demo's generation batches (MiB of keys/values): larger than an eval's CPU default (256 MiB, sized for 2 GB on
#: real data) so a turn of 18 rows with few-shot prompts runs in 3 batches, not 4 (timed at 4:44 with this).
DEMO_BATCH_MIB = 384

#: The trained adapter the demo compares with the untrained model (``data/adapters/README.md`` says how it was
#: made and from which commit); ``+lora`` methods are left out, with a note, when it is missing.
DEMO_ADAPTER = TRAINED_ADAPTER

#: Notebooks executed into the run, in order, and the parameters each gets (``{run}``: the run
#: directory, ``{runs}``: the runs root). 00_quickstart is left out: it would evaluate the model again.
DEMO_NOTEBOOKS: dict[str, dict[str, Any]] = {
    # opens on a question the trained and the untrained agent answer differently (the diff tab shows both)
    "01_trajectory_inspector": {"run_dir": "{run}", "diff_methods": "search_r1,search_r1+lora"},
    # as if the r_gain weight slider were moved to 0: the executed copy shows rank changes inside groups
    "02_reward_playground": {"run_dir": "{run}", "weights": {"r_gain": 0.0}},
    "03_kg_explorer": {"run_dir": "{run}"},
    # the demo writes <run>/dashboard.html itself (also when this notebook fails): no second copy here
    "05_results_dashboard": {"runs_dir": "{runs}", "out_dir": "{run}/notebooks/05_results_dashboard", "write_html": False},
}


#: Seconds each demo notebook took (2-core CPU, two at a time): they start longest first, so the two workers finish
#: close together (01 + 03 beside 02 + 05, not 01 + 05 beside 02 + 03). Only the order is taken from it.
DEMO_NOTEBOOK_SECONDS = {"01_trajectory_inspector": 22, "02_reward_playground": 18, "05_results_dashboard": 17,
                         "03_kg_explorer": 9}

#: The demo's summary columns (``metrics_table`` name -> label, format): narrow enough for a terminal.
SUMMARY = {"n": ("n", "d"), "em": ("EM", ".3f"), "cem": ("cover-EM", ".3f"), "f1": ("F1", ".3f"),
           "n_searches": ("searches", ".2f"), "tokens": ("tokens", ".0f"),
           "wall_seconds_per_answer": ("s/answer", ".1f"),
           "format_ok": ("format-ok", ".2f"), "answered": ("answered", ".2f")}
HOP_SUMMARY = ("n", "cem", "f1", "n_searches", "answered")


def summary_table(metrics: dict[str, Any], by_hops: bool = False) -> str:
    """The metrics per method (or per method and hop count), a few columns, as plain text."""
    import pandas as pd

    from workbench.eval.runner import metrics_table

    df = metrics_table(metrics, by_hops=by_hops)
    cols = [c for c in (HOP_SUMMARY if by_hops else SUMMARY) if c in df.columns]
    keys = ["method", "hops"] if by_hops else ["method"]
    head = keys + [SUMMARY[c][0] for c in cols]
    rows = []
    for key, row in df.iterrows():
        k = [str(x) for x in (key if isinstance(key, tuple) else (key,))]
        rows.append(k + ["-" if pd.isna(row[c]) else format(int(row[c]) if SUMMARY[c][1] == "d" else float(row[c]),
                                                           SUMMARY[c][1]) for c in cols])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) if i < len(keys) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, rows)])


def _say(msg: str) -> None:
    print(msg, flush=True)


def execute_demo_notebooks(run: Run, names: dict[str, dict[str, Any]] | None = None,
                           jobs: int | None = None) -> dict[str, dict[str, Any]]:
    """Execute each notebook into ``<run>/notebooks/<name>.ipynb``; returns name -> {status, seconds, path|error}, in
    ``names``' order.

    ``jobs`` notebooks run side by side (default: ``workbench regress``'s, up to 2 by the cores), longest first
    (:data:`DEMO_NOTEBOOK_SECONDS`): each has its own
    kernel process, and most of a demo notebook's time is that kernel starting and importing, one core's work. A
    notebook that is not in ``notebooks/`` is ``skipped``; one that raises is ``error`` (with the failing cell's
    error in ``error``) and the others still run.
    """
    import concurrent.futures as cf

    from workbench.apps.notebooks import notebook_path
    from workbench.regress.run import default_jobs

    out: dict[str, dict[str, Any]] = {}
    ctx = {"run": str(run.path.resolve()), "runs": str(run.path.resolve().parent)}
    todo: dict[str, dict[str, Any]] = {}
    for name, params in (names if names is not None else DEMO_NOTEBOOKS).items():
        try:
            notebook_path(name)
        except FileNotFoundError:
            out[name] = {"status": "skipped", "seconds": 0.0, "error": "not in notebooks/"}
            _say(f"      {name}: skipped (not in notebooks/)")
            continue
        out[name] = {}  # keeps the order
        todo[name] = {k: v.format(**ctx) if isinstance(v, str) else v for k, v in params.items()}
    jobs = max(1, min(jobs or default_jobs(), len(todo) or 1))
    # threads, not processes: each call only drives its own kernel process over its own sockets
    with cf.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="demo-notebook") as pool:
        longest_first = sorted(todo, key=lambda name: -DEMO_NOTEBOOK_SECONDS.get(name, 0))
        futures = {pool.submit(_execute_one, name, run.path / "notebooks" / f"{name}.ipynb", todo[name]): name
                   for name in longest_first}
        for fut in cf.as_completed(futures):
            out[futures[fut]] = fut.result()
    return out


def _execute_one(name: str, target: Path, params: dict[str, Any]) -> dict[str, Any]:
    """One demo notebook executed into ``target``: its status entry (a failure is reported, not raised)."""
    from workbench.apps.notebooks import execute_notebook

    t0 = time.perf_counter()
    try:
        execute_notebook(name, target, params)
    except Exception as e:  # noqa: BLE001 - a failing notebook must not lose the run
        secs = time.perf_counter() - t0
        first = str(e).strip().splitlines()
        status = {"status": "error", "seconds": secs, "path": str(target),
                  "error": f"{type(e).__name__}: {first[-1] if first else ''}"[:500]}
        _say(f"      {name}: FAILED after {secs:.0f}s ({status['error']}); executed copy: {target}")
        return status
    secs = time.perf_counter() - t0
    _say(f"      {name}: ok ({secs:.0f}s) -> {target}")
    return {"status": "ok", "seconds": secs, "path": str(target)}


def run_demo(
    limit: int = 6,
    out: str | Path | None = None,
    seed: int = 0,
    model: str = "smollm2-135m",
    device: str = "auto",
    temperature: float = 0.4,
    max_turns: int = 3,
    max_new_tokens: int = 80,
    notebooks: bool = True,
    group_size: int = 3,
    rollout_engine: str = "auto",
) -> Run:
    """The demo evaluation, then (with ``notebooks``) the notebooks and the static dashboard.

    Defaults: 6 dev questions x 3 samples x 4 methods (3 without the shipped adapter) = 72 trajectories of at most
    3 turns x 80 tokens, sized to finish in about 5 minutes on a quiet 2-core CPU (README, "What make demo does";
    groups of 4 took 11:45 with 1 thread; 64 tokens a turn left the adapter's agent unanswered in 39% of samples).
    Temperature 0.4: the samples of a group still differ, and the untrained DynaSearcher follows its demonstrated
    JSON search often enough to give the KG explorer hits (18 samples: 7 searches with entities at 0.4, 1 at 0.7;
    at 1.0 it rambled). ``rollout_engine``: ``workbench eval --rollout-engine`` (``fp32`` forces the exact path)."""
    if limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    if group_size > 1 and temperature <= 0:
        raise ValueError(f"--group-size {group_size} needs --temperature > 0 (greedy samples of a group are identical)")
    from workbench.eval.runner import run_eval

    t_start = time.perf_counter()
    methods, adapter = list(DEMO_METHODS), adapter_for(model)
    if adapter is None:
        methods = [m for m in methods if not EvalEntry.parse(m).trained]
    _say(f"[1/3] evaluating {limit} dev questions of the synthetic world x {group_size} samples (temperature "
         f"{temperature:g}): {', '.join(methods)}")
    if adapter is not None:
        _say(f"      search_r1+lora: the same model with the adapter {adapter} (SFT on expert traces of the world's "
             "train questions, then GRPO; data/adapters/README.md)")
    run = run_eval(
        methods, "world", model, out=out, name="demo", limit=limit, split="dev", retriever="bm25",
        group_size=group_size, temperature=temperature, max_turns=max_turns, max_new_tokens=max_new_tokens, seed=seed,
        device=device, log=lambda m: _say("      " + m), adapter=str(adapter) if adapter else None,
        protocol_kwargs=dict(DEMO_PROTOCOL_KWARGS), batch_mib=DEMO_BATCH_MIB, rollout_engine=rollout_engine,
        # the demo's own turn budget (3 x 80 tokens), not the adapter's 4 x 64, and the note says so
        override_adapter="the demo's turn budget (workbench eval --adapter uses the adapter's)",
    )
    metrics = run.metrics()
    timings: dict[str, float] = dict(metrics.get("timings") or {})
    timings["tool_share"] = float(metrics["tool_share"])
    print()
    print(summary_table(metrics))
    print()
    print(summary_table(metrics, by_hops=True))
    print(f"(every column: `workbench eval`'s table, or {run.path / 'metrics.json'})")
    print()

    nb_status: dict[str, dict[str, Any]] = {}
    if notebooks:
        from workbench.dashboard.app import save_static

        t0 = time.perf_counter()
        _say(f"[2/3] executing the notebooks into {run.path / 'notebooks'}")
        nb_status = execute_demo_notebooks(run)
        timings["notebooks_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        _say("[3/3] writing the static dashboard")
        try:
            # plotly.js inlined (4.8 MB): the page is the one file a user mails or copies, so it stands alone
            save_static(run.path / "dashboard.html", run.path.parent)
            _say(f"      -> {run.path / 'dashboard.html'} (over {run.path.parent}; one file that opens offline, "
                 f"copied anywhere)")
        except Exception as e:  # noqa: BLE001 - the run is already written; report and go on
            nb_status["dashboard.html"] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:500]}
            _say(f"      dashboard FAILED: {type(e).__name__}: {e}")
        timings["dashboard_s"] = time.perf_counter() - t0
    timings["total_s"] = time.perf_counter() - t_start
    metrics["timings"] = timings
    metrics["torch_threads"] = _torch_threads()
    if nb_status:
        metrics["notebooks"] = nb_status
    run.write_metrics(metrics)
    run.mark_complete(notebooks=bool(nb_status))  # complete since its eval; marked again so the marker is last

    phases = ", ".join(f"{k[:-2]} {v:.1f}s" for k, v in timings.items() if k.endswith("_s") and k != "total_s")
    _say(f"run written to {run.path}  (config.json, trajectories.parquet, metrics.json, examples.jsonl, features.parquet)")
    _say(f"tools took {100 * timings['tool_share']:.2f}% of rollout time; total {timings['total_s']:.0f}s ({phases})")
    if notebooks:
        failed = [n for n, s in nb_status.items() if s["status"] == "error"]
        if failed:
            _say(f"notebooks that failed (their executed copies show the failing cell): {', '.join(failed)}")
        _say(f"executed notebooks: {run.path / 'notebooks'}/*.ipynb; static dashboard: {run.path / 'dashboard.html'}")
    _say(f"live: `make lab` (JupyterLab, kernel `workbench`; open notebooks/01_trajectory_inspector.ipynb with "
         f"run_dir = {str(run.path)!r}) and `workbench dashboard --runs {run.path.parent}` (http://127.0.0.1:5006/)")
    return run


def adapter_for(model: str) -> Path | None:
    """The shipped adapter when the demo runs the model it was trained for, else None (with the reason said)."""
    if not (DEMO_ADAPTER / "adapter_model.safetensors").exists():
        _say(f"      (no trained adapter at {DEMO_ADAPTER}: the demo shows the untrained model only)")
        return None
    if model != "smollm2-135m":
        _say(f"      (the shipped adapter is for smollm2-135m, not {model}: the demo shows the untrained model only)")
        return None
    return DEMO_ADAPTER


def _torch_threads() -> int | None:
    import sys

    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None
