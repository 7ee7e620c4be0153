"""Training curves of runs as one SVG (no plotting package needed; GitHub and browsers render it).

    .venv/bin/python bench/plot_curves.py RUN_DIR [RUN_DIR ...] --metric reward_mean [--metric searches_mean]
        [--smooth 4] [--label NAME ...] --out bench/figures/curve.svg

One panel per ``--metric``, one line per run: the per-step values of ``metrics.jsonl`` (faint) and their
trailing moving average over ``--smooth`` steps (solid), the legend above each panel. SFT runs log ``loss``; RL runs ``reward_mean``,
``cem``, ``searches_mean``, ``answered``... (``workbench train --help``).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def read_metric(run_dir: str, metric: str) -> list[tuple[int, float]]:
    """(step, value) of every training row of ``run_dir``'s ``metrics.jsonl`` that has ``metric``."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"plot_curves: {path} does not exist; pass a run directory of `workbench train` or `sft`")
    from workbench.util.io import read_jsonl

    rows, _ = read_jsonl(path)  # torn or non-object lines are skipped
    return [(r["step"], float(r[metric])) for r in rows
            if isinstance(r.get("step"), int) and isinstance(r.get(metric), (int, float)) and math.isfinite(r[metric])]


def moving_average(values: list[float], k: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= k:
            acc -= values[i - k]
        out.append(acc / min(i + 1, k))
    return out


def panel(series: list[tuple[str, list[tuple[int, float]]]], metric: str, smooth: int, x0: float, y0: float,
          w: float, h: float) -> list[str]:
    pts = [p for _, s in series for p in s]
    if not pts:
        return [f'<text x="{x0 + 10}" y="{y0 + 20}">{metric}: no values</text>']
    xmin, xmax = min(p[0] for p in pts), max(p[0] for p in pts)
    ymin, ymax = min(p[1] for p in pts), max(p[1] for p in pts)
    if ymax == ymin:
        ymin, ymax = ymin - 0.5, ymax + 0.5
    xmax = xmax if xmax > xmin else xmin + 1
    L, B, T = 50, 30, 12 + 15 * max(1, len(series))  # left, bottom and top margins (the legend is above the plot)

    def X(x):
        return x0 + L + (x - xmin) / (xmax - xmin) * (w - L - 10)

    def Y(y):
        return y0 + h - B - (y - ymin) / (ymax - ymin) * (h - B - T)

    out = [f'<rect x="{x0 + L}" y="{y0 + T}" width="{w - L - 10}" height="{h - B - T}" fill="none" stroke="#999"/>',
           f'<text x="{x0 + 4}" y="{y0 + 16}" font-weight="bold">{metric}</text>']
    for frac in (0, 0.5, 1):
        yv = ymin + frac * (ymax - ymin)
        out.append(f'<text x="{x0 + L - 4}" y="{Y(yv) + 4:.1f}" text-anchor="end">{yv:.3g}</text>')
    for xv in sorted({xmin, (xmin + xmax) // 2, xmax}):
        out.append(f'<text x="{X(xv):.1f}" y="{y0 + h - B + 15}" text-anchor="middle">{xv}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h - 2}" text-anchor="middle">step</text>')
    for i, (label, s) in enumerate(series):
        if not s:
            continue
        c = COLORS[i % len(COLORS)]
        raw = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in s)
        ma = moving_average([y for _, y in s], smooth)
        smooth_pts = " ".join(f"{X(x):.1f},{Y(y):.1f}" for (x, _), y in zip(s, ma))
        out += [f'<polyline points="{raw}" fill="none" stroke="{c}" stroke-opacity="0.3"/>',
                f'<polyline points="{smooth_pts}" fill="none" stroke="{c}" stroke-width="2"/>',
                f'<text x="{x0 + w - 10}" y="{y0 + 16 + 15 * i}" fill="{c}" text-anchor="end">{label}</text>']
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--metric", action="append", help="metrics.jsonl column (repeat for more panels)")
    ap.add_argument("--label", action="append", help="legend name per run (default: the run directory's name)")
    ap.add_argument("--smooth", type=int, default=4)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    metrics = args.metric or ["reward_mean"]
    labels = args.label or [Path(r).name for r in args.runs]
    if len(labels) != len(args.runs):
        raise SystemExit(f"plot_curves: {len(labels)} --label for {len(args.runs)} runs; give one per run or none")
    W, H = 720, 260
    body = []
    for k, m in enumerate(metrics):
        body += panel([(lab, read_metric(r, m)) for lab, r in zip(labels, args.runs)], m, max(1, args.smooth),
                      0, k * H, W, H)
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H * len(metrics)}" '
           f'font-family="sans-serif" font-size="12"><rect width="100%" height="100%" fill="white"/>'
           + "".join(body) + "</svg>\n")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(svg)
    print(f"wrote {args.out} ({len(metrics)} panel(s), {len(args.runs)} run(s))")


if __name__ == "__main__":
    main()
