"""Memory a training forward holds for its backward: what gradient checkpointing saves.

Measured, not estimated: the bytes the process has allocated right after the forward (and loss) minus just
before it — on CUDA ``torch.cuda.memory_allocated``, on a CPU glibc's live heap (``mallinfo2``: bytes in use
in the arenas plus mmapped blocks, which is where torch's CPU tensors live). Everything the backward will
need is alive at that moment (activations, saved inputs, the loss); the peak of the step is this plus the
backward's transient gradients. ``bench/gpu/suite.py`` prints it with and without checkpointing.

    >>> live_bytes("cpu") > 0 or live_bytes("cpu") == 0  # 0 where glibc's mallinfo2 is missing
    True
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable
from typing import Any

import torch

_MALLINFO2: Any = None


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                                               "uordblks", "fordblks", "keepcost")]


def _mallinfo2() -> Any:
    global _MALLINFO2
    if _MALLINFO2 is None:
        _MALLINFO2 = False
        try:
            fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallinfo2
            fn.restype = _Mallinfo2
            _MALLINFO2 = fn
        except (OSError, AttributeError):  # not glibc, or glibc < 2.33
            pass
    return _MALLINFO2


def live_bytes(device: str | torch.device) -> int:
    """Bytes allocated now: CUDA tensors on a CUDA ``device``, else the C heap in use (0 where unknown)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return int(torch.cuda.memory_allocated(dev))
    fn = _mallinfo2()
    if not fn:
        return 0
    m = fn()
    return int(m.uordblks + m.hblkhd)


def held_for_backward(forward: Callable[[], torch.Tensor], device: str | torch.device) -> tuple[torch.Tensor, int]:
    """Run ``forward()`` (a function returning the loss) and return ``(loss, bytes it left allocated)``: the
    activations autograd keeps for the backward (plus the loss itself). Call ``loss.backward()`` afterwards."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    before = live_bytes(dev)
    loss = forward()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return loss, max(0, live_bytes(dev) - before)
