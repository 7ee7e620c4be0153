"""Wall time of `workbench regress` on the default suite (notebooks/regress.yaml).

Runs the suite once into a temporary folder (baselines are read, never written) and prints
one table: the setup fixtures, each case, and the whole run. Results: bench/RESULTS.md.

    .venv/bin/python bench/bench_regress.py [--jobs N] [--cell-timeout S]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile

from workbench.apps.notebooks import notebooks_dir
from workbench.regress import default_jobs, run_regress


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=default_jobs())
    ap.add_argument("--cell-timeout", type=int, default=600)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-regress-") as out:
        r = run_regress(notebooks_dir() / "regress.yaml", out=out, jobs=args.jobs, cell_timeout=args.cell_timeout,
                        say=lambda *_: None)
    print(f"# workbench regress, default suite ({platform.machine()}, {os.cpu_count()} CPUs, jobs={r.jobs})")
    print(f"{'phase':<40} {'status':>9} {'seconds':>8}")
    for name, f in r.fixtures.items():
        print(f"{'setup ' + name:<40} {'error' if f['error'] else 'ok':>9} {f['seconds']:8.1f}")
    for c in r.cases:
        print(f"{'case ' + c.name:<40} {c.status:>9} {c.seconds:8.1f}")
    print(f"{'total (wall)':<40} {'FAILED' if r.failed else 'OK':>9} {r.wall_seconds:8.1f}")


if __name__ == "__main__":
    main()
