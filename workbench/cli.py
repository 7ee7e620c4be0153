"""The ``workbench`` command line. ``workbench <command> --help`` documents each command."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

# --------------------------------------------------------------------------- demo


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=24, help="dev questions to evaluate (default: %(default)s)")
    p.add_argument("--out", default=None, help="runs root directory (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--model", default="smollm2-135m", help="model alias, local path or cached HF id (default: %(default)s)")
    p.add_argument("--device", default="auto", help="cpu, cuda, or auto (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default: %(default)s)")
    p.add_argument("--max-turns", type=int, default=4, help="policy turns per trajectory (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tokens per turn (default: %(default)s)")
    p.add_argument("--no-notebooks", action="store_true", help="skip executing the notebooks into the run")


def demo(args: argparse.Namespace) -> int:
    from workbench.demo import run_demo

    run_demo(
        limit=args.limit,
        out=args.out,
        seed=args.seed,
        model=args.model,
        device=args.device,
        temperature=args.temperature,
        max_turns=args.max_turns,
        max_new_tokens=args.max_new_tokens,
        notebooks=not args.no_notebooks,
    )
    return 0


# --------------------------------------------------------------------------- world


def _world_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="world config JSON (default: data/world.json)")
    p.add_argument("--save", default=None, help="also write the world's files into this directory")


def world(args: argparse.Namespace) -> int:
    import time

    from workbench.data.world import WorldConfig, load_world

    cfg = WorldConfig.from_file(args.config) if args.config else None
    t0 = time.perf_counter()
    w = load_world(cfg)
    print(f"world {w.fingerprint()} ({time.perf_counter() - t0:.2f}s): {len(w.entities)} entities, "
          f"{len(w.relations)} relations, {len(w.triples)} triples, {len(w.passages)} passages, {len(w.examples)} questions")
    for split in ("train", "dev", "test"):
        print(f"  {split}: {len(w.split(split))} questions")
    if args.save:
        print("saved to", w.save(args.save))
    return 0


# --------------------------------------------------------------------------- dashboard


def _dashboard_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs", default=None, help="runs root directory (default: runs/ in the checkout, or $WORKBENCH_RUNS)")
    p.add_argument("--port", type=int, default=5006, help="port (default: %(default)s; 0 = any free port)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, loopback only)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow a non-loopback --host (the dashboard has no authentication: anyone who can reach it sees every run)")
    p.add_argument("--static", metavar="FILE", default=None,
                   help="write the dashboard as one self-contained HTML file (opens offline) and exit")


def dashboard(args: argparse.Namespace) -> int:
    from workbench.dashboard.app import check_host, save_static, serve_dashboard

    if args.static:
        print("wrote", save_static(args.static, args.runs))
        return 0
    check_host(args.host, args.allow_remote)
    if args.allow_remote and args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {args.host} without authentication (--allow-remote)", file=sys.stderr)
    serve_dashboard(args.runs, port=args.port, host=args.host, allow_remote=args.allow_remote)
    return 0


# --------------------------------------------------------------------------- lab


def _lab_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=8888, help="port (default: %(default)s)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (print the URL only)")


def lab_command(port: int = 8888, no_browser: bool = False, notebooks: str | None = None) -> list[str]:
    """The JupyterLab command line: the notebooks folder, loopback only, the `workbench` kernel by default."""
    from workbench.notebooks import KERNEL, notebooks_dir

    cmd = [sys.executable, "-m", "jupyterlab", "--notebook-dir", str(notebooks or notebooks_dir()),
           "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", f"--MultiKernelManager.default_kernel_name={KERNEL}"]
    if no_browser:
        cmd.append("--no-browser")
    return cmd


def lab(args: argparse.Namespace) -> int:
    import subprocess

    cmd = lab_command(args.port, args.no_browser)
    print(f"JupyterLab on http://127.0.0.1:{args.port}/lab (kernel 'workbench'; Jupyter prints the URL with its token below)",
          flush=True)
    try:
        return subprocess.call(cmd)
    except KeyboardInterrupt:
        return 0


# --------------------------------------------------------------------------- regress


def _regress_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="suite YAML (default: notebooks/regress.yaml)")
    p.add_argument("--notebooks", default=None, help="notebooks folder (default: the suite YAML's folder)")
    p.add_argument("--baselines", default=None, help="baselines folder (default: baselines/ beside the suite YAML)")
    p.add_argument("--cases", default=None, help="comma-separated case names (default: all; cases they use are added)")
    p.add_argument("--jobs", type=int, default=None, help="notebooks executed at once (default: min(2, CPU count))")
    p.add_argument("--cell-timeout", type=int, default=600, help="seconds per notebook cell (default: %(default)s)")
    p.add_argument("--kernel", default="workbench", help="Jupyter kernel (default: %(default)s)")
    p.add_argument("--out", default=None, help="output folder (default: runs/regress-<timestamp>/)")
    p.add_argument("--update-baselines", action="store_true",
                   help="write the current metrics as the new baselines (exit non-zero only on errors)")


def regress(args: argparse.Namespace) -> int:
    from workbench.notebooks import notebooks_dir
    from workbench.regress import run_regress

    report = run_regress(
        args.config or notebooks_dir() / "regress.yaml",
        out=args.out,
        cases=[c.strip() for c in args.cases.split(",") if c.strip()] if args.cases else None,
        jobs=args.jobs,
        cell_timeout=args.cell_timeout,
        kernel=args.kernel,
        update_baselines=args.update_baselines,
        notebooks_dir=args.notebooks,
        baselines_dir=args.baselines,
    )
    n = report.counts
    print(f"regress: {'FAILED' if report.failed else 'OK'}: {n['pass']} pass, {n['regressed']} regressed, "
          f"{n['error']} error, {n['new']} new in {report.wall_seconds:.0f}s; report: {report.out_dir}/report.md (.html)")
    return 1 if report.failed else 0


# --------------------------------------------------------------------------- main

#: name -> (add_arguments, run, help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "demo": (_demo_args, demo, "evaluate the default model on the synthetic world: direct answers vs the search agent"),
    "world": (_world_args, world, "build (or load from cache) the synthetic world and print its statistics"),
    "dashboard": (_dashboard_args, dashboard, "serve the Panel dashboard over runs/ on 127.0.0.1 (or --static FILE)"),
    "lab": (_lab_args, lab, "open JupyterLab in notebooks/ with the workbench kernel (127.0.0.1 only)"),
    "regress": (_regress_args, regress, "execute the notebook regression suite and compare metrics with the baselines"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Research workbench for LLM search agents trained with RL. Run `workbench <command> --help`.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="command")
    for name, (add_args, _, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        add_args(sp)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command][1](args)
    except (ValueError, FileNotFoundError, ModuleNotFoundError) as e:
        print(f"workbench {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
