"""Trajectory views: a per-turn transcript with coloured tags and a token view of the loss mask.

Views only: the data comes from ``workbench.trajectory`` and ``workbench.runs``.
"""

from __future__ import annotations

import html
import re
from typing import Any

from workbench.trajectory import OBSERVATION, Trajectory, token_pieces

#: Colours per protocol tag (background) for the transcript view.
TAG_COLOURS = {
    "think": "#eef2ff",
    "search": "#fff4d6",
    "tool_call": "#fff4d6",
    "information": "#e8f5e9",
    "result": "#e8f5e9",
    "observation": "#e8f5e9",
    "original_evidence": "#fce4ec",
    "reflect": "#f3e5f5",
    "answer": "#d7f0ff",
}
_TAG = re.compile(r"(&lt;/?(" + "|".join(TAG_COLOURS) + r")&gt;)", re.IGNORECASE)


def _colour_tags(escaped: str) -> str:
    def sub(m: re.Match[str]) -> str:
        colour = TAG_COLOURS[m.group(2).lower()]
        return f'<b style="background:{colour};border-radius:3px;padding:0 2px">{m.group(1)}</b>'

    return _TAG.sub(sub, escaped)


_MARKUP = re.compile(r"(<[^>]*>|&[#a-z0-9]+;)", re.IGNORECASE)


def highlight_html(escaped: str, term: str) -> str:
    """Wrap case-insensitive occurrences of ``term`` in ``<mark>`` inside already-escaped HTML.

    Tags and character entities are left alone, so a highlight never breaks the markup.

    >>> highlight_html("&lt;search&gt; Velmora &amp; Ostrel", "velmora")
    '&lt;search&gt; <mark>Velmora</mark> &amp; Ostrel'
    """
    if not term:
        return escaped
    pat = re.compile(re.escape(html.escape(term, quote=False)), re.IGNORECASE)
    parts = _MARKUP.split(escaped)
    return "".join(p if i % 2 else pat.sub(lambda m: f"<mark>{m.group(0)}</mark>", p) for i, p in enumerate(parts))


def turns_html(traj: Trajectory, max_chars: int = 4000, highlight: str = "") -> str:
    """The transcript, one block per turn: policy turns white, observations green and marked masked.

    ``highlight``: a string to mark (case-insensitive) in the question and every turn.
    """
    parts = [
        f"<div style='font-family:sans-serif'><b>{html.escape(traj.id)}</b> · {html.escape(traj.protocol)} · "
        f"finish: <code>{html.escape(traj.finish_reason)}</code> · answer: <code>{html.escape(str(traj.answer))}</code></div>",
        f"<div style='color:#555;margin:4px 0'>Q: {highlight_html(html.escape(traj.question), highlight)}</div>",
    ]
    for i, t in enumerate(traj.turns):
        text = t.text if len(t.text) <= max_chars else t.text[:max_chars] + " …"
        body = highlight_html(_colour_tags(html.escape(text)), highlight).replace("\n", "<br>")
        if t.kind == OBSERVATION:
            style, label = "background:#f1f8f1;border-left:4px solid #7cb87c", "observation (loss mask 0)"
        else:
            style, label = "background:#fff;border-left:4px solid #4a7bd0", f"policy · {t.finish_reason}"
        action = t.action or {}
        note = f" · action <b>{html.escape(str(action.get('kind')))}</b>" if action else ""
        if action.get("reason"):
            note += f" <span style='color:#b00'>({html.escape(action['reason'])})</span>"
        parts.append(
            f"<div style='{style};padding:4px 8px;margin:4px 0;font-family:monospace;font-size:12px'>"
            f"<div style='color:#777;font-family:sans-serif'>turn {i} · {label}{note}</div>{body}</div>"
        )
    return "\n".join(parts)


def tokens_html(traj: Trajectory, tokenizer: Any, advantages: list[float] | None = None) -> str:
    """Token view: policy tokens (loss mask 1) blue-shaded by logprob, observation tokens grey.

    Hover a token to see its id, mask, logprob (and advantage when given).
    """
    spans = []
    for r in token_pieces(traj, tokenizer):
        text = html.escape(r["text"]).replace("\n", "↵<br>")
        lp = r["logprob"]
        if r["mask"]:
            # darker blue = less likely token
            alpha = min(1.0, 0.08 + (-(lp or 0.0)) / 8.0)
            bg = f"rgba(74,123,208,{alpha:.2f})"
        else:
            bg = "#e0e0e0"
        title = f"id {r['id']} · mask {r['mask']}" + (f" · logprob {lp:.3f}" if lp is not None else "")
        if advantages is not None and r["mask"]:
            title += f" · advantage {advantages[0] if len(advantages) == 1 else advantages[r['turn']]:.3f}"
        spans.append(f"<span data-mask='{r['mask']}' title='{html.escape(title)}' "
                     f"style='background:{bg};font-family:monospace'>{text}</span>")
    legend = (
        "<div style='font-family:sans-serif;font-size:12px;margin-bottom:4px'>"
        "<span style='background:rgba(74,123,208,.5)'>policy token (loss mask 1; darker = lower logprob)</span> "
        "<span style='background:#e0e0e0'>observation token (loss mask 0)</span></div>"
    )
    return legend + "<div style='line-height:1.6'>" + "".join(spans) + "</div>"
