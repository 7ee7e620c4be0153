"""Data-parallel training with ``accelerate launch``: 2 CPU processes on gloo stay in step."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_average_gradients_and_stay_in_step(tiny_model, tmp_path):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    if accelerate is None:
        pytest.skip("accelerate is not installed")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    # accelerate's torchrun launcher (--multi_gpu); without CUDA the process group uses gloo.
    # (`accelerate launch --cpu` with several processes needs MPI.)
    cmd = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
           str(Path(__file__).with_name("dist_worker.py")), tiny_model, str(tmp_path)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    r0, r1 = (torch.load(tmp_path / f"rank{i}.pt", weights_only=True) for i in (0, 1))
    assert (r0["world_size"], r1["world_size"]) == (2, 2)
    assert not set(r0["questions"]) & set(r1["questions"]), "each process trains on its own shard"
    nonzero = False
    for a, b, ra, rb in zip(r0["local"], r1["local"], r0["reduced"], r1["reduced"]):
        # both ranks hold the same gradient: the sum of the local ones (each loss is already
        # divided by the global token count, so the sum is the whole batch's gradient)
        torch.testing.assert_close(ra, rb)
        torch.testing.assert_close(ra, a + b, rtol=1e-5, atol=1e-7)
        nonzero |= bool(a.abs().sum() > 0) and not torch.equal(a, b)
    assert nonzero, "local gradients should differ between ranks (different questions)"
    for k in r0["params"]:
        torch.testing.assert_close(r0["params"][k], r1["params"][k], rtol=0, atol=0)
    assert (tmp_path / "runs").exists()
