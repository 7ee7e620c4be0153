"""Where the memory of one ``workbench eval`` goes: RSS per phase (imports, data, model, tools, each
method's rollout, features and writing), with the generation backend's own figures.

One evaluation as ``workbench eval`` runs it (``run_eval``), in this process. A sampler thread reads the
process RSS (psutil) every ``--interval`` seconds and keeps the peak of each phase; the phases are
the ones ``run_eval`` announces (``[data]``, ``[model]``, ``[tools]``, one line per method). With
``--tracemalloc``, the Python heap's peak per phase too (objects: examples, passages, indexes,
trajectories; torch tensors are not Python heap and do not show there). The HF backend reports the
largest prefix-cache (kept key/value caches) it held and the largest prefill it ran; the model's
parameters are counted from the model.

    OMP_NUM_THREADS=1 .venv/bin/python bench/bench_eval_memory.py \\
        --methods search_r1,vanilla_rag --dataset data/samples/hotpotqa_dev_distractor.sample.json --limit 20

``--cache-mib``, ``--batch-mib``, ``--prefill-mib`` (0: no chunks) and ``--no-trim`` set the HF backend's memory
knobs, to compare them in one sitting; the first line gives wall and CPU seconds (CPU time is what to compare
on a shared machine) and the load.

Prints one table (MB = 2**20 bytes); the peak of the whole run is also ``ru_maxrss``, what
``/usr/bin/time -v`` reports as "Maximum resident set size".
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import threading
import time

import psutil

MB = 2**20


class Sampler:
    """Peak RSS (and, with tracemalloc, Python-heap peak) per named phase."""

    def __init__(self, interval: float, trace: bool):
        self.proc = psutil.Process()
        self.interval, self.trace = interval, trace
        self.phase = "start"
        self.rows: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._open(self.phase)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _open(self, phase: str) -> None:
        rss = self.proc.memory_info().rss
        self.rows[phase] = {"start": rss, "peak": rss, "end": rss, "t0": time.perf_counter(), "py_peak": float("nan")}
        if self.trace:
            import tracemalloc

            tracemalloc.reset_peak()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        rss = self.proc.memory_info().rss
        with self._lock:
            row = self.rows[self.phase]
            row["peak"], row["end"] = max(row["peak"], rss), rss

    def enter(self, phase: str) -> None:
        """Close the current phase and open ``phase``."""
        self.sample()
        with self._lock:
            row = self.rows[self.phase]
            row["seconds"] = time.perf_counter() - row["t0"]
            if self.trace:
                import tracemalloc

                row["py_peak"] = tracemalloc.get_traced_memory()[1]
            self.phase = phase
            self._open(phase)

    def stop(self) -> None:
        self.enter("end")
        self._stop.set()
        self._thread.join()
        del self.rows["end"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--methods", default="search_r1,vanilla_rag")
    ap.add_argument("--dataset", default="data/samples/hotpotqa_dev_distractor.sample.json")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--model", default=None, help="model alias or path (default: the eval default)")
    ap.add_argument("--interval", type=float, default=0.02, help="seconds between RSS samples")
    ap.add_argument("--tracemalloc", action="store_true", help="also the Python heap's peak per phase (slower)")
    ap.add_argument("--cache-mib", type=int, default=None, help="HF backend cache_bytes (default: the backend's)")
    ap.add_argument("--batch-mib", type=int, default=None, help="HF backend batch_bytes (default: the backend's)")
    ap.add_argument("--prefill-mib", type=int, default=None,
                    help="HF backend prefill_bytes; 0: one prefill forward, no chunks (default: the backend's)")
    ap.add_argument("--no-trim", action="store_true", help="never return freed heap memory to the OS (malloc_trim)")
    args = ap.parse_args()

    sampler = Sampler(args.interval, args.tracemalloc)
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start()
    sampler.enter("imports (torch, transformers, workbench)")
    import torch
    import transformers  # noqa: F401

    import workbench.core.models  # noqa: F401  (its imports belong to this phase)
    from workbench.eval.config import DEFAULT_MODEL
    from workbench.eval.runner import run_eval
    from workbench.rollout.backends.hf import HFBackend

    methods = [m for m in args.methods.split(",") if m]
    sampler.enter("data (questions, corpus)")
    backends: list[HFBackend] = []
    prefills: list[tuple[int, int, int]] = []  # (rows, new tokens, cached tokens) of each prefill

    orig_prefill = HFBackend._prefill

    def prefill(self, prompts, entries):
        cached = max((len(e.ids) for e in entries if e is not None), default=0)
        prefills.append((len(prompts), max(len(p) for p in prompts) - cached, cached))
        return orig_prefill(self, prompts, entries)

    HFBackend._prefill = prefill  # type: ignore[method-assign]
    orig_init = HFBackend.__init__

    def init(self, *a, **kw):
        orig_init(self, *a, **kw)
        for attr, mib in (("cache_bytes", args.cache_mib), ("batch_bytes", args.batch_mib),
                          ("prefill_bytes", args.prefill_mib)):
            if mib is not None:
                setattr(self, attr, (mib << 20) or None)
        backends.append(self)

    HFBackend.__init__ = init  # type: ignore[method-assign]

    phases = iter([*(f"rollout {m}" for m in methods)])

    def log(msg: str) -> None:
        if msg.startswith("[data]"):
            sampler.enter("model (weights, tokenizer)")
        elif msg.startswith("[model]"):
            sampler.enter("tools (retrieval indexes)")
        elif msg.startswith("[eval]"):
            sampler.enter(next(phases))
        elif msg.startswith("       ") and ":" in msg:
            sampler.enter(next(phases, "features, metrics, writing"))

    if args.no_trim:
        import workbench.core.models

        workbench.core.models.trim_heap = lambda: False  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as out:
        t0, cpu0 = time.perf_counter(), time.process_time()
        run = run_eval(methods, args.dataset, args.model or DEFAULT_MODEL, limit=args.limit, out=out, log=log,
                       progress=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        metrics = run.metrics()
    sampler.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    print(f"# eval memory: {args.methods} on {os.path.basename(args.dataset)} --limit {args.limit}, "
          f"model {args.model or DEFAULT_MODEL}; {platform.node()} {platform.machine()}, {os.cpu_count()} cpu, "
          f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); wall {wall:.0f}s, cpu {cpu:.0f}s, "
          f"load {os.getloadavg()[0]:.1f}")
    head = f"{'phase':44s} {'RSS start':>10s} {'RSS peak':>10s} {'RSS end':>10s} {'py heap peak':>13s} {'seconds':>8s}"
    print(head)
    print("-" * len(head))
    for name, r in sampler.rows.items():
        py = "-" if r["py_peak"] != r["py_peak"] else f"{r['py_peak'] / MB:.0f}"
        print(f"{name:44s} {r['start'] / MB:10.0f} {r['peak'] / MB:10.0f} {r['end'] / MB:10.0f} {py:>13s} "
              f"{r.get('seconds', 0):8.1f}")
    print(f"{'whole run (ru_maxrss)':44s} {'':10s} {maxrss / MB:10.0f}")
    for be in backends:
        n_params = sum(p.numel() * p.element_size() for p in be.model.parameters())
        cfg = be.model.config
        kv_tok = 2 * cfg.num_hidden_layers * getattr(cfg, "num_key_value_heads", cfg.num_attention_heads) * (
            getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads) * next(
            be.model.parameters()).element_size()
        big = max(prefills, key=lambda p: p[0] * (p[1] + p[2]), default=(0, 0, 0))
        print(f"model parameters: {n_params / MB:.0f} MB; key/value cache: {kv_tok / 1024:.0f} KB per token")
        print(f"prefix cache peak: {be.stats['peak_cache_bytes'] / MB:.0f} MB (budget {be.cache_bytes / MB:.0f} MB), "
              f"batch budget {'none' if be.batch_bytes is None else f'{be.batch_bytes / MB:.0f} MB'}, "
              f"prefill budget {'none' if be.prefill_bytes is None else f'{be.prefill_bytes / MB:.0f} MB'}; "
              f"largest prefill: {big[0]} rows x ({big[1]} new + {big[2]} cached) tokens = "
              f"{big[0] * (big[1] + big[2]) * kv_tok / MB:.0f} MB of keys/values; all-position logits there would be "
              f"{big[0] * big[1] * cfg.vocab_size * 4 / MB:.0f} MB")
    for m, s in metrics["methods"].items():
        print(f"{m}: em {s['em']:.3f} cem {s['cem']:.3f} s/answer {s['seconds']:.2f} "
              f"(wall/answer {s.get('wall_seconds_per_answer', float('nan')):.2f})")


if __name__ == "__main__":
    main()
