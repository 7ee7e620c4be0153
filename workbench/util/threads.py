"""How many threads torch uses on CPU: one choice for ``workbench demo``, ``eval`` and ``train``.

On a small shared machine torch's default (one thread per core) is the wrong choice whenever
other processes are busy: on a 2-core machine under load, 2 threads made the demo 3-4x slower
than 1 thread, because the threads wait for each other at every op. So the default measures
how busy this process's cores are *now* (:func:`busy_cores`: ``/proc/stat`` sampled over a
fraction of a second, while this process sleeps): 1 thread when the other processes already
use about all of them (``busy >= cores - 0.5``), else one per available core. A load average
would remember a job that has just ended for minutes. ``--threads`` or ``OMP_NUM_THREADS``
overrides it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def _cpu_times(cpus: set[int]) -> tuple[float, float] | None:
    """``(busy, total)`` jiffies summed over ``cpus`` from ``/proc/stat``; None where there is none (not Linux)."""
    busy = total = 0.0
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, *fields = line.split()
                if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
                    continue
                vals = [float(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
                total += sum(vals)
                busy += sum(vals) - vals[3] - vals[4]
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total > 0 else None


def busy_cores(interval_s: float = 0.3) -> float | None:
    """How many of this process's cores other processes keep busy now: the busy share of their time over
    ``interval_s`` (this process sleeps meanwhile) times the cores; None where ``/proc/stat`` is unavailable."""
    try:
        cpus = set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None
    before = _cpu_times(cpus)
    if before is None:
        return None
    time.sleep(interval_s)
    after = _cpu_times(cpus)
    if after is None or after[1] <= before[1]:
        return None
    return len(cpus) * (after[0] - before[0]) / (after[1] - before[1])


def choose_threads(requested: int | None = None, cores: int | None = None,
                   load: float | None = None, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``(threads, reason)``: ``requested`` (``--threads``), else ``$OMP_NUM_THREADS`` (from ``environ``, default
    ``os.environ``), else from the cores and how many of them are busy now (``load``, default :func:`busy_cores`;
    the 1-minute load average where that cannot be measured).

    >>> choose_threads(None, cores=2, load=1.7, environ={})[0], choose_threads(None, cores=2, load=0.3, environ={})[0]
    (1, 2)
    >>> choose_threads(3, cores=2, load=9.0)
    (3, '--threads 3')
    """
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--threads must be >= 1, got {requested}")
        return requested, f"--threads {requested}"
    env = (os.environ if environ is None else environ).get("OMP_NUM_THREADS", "").strip()
    if env:
        if not env.isdigit() or int(env) < 1:
            raise ValueError(f"OMP_NUM_THREADS={env!r}: expected a positive integer (or unset it)")
        return int(env), f"OMP_NUM_THREADS={env}"
    cores = cores or available_cores()
    if load is None:
        load = busy_cores()
        seen = None if load is None else f"{load:.1f} of {cores} cores busy now"
    else:
        seen = f"{load:.1f} of {cores} cores busy"
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows): assume a quiet machine
            load = 0.0
        seen = f"1-minute load {load:.1f} on {cores} cores"
    if cores > 1 and load >= cores - 0.5:
        return 1, f"{seen}: the machine is busy; --threads N overrides"
    return cores, f"{seen}; --threads N overrides"


def apply_threads(requested: int | None = None, say: Callable[[str], None] | None = None) -> int:
    """Set torch's intra-op threads to :func:`choose_threads` and say what was chosen (stdout, with the other progress lines; rank 0 only)."""
    import torch

    n, why = choose_threads(requested)
    torch.set_num_threads(n)
    if say is None and os.environ.get("RANK", "0") == "0":
        print(f"torch threads: {n} ({why})", flush=True)
    elif say is not None:
        say(f"torch threads: {n} ({why})")
    return n
