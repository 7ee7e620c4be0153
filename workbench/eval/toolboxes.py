"""The tools each evaluated method calls: built in this process from the eval's data, or served.

:func:`method_toolboxes` gives one toolbox per set of required tools (methods needing the same tools share it):
an index over the eval's passages, one per question with ``--corpus per-question`` (built when the question is
rolled out), or clients of a running ``workbench serve-retrieval`` with ``--retrieval-url``
(:func:`workbench.tools.remote.check_server` has checked it before the model loaded).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workbench.core.types import Passage
from workbench.data.example import Example
from workbench.protocols.base import Protocol
from workbench.tools.base import Toolbox

Toolboxes = dict[tuple[str, ...], Toolbox | Callable[[Example], Toolbox]]


def method_toolboxes(protocols: Sequence[Protocol], data: Any, retriever: str, tokenizer: Any,
                     served: dict[str, Any] | None = None, url: str | None = None, *, index: str | None = None,
                     encoder: Any = None) -> tuple[Toolboxes, str]:
    """``({sorted required tools: toolbox or example -> toolbox}, what was built)`` for ``protocols`` over ``data``
    (an ``EvalData``); ``served``: the ``/health`` of the server at ``url`` the tools call instead; ``index``: a faiss
    index of ``data.passages`` the dense search uses, with ``encoder``."""
    from workbench.tools.toolbox import build_toolbox

    def make(proto: Protocol, passages: Sequence[Passage] | None) -> Toolbox:
        tb = build_toolbox(proto, data.world, passages=passages, retriever=retriever, kg=data.kg, tokenizer=tokenizer,
                           encoder=encoder, index=index)
        if data.kg is not None and "kg" in tb:  # a real KG: names the policy wrote are linked too
            from workbench.tools.kg.linking import linking_kg_tool

            tb.register("kg", linking_kg_tool(data.kg, tb.tools["kg"]))
        return tb

    toolboxes: Toolboxes = {}
    for proto in protocols:
        need = tuple(sorted(proto.required_tools))
        if need in toolboxes:
            continue
        if not need:
            toolboxes[need] = Toolbox()
        elif served is not None:
            from workbench.tools.remote import remote_toolbox

            toolboxes[need] = remote_toolbox(proto, str(url))
        elif data.setting == "per-question":  # built when each question is rolled out
            toolboxes[need] = lambda ex, proto=proto: make(proto, data.question_passages(ex))
        else:
            toolboxes[need] = make(proto, data.passages)
    tools = sorted({t for tb in toolboxes.values() if isinstance(tb, Toolbox) for t in tb.names()}
                   | {t for need, tb in toolboxes.items() if not isinstance(tb, Toolbox) for t in need})
    if served is not None:
        over = f"{served.get('retriever', '?')} over {served.get('passages', '?')} passages, served by {url}"
    elif data.setting == "per-question":
        over = f"{retriever} over each question's own {data.info['passages_per_question']:.1f} passages on average"
    else:
        over = f"{retriever} over {len(data.passages or [])} passages" + (f" (faiss index {index})" if index else "")
    return toolboxes, f"{', '.join(tools) or 'none'} ({over})"
