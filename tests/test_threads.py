"""The torch thread count: --threads, then $OMP_NUM_THREADS, then the cores and how many are busy now."""

from __future__ import annotations

import pytest

from workbench.apps import cli
from workbench.util.threads import apply_threads, busy_cores, choose_threads


@pytest.mark.parametrize(("cores", "load", "want"), [(2, 0.2, 2), (2, 1.5, 1), (2, 3.9, 1), (8, 2.0, 8), (8, 7.6, 1),
                                                    (1, 5.0, 1)])
def test_default_from_cores_and_load(monkeypatch, cores, load, want):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    n, why = choose_threads(None, cores=cores, load=load)
    assert n == want and f"{cores} cores" in why


def test_busy_cores_is_the_busy_share_of_this_process_cores_during_the_call(monkeypatch):
    from workbench.util import threads

    real = busy_cores(0.05)
    assert real is None or 0.0 <= real <= threads.available_cores() + 1e-6
    # two /proc/stat readings 100 jiffies apart on each of 2 cores: 150 of the 200 busy -> 1.5 cores
    readings = iter([(1000.0, 4000.0), (1150.0, 4200.0)])
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(threads, "_cpu_times", lambda cpus: next(readings))
    assert threads.busy_cores(0.0) == pytest.approx(1.5)


def test_default_looks_at_now_not_at_the_load_average(monkeypatch):
    """Right after a finished job the 1-minute load average is still high; the cores busy now are not."""
    from workbench.util import threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (3.9, 3.0, 2.0))
    monkeypatch.setattr(threads, "busy_cores", lambda interval_s=0.3: 0.1)
    n, why = choose_threads(None, cores=2)
    assert n == 2 and "0.1 of 2 cores busy now" in why
    monkeypatch.setattr(threads, "busy_cores", lambda interval_s=0.3: 1.8)
    assert choose_threads(None, cores=2)[0] == 1
    monkeypatch.setattr(threads, "busy_cores", lambda interval_s=0.3: None)  # no /proc/stat: the load average
    n, why = choose_threads(None, cores=2)
    assert n == 1 and "1-minute load 3.9" in why


def test_flag_then_environment_win(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert choose_threads(None, cores=2, load=9.0) == (3, "OMP_NUM_THREADS=3")
    assert choose_threads(5, cores=2, load=9.0)[0] == 5
    monkeypatch.setenv("OMP_NUM_THREADS", "")  # empty: unset
    assert choose_threads(None, cores=2, load=0.0)[0] == 2
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
        choose_threads(None)
    with pytest.raises(ValueError, match="--threads"):
        choose_threads(0)


def test_apply_sets_torch_and_says_so():
    import torch

    before = torch.get_num_threads()
    said = []
    try:
        assert apply_threads(1, say=said.append) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert said == ["torch threads: 1 (--threads 1)"]


@pytest.mark.parametrize("command", ["demo", "eval", "train"])
def test_commands_take_threads(command):
    parser = cli.build_parser()
    extra = ["--method", "direct"] if command == "eval" else []
    assert parser.parse_args([command, "--threads", "3", *extra]).threads == 3
