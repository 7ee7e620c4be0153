"""MkDocs hook: the Methods page is generated from the method declarations (``workbench.methods.METHODS``), so a method
added as one package (``workbench methods new NAME``) gets its section with no page edited: the paper, the protocol and
its tools, the reward's components with their docstrings (the paper's equations), the optimizer preset's loss
settings, the paper's own values and where each comes from."""

from __future__ import annotations

import html
import inspect
import json
import re
from typing import Any

MARKER = "<!-- methods -->"


def _cell(text: Any) -> str:
    return html.escape(" ".join(str(text).split())).replace("|", "\\|")


def _doc(obj: Any) -> str:
    return " ".join((inspect.getdoc(obj) or "").split())


def _paper(m: Any) -> str:
    ids = re.findall(r"arXiv:(\d{4}\.\d{4,5})", m.source or "")
    link = ", ".join(f"[arXiv:{i}](https://arxiv.org/abs/{i})" for i in ids)
    rest = re.sub(r"arXiv:\d{4}\.\d{4,5};?\s*", "", m.source or "").strip()
    return "; ".join(x for x in (link, html.escape(rest)) if x)


def method_section(m: Any) -> list[str]:
    """One method's section: its declaration as a reader wants it."""
    from workbench.rl.config import get_loss_config

    out = [f"## `{m.name}`", "", f"**{html.escape(m.title)}** ({html.escape(m.citation)})"
           + (f" · {_paper(m)}" if m.source else ""), ""]
    proto = m.protocol
    out += [f"- **Protocol** `{proto.name}` (`{proto.__module__}.{proto.__qualname__}`), tools: "
            + (", ".join(f"`{t}`" for t in m.tools) or "none")
            + (f", arguments `{json.dumps(dict(m.protocol_kwargs))}`" if m.protocol_kwargs else "")]
    if m.reward is not None:
        rubric = m.rubric()
        out += [f"- **Reward** `{m.reward.name}`: " + " + ".join(
            f"{w:g}·`{n}`" if w != 1 else f"`{n}`" for n, w in rubric.weights.items())
            + f"; needs {html.escape(m.feature_needs().describe())}", ""]
        out += ["| component | what it pays |", "|---|---|"]
        out += [f"| `{fn.__name__}` | {_cell(_doc(fn))} |" for fn in rubric.components]
        if rubric.params:
            out += ["", "Parameters (defaults): " + ", ".join(f"`{k}={v!r}`" for k, v in sorted(rubric.params.items()))]
        out += [""]
    if m.optimizer:
        lc = get_loss_config(m.optimizer, **{k: v for k, v in m.optimizer_overrides.items()
                                             if k not in ("kl_coef_end",)})
        keys = ("surrogate", "agg", "adv_norm", "eps_low", "eps_high", "kl_coef", "kl_estimator", "dynamic_filter")
        out += [f"- **Optimizer** `{m.optimizer}`: " + ", ".join(f"{k} `{getattr(lc, k)}`" for k in keys
                                                                 if hasattr(lc, k))]
    if m.stages:
        out += [f"- **Reward stages**: `{json.dumps(dict(m.stages))}`"]
    if m.paper:
        out += [f"- **The paper's values**: `{json.dumps(dict(m.paper), default=str)}`"]
    if m.notes:
        out += ["- **Where each value comes from**:"] + [f"    - {html.escape(k)}: {html.escape(v)}"
                                                          for k, v in m.notes.items()]
    return out + [""]


def methods_page() -> str:
    from workbench.methods import METHODS

    published = [m for m in METHODS.values() if not m.baseline]
    baselines = [m for m in METHODS.values() if m.baseline]
    lines: list[str] = []
    for m in published:
        lines += method_section(m)
    if baselines:
        lines += ["## Baselines", "", "| method | what it is | protocol | tools |", "|---|---|---|---|"]
        lines += [f"| `{m.name}` | {_cell(m.title)} | `{m.protocol.name}` | {', '.join(m.tools) or '-'} |"
                  for m in baselines]
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, methods_page())
    return markdown
