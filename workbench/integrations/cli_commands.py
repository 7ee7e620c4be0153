"""``workbench serve-retrieval``, ``workbench export verl|verifiers`` and ``workbench import verl|verifiers`` (registered in
``workbench.apps.cli``)."""

from __future__ import annotations

import argparse
import logging
import math

from workbench.tools.dense import POOLING
from workbench.tools.remote import API_KEY_ENV

# --------------------------------------------------------------------------- serve-retrieval


def serve_retrieval_args(p: argparse.ArgumentParser) -> None:
    from workbench.integrations import retrieval_server as rs

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench serve-retrieval                          # BM25 over the world, plus /kg and /plan\n"
        "  workbench serve-retrieval --corpus wiki-18.jsonl --port 8000\n"
        "  workbench serve-retrieval --corpus wiki-18.jsonl --index-dir /data/wiki18-bm25   # 21M passages, mmap\n"
        "  workbench serve-retrieval --retriever dense --index e5_Flat.index --corpus wiki-18.jsonl \\\n"
        "       --encoder /models/e5-base-v2                   # Search-R1's faiss index, memory-mapped\n"
        "  curl -s 127.0.0.1:8000/retrieve -H 'Content-Type: application/json' \\\n"
        "       -d '{\"queries\": [\"who founded x\"], \"topk\": 3, \"return_scores\": true}'\n"
        f"  {API_KEY_ENV}=$(openssl rand -hex 16) workbench serve-retrieval --host 0.0.0.0 --allow-remote\n"
        f"  curl -s HOST:8000/retrieve -H \"Authorization: Bearer ${API_KEY_ENV}\" -H 'Content-Type: application/json' "
        "-d '{\"queries\": [\"x\"]}'\n"
        "Search-R1's retrieval_service_url / verl's search tool take http://127.0.0.1:PORT/retrieve unchanged.\n"
        f"Clients of the workbench (eval --retrieval-url, verl's agent loop) send ${API_KEY_ENV} as the bearer token."
    )
    p.add_argument("--corpus", default="world", help="'world' (passages and graph) or a corpus file: FlashRAG JSONL "
                   "{id, contents} or any layout load_corpus reads (default: %(default)s)")
    p.add_argument("--retriever", default="bm25", choices=("bm25", "dense"), help="(default: %(default)s)")
    p.add_argument("--encoder", default=None, help="dense encoder path or name (default: the bundled MiniLM); with "
                   "--index, the model the index was built with")
    p.add_argument("--index", default=None, metavar="FILE", help="a faiss index of --corpus (row i = passage i; "
                   "Search-R1's e5_Flat.index over wiki-18.jsonl), memory-mapped where its type allows; needs "
                   "--retriever dense")
    p.add_argument("--query-prefix", default=None, metavar="TEXT", help="put before each query (default: 'query: ' "
                   "for an e5 encoder, else none)")
    p.add_argument("--pooling", default=None, choices=POOLING, help="pool token vectors this way instead of the "
                   "encoder folder's own (Search-R1: mean for e5, cls for bge)")
    p.add_argument("--limit", type=int, default=None, help="first N passages of the corpus only (N >= 1)")
    p.add_argument("--index-dir", default=None, metavar="DIR", help="a sharded, memory-mapped BM25 index (for "
                   "wiki-18's 21M passages): built in DIR from --corpus the first time (streaming), then loaded")
    p.add_argument("--shard-size", type=int, default=1_000_000, help="passages per shard of --index-dir (default: %(default)s)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, this machine only; "
                   "another address needs --allow-remote and an API key)")
    p.add_argument("--port", type=int, default=8000, help="0..65535; 0 picks a free port, logged (default: %(default)s)")
    p.add_argument("--allow-remote", action="store_true", help="allow a non-loopback --host (then an API key is "
                   "required: every endpoint but /health answers 401 without it)")
    p.add_argument("--api-key", default=None, metavar="KEY", help=f"bearer token clients must send (Authorization: "
                   f"Bearer KEY); default ${API_KEY_ENV}, which is better: a flag shows in `ps`")
    p.add_argument("--docs", action="store_true", help="serve FastAPI's /docs, /redoc and /openapi.json pages (off by default)")
    p.add_argument("--topk", type=int, default=3, help="topk when a request gives none, 1..--max-topk (default: %(default)s, Search-R1)")
    p.add_argument("--max-topk", type=int, default=rs.MAX_TOPK, help="larger topk is refused with 422 (default: %(default)s)")
    p.add_argument("--max-hits", type=int, default=rs.MAX_HITS, help="queries x topk one request may ask for; more is "
                   "refused with 422 saying how to split it (default: %(default)s)")
    p.add_argument("--max-response-mb", type=float, default=rs.MAX_RESPONSE_BYTES / 2**20, help="largest response; "
                   "a bigger result is refused with 422 (default: %(default)g)")
    p.add_argument("--read-timeout", type=float, default=rs.READ_TIMEOUT_S, metavar="S", help="seconds a request's "
                   "body has to arrive in once its head has; else 408 and the connection closes (default: %(default)g)")
    p.add_argument("--idle-timeout", type=float, default=rs.IDLE_TIMEOUT_S, metavar="S", help="seconds a connection "
                   "may stay open with no request in progress, before its first request and between requests "
                   "(default: %(default)g)")


