"""Parsing hostile model output: seconds per ``parse`` for 100 KB and 1 MB inputs.

Every protocol's parser (and the NL-DAG parse -> validate -> execute -> render path) must be
linear: 1 MB of any input parses in well under a second. Each case runs in a child process
with a time limit, so a quadratic parser shows up as ``>LIMIT`` instead of hanging the table.

    .venv/bin/python bench/bench_parse.py [--limit 60] [--sizes 100000,1000000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import time

from workbench.core.types import Hit
from workbench.methods import PROTOCOLS as REGISTERED
from workbench.methods import get_protocol
from workbench.tools.dag import run_plan
from workbench.tools.sources import SourceRegistry


def _repeat(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _soup(tags: tuple[str, ...], n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    pieces = [f"<{t}>" for t in tags] + [f"</{t}>" for t in tags] + ["{", "}", "[", '"q":', " x ", "\n", "\\boxed{"]
    out, size = [], 0
    while size < n:
        p = rng.choice(pieces)
        out.append(p)
        size += len(p)
    return "".join(out)[:n]


def _cycle_plan(n: int) -> str:
    """``N0: q (News)`` ... with edges ``N0 -> N1 -> ... -> N0``: one cycle through every node."""
    lines, size, i = ["Nodes:"], 7, 0
    while size < n * 0.7:
        lines.append(f"N{i}: q{i} (News)")
        size += len(lines[-1]) + 1
        i += 1
    edges = "; ".join(f"N{j} -> N{(j + 1) % i}" for j in range(i))
    return "\n".join(lines) + "\nEdges: " + edges


def _wrap(p, body: str) -> str:
    tag = getattr(p, "search_tag", "search")
    return f"<{tag}>{body}</{tag}>"


INPUTS = {
    "open <answer>": lambda p, n: _repeat("<answer>", n),
    "open <search>": lambda p, n: _repeat(f"<{getattr(p, 'search_tag', 'search')}>", n),
    "nested JSON": lambda p, n: _wrap(p, '{"q":' + "[" * n),
    "tag soup": lambda p, n: _soup(tuple(p.tags) + ("answer",), n),
    "random text": lambda p, n: "".join(random.Random(1).choices("ab <>/{}[]\"':\n", k=n)),
}

PROTOCOLS = {name: {} for name in sorted(REGISTERED)}
PROTOCOLS["search_r1/tool_call"] = {"variant": "tool_call"}


def _protocol(label: str):
    return get_protocol(label.split("/")[0], **PROTOCOLS[label])


def _case(label: str, kind: str, n: int, q: mp.Queue) -> None:
    if label == "NL-DAG run_plan":
        text = _cycle_plan(n) if kind == "cycle plan" else INPUTS[kind](get_protocol("rsearch_dag"), n)
        reg = SourceRegistry()
        reg.register("news", lambda query, k: [Hit("n", "t", query)])
        t0 = time.perf_counter()
        _, res = run_plan(text, reg)
        res.render()
        res.to_tool_calls()
    else:
        p = _protocol(label)
        text = _wrap(p, _cycle_plan(n)) if kind == "cycle plan" else INPUTS[kind](p, n)
        t0 = time.perf_counter()
        try:
            p.parse(text)
        except Exception as e:  # what the table should never show
            q.put(f"raises {type(e).__name__}")
            return
    q.put(time.perf_counter() - t0)


def timed(label: str, kind: str, n: int, limit: float) -> str:
    q: mp.Queue = mp.get_context("fork").Queue()
    proc = mp.get_context("fork").Process(target=_case, args=(label, kind, n, q))
    proc.start()
    proc.join(limit)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return f">{limit:g}"
    if proc.exitcode != 0:
        return f"error({proc.exitcode})"
    out = q.get()
    return out if isinstance(out, str) else f"{out:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=60.0, help="seconds per case before it is reported as >LIMIT")
    ap.add_argument("--sizes", default="100000,1000000", help="input sizes in characters, comma-separated")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = [(label, kind) for label in PROTOCOLS for kind in INPUTS]
    rows += [("rsearch_dag", "cycle plan"), ("NL-DAG run_plan", "cycle plan"), ("NL-DAG run_plan", "tag soup")]
    head = ["protocol", "input"] + [f"{n // 1000} KB (s)" for n in sizes]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, kind in rows:
        cells = [timed(label, kind, n, args.limit) for n in sizes]
        print(f"| {label} | {kind} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
