"""``workbench demo``: the default model on the synthetic world, with and without search.

Builds (or loads) the default world, indexes its passages with BM25, loads the default
model, evaluates dev questions in two settings (direct answer; the Search-R1 agent),
prints a metrics table, writes a run directory and executes the notebooks into it.
"""

from __future__ import annotations

import time
from pathlib import Path

from workbench.eval.runner import evaluate, format_table, write_eval_run
from workbench.rollout.engine import RolloutConfig
from workbench.runs import Run


def _say(msg: str) -> None:
    print(msg, flush=True)


def run_demo(
    limit: int = 24,
    out: str | Path | None = None,
    seed: int = 0,
    model: str = "smollm2-135m",
    device: str = "auto",
    temperature: float = 0.0,
    max_turns: int = 4,
    max_new_tokens: int = 96,
    notebooks: bool = True,
) -> Run:
    from workbench.data.world import load_world
    from workbench.models import load_policy
    from workbench.rollout.backends.hf import HFBackend
    from workbench.tools.base import Toolbox
    from workbench.tools.bm25 import BM25Search

    if limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    t_start = time.perf_counter()
    timings: dict[str, float] = {}

    t0 = time.perf_counter()
    world = load_world()
    timings["world_s"] = time.perf_counter() - t0
    _say(f"[1/5] world {world.fingerprint()}: {len(world.entities)} entities, {len(world.triples)} triples, "
         f"{len(world.passages)} passages, {len(world.examples)} questions ({timings['world_s']:.1f}s)")

    t0 = time.perf_counter()
    search = BM25Search(world.passages)
    toolbox = Toolbox({"search": search})
    timings["index_s"] = time.perf_counter() - t0
    _say(f"[2/5] BM25 index over {len(search)} passages ({timings['index_s']:.2f}s)")

    t0 = time.perf_counter()
    policy, tokenizer = load_policy(model, device=device)
    backend = HFBackend(policy, tokenizer)
    timings["model_s"] = time.perf_counter() - t0
    n_params = sum(p.numel() for p in policy.parameters()) / 1e6
    _say(f"[3/5] model {model} ({n_params:.1f}M parameters, {backend.device}) ({timings['model_s']:.1f}s)")

    examples = world.split("dev")[:limit]
    cfg = RolloutConfig(group_size=1, max_turns=max_turns, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed)
    _say(f"[4/5] evaluating {len(examples)} dev questions: direct answer, then the search agent")
    results = []
    for method, turns in (("direct", 1), ("search_r1", max_turns)):
        c = RolloutConfig(**{**cfg.to_dict(), "max_turns": turns})
        results.append(evaluate(method, examples, backend, toolbox, c, meta={"model": model}))
    timings["eval_s"] = sum(r.seconds for r in results)

    run = Run.create(
        out, kind="eval", name="demo",
        config={"model": model, "dataset": "world", "split": "dev", "limit": limit, "seed": seed,
                "world": world.fingerprint(), "retriever": "bm25", "rollout": cfg.to_dict()},
    )
    write_eval_run(run, results, examples)
    tool_s = sum(t.tool_latency_s for r in results for t in r.trajectories)
    timings["tool_share"] = tool_s / max(1e-9, timings["eval_s"])
    print()
    print(format_table(results))
    print()

    if notebooks:
        from workbench.notebooks import execute_notebook

        t0 = time.perf_counter()
        nb_out = run.path / "notebooks" / "01_trajectory_inspector.ipynb"
        _say("[5/5] executing notebooks/01_trajectory_inspector.ipynb with papermill")
        execute_notebook("01_trajectory_inspector", nb_out, {"run_dir": str(run.path.resolve())})
        timings["notebooks_s"] = time.perf_counter() - t0
        _say(f"      -> {nb_out}")
    timings["total_s"] = time.perf_counter() - t_start
    metrics = run.metrics()
    metrics["timings"] = timings
    run.write_metrics(metrics)
    _say(f"run written to {run.path}  (config.json, trajectories.parquet, metrics.json, examples.jsonl)")
    _say(f"tools took {100 * timings['tool_share']:.1f}% of rollout time; total {timings['total_s']:.0f}s")
    _say("open it: `make lab` (JupyterLab with the `workbench` kernel) and run notebooks/01_trajectory_inspector.ipynb "
         f"with run_dir = {str(run.path)!r}")
    return run
