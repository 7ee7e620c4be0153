"""How many threads torch uses on CPU: one choice for ``workbench demo``, ``eval`` and ``train``.

On a small shared machine torch's default (one thread per core) is the wrong choice whenever
other processes are busy: on a 2-core machine under load, 2 threads made the demo 3-4x slower
than 1 thread (260 s vs 998 s), because the threads wait for each other at every op. So the
default looks at the 1-minute load average: 1 thread when the machine is already about full
(``load >= cores - 0.5``), else one per available core. ``--threads`` or ``OMP_NUM_THREADS``
overrides it.
"""

from __future__ import annotations

import os
from collections.abc import Callable


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask, e.g. a container's cpuset)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def choose_threads(requested: int | None = None, cores: int | None = None,
                   load: float | None = None, environ: dict[str, str] | None = None) -> tuple[int, str]:
    """``(threads, reason)``: ``requested`` (``--threads``), else ``$OMP_NUM_THREADS`` (from ``environ``, default
    ``os.environ``), else from cores and load.

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
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # no load average (Windows): assume a quiet machine
            load = 0.0
    if cores > 1 and load >= cores - 0.5:
        return 1, f"1-minute load {load:.1f} on {cores} cores: the machine is busy; --threads N overrides"
    return cores, f"{cores} cores, 1-minute load {load:.1f}; --threads N overrides"


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
