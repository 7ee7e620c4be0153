"""Replay stored training runs through the health rules (``workbench/rl/health.py``) and list the alarms each fires.

    .venv/bin/python bench/health_replay.py                       # the runs stored in the repository
    .venv/bin/python bench/health_replay.py runs/seeds/*/20*      # and training run directories

A stored metrics file (``*.metrics.jsonl`` / ``device_check_train_metrics.jsonl``) gives the signals its rows carry;
a run directory gives its step tables' signals too (searches by hop count, short answers, out of turns, the sampled
tokens' logprobs). ``--label PATH=TEXT`` names a run (``collapsed``, ``healthy``...) so that the table says which
alarms are expected; the summary counts alarms on runs labelled healthy as false alarms.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: the runs this repository keeps, with what is known of them (bench/RESULTS.md)
STORED = {
    "bench/gpu/results/h200-graph/device_check_train_metrics.jsonl":
        "collapsed: the recipe's RL stage on one H200, 1.03 searches a question after it, cover-EM 0.258",
    "bench/gpu/results/h200-first/device_check_train_metrics.jsonl":
        "the first H200 run of the RL stage (5 steps; not evaluated after)",
    "bench/data/learn-grpo-dynasearcher-1hop.metrics.jsonl":
        "healthy: 40 GRPO steps from the base model that learned to search (held-out searches 0.61 -> 1.0)",
}


def load(path: Path) -> tuple[list[dict], dict | None]:
    """``(metrics rows, step records or None)`` of a metrics file or a run directory."""
    from workbench.rl.health import run_step_records

    if path.is_dir():
        rows = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines() if x.strip()]
        return rows, run_step_records(path) or None
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()], None


def main(argv: list[str] | None = None) -> int:
    from workbench.rl.health import RULES, replay

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="more run directories or metrics files")
    ap.add_argument("--label", action="append", default=[], metavar="PATH=TEXT",
                    help="what is known of a run (start TEXT with 'healthy' or 'collapsed')")
    ap.add_argument("--no-stored", action="store_true", help="only the runs given")
    args = ap.parse_args(argv)
    labels = {} if args.no_stored else {str(ROOT / k): v for k, v in STORED.items()}
    for item in args.label:
        path, _, text = item.partition("=")
        labels[str(Path(path).resolve())] = text
    paths = [] if args.no_stored else [ROOT / k for k in STORED]
    paths += [Path(p).resolve() for p in args.runs]
    print(f"rules: {', '.join(r.name for r in RULES)}\n")
    print("| run | what is known | steps | alarms (step) |")
    print("|---|---|---:|---|")
    false_alarms = healthy = caught = collapsed = 0
    for path in paths:
        rows, records = load(path)
        health, alarms = replay(rows, records)
        text = labels.get(str(path), "")
        fired = ", ".join(f"{a.name} ({a.step})" for a in alarms) or "none"
        try:
            name = str(path.relative_to(ROOT))
        except ValueError:
            name = str(path)
        print(f"| `{name}` | {text} | {len(health)} | {fired} |")
        if text.startswith("healthy"):
            healthy += 1
            false_alarms += len(alarms)
        if text.startswith("collapsed"):
            collapsed += 1
            caught += any(a.name in ("search_drop", "deep_search_drop", "short_answers") for a in alarms)
    print(f"\ncollapsed runs caught by a search alarm: {caught} of {collapsed}; alarms on healthy runs (false "
          f"alarms): {false_alarms} over {healthy} run(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