def check_serve_args(args: argparse.Namespace, env: dict[str, str] | None = None) -> str | None:
    """Validate ``serve-retrieval``'s flags before anything loads; the API key to require (None: no key).
    Each problem is a ValueError of one line naming the flag and the fix."""
    import os

    from workbench.util.http_stack import is_loopback

    env = os.environ if env is None else env
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is not a TCP port: use 1..65535, or 0 for any free port")
    if args.max_topk < 1:
        raise ValueError(f"--max-topk {args.max_topk}: must be >= 1 (100 is Search-R1's largest)")
    if not 1 <= args.topk <= args.max_topk:
        raise ValueError(f"--topk {args.topk}: the default topk must be 1..--max-topk ({args.max_topk})")
    if args.max_hits < args.topk:
        raise ValueError(f"--max-hits {args.max_hits}: must be >= --topk ({args.topk}), or no request is served")
    if args.index is not None and args.retriever != "dense":
        raise ValueError(f"--index {args.index} is a dense (faiss) index: add --retriever dense")
    for flag, v in (("--limit", args.limit), ("--shard-size", args.shard_size)):
        if v is not None and v < 1:
            raise ValueError(f"{flag} {v}: must be >= 1")
    for flag, v, unit in (("--read-timeout", args.read_timeout, 1), ("--idle-timeout", args.idle_timeout, 1),
                          ("--max-response-mb", args.max_response_mb, 2**20)):
        if not (v > 0 and math.isfinite(v * unit)):  # the size is used in bytes
            raise ValueError(f"{flag} {v:g}: must be > 0 and finite{' in bytes' if unit > 1 else ''}")
    key = args.api_key if args.api_key is not None else env.get(API_KEY_ENV) or None
    if key is not None and (not key.strip() or any(c.isspace() or not c.isprintable() for c in key)):
        raise ValueError(f"the API key (--api-key or ${API_KEY_ENV}) must be printable with no spaces, e.g. "
                         "`openssl rand -hex 16`")
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise ValueError(f"refusing to serve on {args.host!r}, which is not a loopback address: anyone who can "
                             "reach it could use the server. Keep the default 127.0.0.1 (e.g. through an SSH tunnel), "
                             f"or pass --allow-remote with an API key (${API_KEY_ENV})")
        if key is None:
            raise ValueError(f"--host {args.host} --allow-remote needs an API key: set ${API_KEY_ENV} (e.g. "
                             "`openssl rand -hex 16`) or pass --api-key, and give it to the clients")
    return key


def check_listen(host: str, port: int, fix: str = "pick another --port (0 = any free port) or --host") -> None:
    """Bind ``(host, port)`` and let go at once, so that a port in use (or a host that is no address of this machine)
    is a one-line ValueError naming the address and ``fix`` before a server spends minutes loading."""
    from workbench.util.http_stack import bind_socket

    try:
        bind_socket(host, port).close()
    except OSError as e:
        raise ValueError(f"cannot listen on {host}:{port} ({e.strerror or e}): {fix}") from None


