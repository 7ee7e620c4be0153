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


# --------------------------------------------------------------------------- main

#: name -> (add_arguments, run, help)
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int], str]] = {
    "demo": (_demo_args, demo, "evaluate the default model on the synthetic world: direct answers vs the search agent"),
    "world": (_world_args, world, "build (or load from cache) the synthetic world and print its statistics"),
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
