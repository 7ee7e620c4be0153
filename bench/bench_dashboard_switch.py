"""What a reader waits for when the Trajectories tab opens another run: the served dashboard in headless Chromium, the
run picker switched from run to run, each switch timed until the new run's filters, count line and first rows are
drawn — beside the server's own share of it (the same switch made in Python, no browser) and the first paint.

    .venv/bin/python bench/bench_dashboard_switch.py RUNS_DIR [--switches 6]

RUNS_DIR holds eval runs (their folders, or links to them) whose first trajectories differ. The browser figure is
wall time, end to end: a busy machine inflates it, so read it beside the server figure measured in the same run.
"""

from __future__ import annotations

import argparse
import platform
import socket
import statistics
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_switches(root: Path, runs: list[str], n: int) -> list[float]:
    """Seconds the server takes to build the drill-down of another run (``run_select.value = ...``)."""
    from workbench.dashboard import app as dash

    select, section = dash._drilldown_section(root, runs)
    out = []
    for i in range(1, n + 1):
        t = time.perf_counter()
        select.value = runs[i % len(runs)]
        out.append(time.perf_counter() - t)
    return out


def browser_switches(root: Path, runs: list[str], n: int) -> tuple[float, list[float]]:
    """First paint (the runs table drawn) and the seconds each switch of the picker takes to draw the new run."""
    from playwright.sync_api import sync_playwright

    from workbench.dashboard import app as dash

    port = _free_port()
    t0 = time.perf_counter()
    server = dash.serve_dashboard(root, port=port, threaded=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.goto(f"http://127.0.0.1:{port}/", timeout=120_000)
            page.wait_for_selector(".tabulator-row", timeout=120_000)
            first = time.perf_counter() - t0
            page.locator(".bk-tab", has_text="Trajectories").click()
            page.locator(".wb-drill-count").first.wait_for(timeout=60_000)
            picker = page.locator(".wb-drill-run select")
            labels = picker.locator("option").all_inner_texts()
            out = []
            first_row = page.locator(".wb-trajectories .tabulator-row").first
            for i in range(1, n + 1):
                old = page.locator(".wb-drill-count").first.element_handle()
                old_row = first_row.inner_text()
                t = time.perf_counter()
                picker.select_option(label=labels[i % len(labels)])
                # the old count line leaves the page (a rebuilt column, or the same pane given the new run's line),
                # the new one comes, and the table's first row is the new run's (the runs' first rows differ)
                page.wait_for_function("el => !el.isConnected", arg=old, timeout=60_000)
                page.locator(".wb-drill-count").first.wait_for(timeout=60_000)
                deadline = time.perf_counter() + 60
                while first_row.inner_text() == old_row:
                    if time.perf_counter() > deadline:
                        raise TimeoutError("the table still shows the run before the switch")
                    time.sleep(0.01)
                out.append(time.perf_counter() - t)
            browser.close()
    finally:
        server.stop()
    return first, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs_dir", type=Path)
    ap.add_argument("--switches", type=int, default=6)
    a = ap.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    from workbench.dashboard import queries as q

    runs = [p.name for p in q.run_dirs(a.runs_dir) if (p / "trajectories.parquet").exists()]
    if len(runs) < 2:
        raise SystemExit(f"{a.runs_dir}: needs two runs or more with trajectories.parquet, found {len(runs)}")
    sizes = [q.run_size(a.runs_dir, r) for r in runs]
    server = server_switches(a.runs_dir, runs, a.switches)
    first, browser = browser_switches(a.runs_dir, runs, a.switches)
    flags = sorted({f for f in Path("/proc/cpuinfo").read_text().split() if f in ("avx2", "avx512f", "avx512_bf16",
                                                                                    "amx_bf16")})
    print(f"{platform.processor() or platform.machine()} ({' '.join(flags)}); {len(runs)} runs of {min(sizes)}-"
          f"{max(sizes)} trajectories")
    print(f"first paint (server start to the runs table): {first:.1f} s")
    print(f"switch, server only:  median {statistics.median(server):.2f} s (min {min(server):.2f}, max {max(server):.2f})")
    print(f"switch, in Chromium:  median {statistics.median(browser):.2f} s (min {min(browser):.2f}, "
          f"max {max(browser):.2f}) over {len(browser)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