def serve_retrieval(args: argparse.Namespace) -> int:
    from workbench.integrations.retrieval_server import create_app, load_service, serve_forever

    key = check_serve_args(args)
    check_listen(args.host, args.port)
    log = logging.getLogger(__name__)
    encoder = args.encoder
    if args.query_prefix is not None or args.pooling is not None:
        from workbench.tools.dense import Encoder

        encoder = Encoder(args.encoder, query_prefix=args.query_prefix, pooling=args.pooling)
    service = load_service(args.corpus, args.retriever, limit=args.limit, encoder=encoder,
                           index_dir=args.index_dir, shard_size=args.shard_size, index=args.index)
    app = create_app(service, default_topk=args.topk, max_topk=args.max_topk, max_hits=args.max_hits,
                     max_response_bytes=int(args.max_response_mb * 2**20), api_key=key, docs=args.docs,
                     read_timeout_s=args.read_timeout)

    def bound(url: str) -> None:
        log.warning("serving %d passages (%s) on %s/retrieve%s", service.n_passages, args.retriever, url,
                    " (API key required)" if key else "")
        if args.allow_remote:
            log.warning("reachable from other machines: every endpoint but /health needs the API key")

    serve_forever(app, args.host, args.port, idle_timeout_s=args.idle_timeout, on_bound=bound)
    return 0


# --------------------------------------------------------------------------- export


def export_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench export verl --method search_r1 --out exports/search_r1\n"
        "  workbench export verl --method dynasearcher --dataset hotpotqa --split dev --limit 500 --out exp/ds\n"
        "  workbench export verl --method search_r1 --retrieval-url http://127.0.0.1:8000 --out exp/sr1   # shared server\n"
        "  workbench export verifiers search_r1 --limit 50 --out exports/vf-search_r1\n"
        "verl: writes train.parquet / val.parquet (verl's RLHFDataset columns), reward.py (custom_reward_function.path)\n"
        "and run_<method>.sh (the paper's hyperparameters as verl Hydra overrides; not yet run on GPUs).\n"
        "verifiers: writes an installable verifiers 0.4.0 environment package (pyproject.toml, workbench_<method>/ with\n"
        "load_environment, the questions and the manifest): the protocol's turns and tools over --corpus, the method's\n"
        "rubric as its rewards; `vf-eval workbench_<method>` in .venv-verifiers (make verifiers-env) evaluates it."
    )
    p.add_argument("target", choices=("verl", "verifiers"), help="the engine to export for")
    p.add_argument("name", nargs="?", default=None, metavar="METHOD", help="the method (or --method)")
    p.add_argument("--method", default=None, help="a method from `workbench methods` (with a reward preset)")
    p.add_argument("--dataset", default="world", help="'world' (its train/dev splits) or a dataset name/file (default: %(default)s)")
    p.add_argument("--split", default=None, help="split of a dataset file to export as train (default: all; verifiers "
                   "on the world: dev)")
    p.add_argument("--val-dataset", default=None, help="validation dataset (default: the world's dev split, or none)")
    p.add_argument("--limit", type=int, default=None, help="first N questions per file")
    p.add_argument("--corpus", default="world", help="corpus the reward resolves passage ids against and the server serves (default: %(default)s)")
    p.add_argument("--model", default="Qwen/Qwen2.5-3B-Instruct", help="actor model path in the launch script (default: %(default)s)")
    p.add_argument("--retrieval-url", default=None, metavar="URL", help="a running `workbench serve-retrieval` "
                   "(http://127.0.0.1:8000) the agent loop's tools call instead of each worker indexing the corpus")
    p.add_argument("--max-turns", type=int, default=None, help="verifiers: policy turns per rollout (default: the "
                   "method's, else 4)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="verifiers: tokens per policy turn (default: the "
                   "method's, else 256)")
    p.add_argument("--out", required=True, help="output directory")


def export_command(args: argparse.Namespace) -> int:
    if args.name and args.method and args.name != args.method:
        raise ValueError(f"two methods named: {args.name} and --method {args.method}; give one")
    args.method = args.method or args.name
    if not args.method:
        raise ValueError(f"workbench export {args.target} needs a method: `workbench export {args.target} METHOD "
                         "--out DIR` (`workbench methods` lists them)")
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit {args.limit}: must be >= 1 (the first N questions per file; default: all)")
    if args.target == "verifiers":
        from workbench.integrations.verifiers.export import export_verifiers

        out = export_verifiers(args.method, args.out, dataset=args.dataset, split=args.split, limit=args.limit,
                               corpus=args.corpus, max_turns=args.max_turns, max_new_tokens=args.max_new_tokens)
        for name, path in out.items():
            print(f"{name:>9}: {path}")
        return 0
    for flag, v in (("--max-turns", args.max_turns), ("--max-new-tokens", args.max_new_tokens)):
        if v is not None:
            raise ValueError(f"{flag} is a verifiers export setting: verl's launch script sets its own turn limits")
    from workbench.integrations.verl.export import export_verl

    out = export_verl(args.method, args.dataset, args.out, split=args.split, val_dataset=args.val_dataset,
                      limit=args.limit, corpus=args.corpus, model=args.model, retrieval_url=args.retrieval_url)
    for name, path in out.items():
        print(f"{name:>8}: {path}")
    return 0


# --------------------------------------------------------------------------- import


def import_args(p: argparse.ArgumentParser) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  workbench import verl exports/search_r1 --method search_r1     # an export dir: rollouts/, validation/, metrics.jsonl\n"
        "  workbench import verl /ckpt/rollouts --method search_r1 --validation-dir /ckpt/val --metrics train.log\n"
        "reads verl's trainer.rollout_data_dir / validation_data_dir dumps (<step>.jsonl with input, output,\n"
        "gts, score, step and the reward's components) and its metrics (file-logger JSONL or console log) into a\n"
        "workbench run (kind train) that the inspector, playground and dashboard open.\n"
        "  workbench import verifiers outputs/          # vf-eval's --output-dir (one run per exported method)\n"
        "reads vf-eval's traces.jsonl (the exported environments' traces: messages, rewards) into a workbench run\n"
        "(kind eval): each trace rebuilt by its method's protocol, its reward column verifiers' recorded reward."
    )
    p.add_argument("source", choices=("verl", "verifiers"), help="the engine the run comes from")
    p.add_argument("dir", help="verl: rollout_data_dir, or the export directory holding rollouts/ and validation/; "
                   "verifiers: a vf-eval run directory (traces.jsonl) or the --output-dir holding several")
    p.add_argument("--method", default=None, help="the method whose protocol parses the responses (needed for verl; "
                   "verifiers traces name their own)")
    p.add_argument("--validation-dir", default=None, help="validation_data_dir, if not inside DIR")
    p.add_argument("--metrics", default=None, help="verl's console log or file-logger JSONL (default: DIR/metrics.jsonl "
                   "or DIR/train.log if there)")
    p.add_argument("--corpus", default=None, help="corpus passage ids resolve against (default: the export's, else none)")
    p.add_argument("--no-features", action="store_true", help="skip the features table (large runs)")
    p.add_argument("--out", default=None, help="runs root (default: runs/ or $WORKBENCH_RUNS)")
    p.add_argument("--name", default=None, help="label in the run id (default: verl-<method>)")


def import_command(args: argparse.Namespace) -> int:
    if args.source == "verifiers":
        from workbench.integrations.verifiers.importer import import_verifiers, summary_line

        for flag, v in (("--validation-dir", args.validation_dir), ("--metrics", args.metrics)):
            if v is not None:
                raise ValueError(f"{flag} is a verl import setting: a verifiers run is its traces.jsonl")
        run = import_verifiers(args.dir, method=args.method, corpus=args.corpus, out=args.out, name=args.name,
                               features=not args.no_features)
        print(summary_line(run))
        return 0
    if args.method is None:
        raise ValueError("workbench import verl needs --method: the method whose protocol parses verl's responses")
    from workbench.integrations.verl.importer import import_verl

    run = import_verl(args.dir, args.method, validation_dir=args.validation_dir, metrics=args.metrics,
                      out=args.out, name=args.name, corpus=args.corpus, features=not args.no_features)
    n = run.metrics()
    print(f"run {run.path}: {n['n_trajectories']} trajectories over {n['steps']} step(s)"
          + (f"; notes: {'; '.join(n['notes'])}" if n["notes"] else ""))
    return 0
