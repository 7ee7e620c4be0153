"""Trajectory views: the transcript as structure (thought, tool call, tool result, answer) beside the gold answer,
and a token view of the loss mask.

:func:`turns_html` draws one trajectory: a verdict line (prediction, gold aliases, scores, the metric that judged
it and the alias it matched: :func:`workbench.eval.compare.judge`), a timeline (tokens and seconds per turn),
then each turn: a policy turn split into its tagged parts (a thought, a tool call with its query or JSON request,
an answer), a tool result as a collapsible list of passages with their titles or of triples; each of the question's
gold passages is marked with its hop (``gold · hop k``), and a line under the verdict says where each was first
retrieved (:func:`evidence_html`; both from :func:`workbench.rewards.gold_evidence.gold_retrievals`). Chat-template
tokens (``<|im_start|>user`` ...) are hidden, and each turn's *raw* toggle shows its exact text. Views only: the
data comes from ``workbench.core.trajectory`` and the run's examples.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from workbench.core.trajectory import OBSERVATION, Trajectory, Turn, token_pieces
from workbench.eval.compare import METRIC_NAMES, MISSING, Verdict, judge, show
from workbench.rewards.gold_evidence import GoldRetrieval, gold_retrievals

#: Colours per protocol tag (background) for the transcript view.
TAG_COLOURS = {
    "think": "#eef2ff",
    "search": "#fff4d6",
    "tool_call": "#fff4d6",
    "query": "#fff4d6",
    "information": "#e8f5e9",
    "result": "#e8f5e9",
    "observation": "#e8f5e9",
    "documents": "#e8f5e9",
    "original_evidence": "#fce4ec",
    "evidence": "#fce4ec",
    "reflect": "#f3e5f5",
    "check": "#f3e5f5",
    "answer": "#d7f0ff",
}
_TAG = re.compile(r"(&lt;/?(" + "|".join(TAG_COLOURS) + r")&gt;)", re.IGNORECASE)
#: What each tag of a policy turn is, as the transcript labels it.
PART_NAMES = {"think": "thought", "reflect": "reflection", "check": "check", "search": "tool call",
              "tool_call": "tool call", "query": "tool call", "answer": "answer", "original_evidence": "evidence",
              "evidence": "evidence"}
_CALL_TAGS = ("search", "tool_call", "query")
#: Chat-template tokens (ChatML, Llama 3, Phi): hidden in the transcript, shown by each turn's *raw* toggle.
#: R1-Searcher's ``<|begin_of_query|>`` markers are the protocol's own, not the template's: they stay.
_TEMPLATE = re.compile(
    r"<\|start_header_id\|>[^<]*<\|end_header_id\|>\n*|<\|im_start\|>(?:system|user|assistant|tool)?\n?"
    r"|<\|(?:im_end|endoftext|eot_id|begin_of_text|end_of_text|end|user|assistant|system)\|>")
#: R1-Searcher's markers, read as tags.
_MARKERS = {"<|begin_of_query|>": "<query>", "<|end_of_query|>": "</query>",
            "<|begin_of_documents|>": "<documents>", "<|end_of_documents|>": "</documents>"}
_PART = re.compile(r"<(" + "|".join(TAG_COLOURS) + r")>(.*?)(</\1>|$)", re.IGNORECASE | re.DOTALL)
#: Characters of a passage shown before its "more" fold.
PASSAGE_CHARS = 320


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


def strip_template(text: str) -> str:
    """``text`` without chat-template tokens and with blank runs closed up (the exact text is the raw view).

    >>> strip_template("<|im_end|>\\n<|im_start|>user\\n<information>Doc 1</information><|im_end|>\\n<|im_start|>assistant\\n")
    '<information>Doc 1</information>'
    """
    out = _TEMPLATE.sub("", text)
    return re.sub(r"\n\s*\n+", "\n", out).strip()


def parts(text: str) -> list[tuple[str | None, str, bool]]:
    """A policy turn's text as ``(tag, content, closed)`` parts in order; ``tag`` None for text outside any tag.

    >>> parts("<think> a </think>\\n<search> b")
    [('think', 'a', True), ('search', 'b', False)]
    """
    for marker, tag in _MARKERS.items():
        text = text.replace(marker, tag)
    out: list[tuple[str | None, str, bool]] = []
    pos = 0
    for m in _PART.finditer(text):
        before = text[pos:m.start()].strip()
        if before:
            out.append((None, before, True))
        out.append((m.group(1).lower(), m.group(2).strip(), bool(m.group(3))))
        pos = m.end()
    rest = text[pos:].strip()
    if rest:
        out.append((None, rest, True))
    return out


def _esc(text: str, term: str = "") -> str:
    return highlight_html(html.escape(text), term).replace("\n", "<br>")


# ----------------------------------------------------------------------------- the verdict


def verdict_html(v: Verdict) -> str:
    """Prediction beside the gold aliases and the scores; which metric judged it and which alias it matched."""
    pred = f"<code>{html.escape(v.prediction)}</code>" if v.prediction is not None else f"<b>{MISSING}</b> (no answer)"
    if v.gold:
        others = [g for g in v.gold if g != v.matched]
        shown = v.matched if v.matched is not None else v.gold[0]
        also = (f" <span style='color:#666'>(aliases: {html.escape(' | '.join(others[:6]))}"
                f"{' …' if len(others) > 6 else ''})</span>") if others else ""
        gold = f"<code style='background:#e6f4ea'>{html.escape(shown)}</code>{also}"
    else:
        gold = f"<b>{MISSING}</b> (no gold answer for this question in the run's examples)"
    if v.correct is None:
        mark = f"<span style='color:#666'>not judged ({MISSING}: no gold answer)</span>"
    else:
        colour, word = ("#1b7f3b", "✔ correct") if v.correct else ("#b00020", "✘ wrong")
        # the rule is the criterion, not the answer's score: say both apart ("wrong by cover-EM = 1" read as a score)
        name = METRIC_NAMES.get(v.metric, v.metric)
        alias = ""
        if v.matched and len(v.gold) > 1:
            alias = f"; {'matched' if v.correct else 'nearest alias'} “{html.escape(v.matched)}”"
        mark = (f"<b style='color:{colour}'>{word}</b> <span style='color:#444'>(this answer's {html.escape(name)} "
                f"{show(v.scores.get(v.metric))}; correct means {html.escape(v.rule)}{alias})</span>")
    scores = " · ".join(f"{name} {show(v.scores.get(k))}" for k, name in (("em", "EM"), ("cem", "cover-EM"), ("f1", "F1")))
    return ("<div class='wb-verdict' style='font-family:sans-serif;font-size:13px;border:1px solid #cfd8dc;"
            "border-radius:4px;padding:4px 8px;margin:4px 0;background:#fafafa'>"
            f"prediction {pred} · gold {gold}<br>{mark} · <span style='color:#444'>{scores}</span></div>")


# ----------------------------------------------------------------------------- turns


def _turn_stats(t: Turn) -> str:
    bits = [f"{len(t.token_ids)} tokens"]
    seconds = t.latency_s + sum(c.latency_s for c in t.tool_calls)
    if seconds:
        bits.append(f"{seconds:.2f} s" if seconds < 10 else f"{seconds:.1f} s")
    if t.logprobs:
        lp = [x for x in t.logprobs if x is not None]
        if lp:
            bits.append(f"logprob mean {sum(lp) / len(lp):.2f}, min {min(lp):.2f}")
    return " · ".join(bits)


def timeline_html(traj: Trajectory) -> str:
    """One block per turn, as wide as its share of the tokens: kind, tokens and seconds (a hover shows the line)."""
    total = max(1, sum(len(t.token_ids) for t in traj.turns))
    blocks = []
    for i, t in enumerate(traj.turns):
        colour = "#cfe3cf" if t.kind == OBSERVATION else "#c9d7f2"
        what = "tool" if t.kind == OBSERVATION else str((t.action or {}).get("kind") or "policy")
        stats = _turn_stats(t)
        width = max(4.0, 100 * len(t.token_ids) / total)
        blocks.append(f"<div title='{html.escape(f'turn {i} · {what} · {stats}')}' style='flex:{width:.1f} 1 0;"
                      f"background:{colour};padding:1px 4px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;"
                      f"border-right:2px solid #fff'>{i} {html.escape(what)}</div>")
    seconds = sum(t.latency_s + sum(c.latency_s for c in t.tool_calls) for t in traj.turns)
    head = (f"<div style='color:#555'>{len(traj.turns)} turns · {total if traj.turns else 0} tokens · "
            f"{seconds:.1f} s</div>")
    return (f"<div class='wb-timeline' style='font-family:sans-serif;font-size:11px;margin:4px 0'>{head}"
            f"<div style='display:flex;width:100%'>{''.join(blocks)}</div></div>")


def _call_html(content: str, tool: str, closed: bool, term: str) -> str:
    try:
        request = json.loads(content)
    except ValueError:
        request = None
    if isinstance(request, dict):
        body = f"<pre style='margin:2px 0;white-space:pre-wrap'>{_esc(json.dumps(request, ensure_ascii=False, indent=1), term)}</pre>"
    else:
        body = f"query <code>{_esc(content, term)}</code>"
    cut = "" if closed else " <span style='color:#b00'>(unclosed: the turn ended first)</span>"
    return (f"<div style='background:{TAG_COLOURS['search']};border-radius:3px;padding:2px 6px;margin:2px 0'>"
            f"<b>tool call</b> · <code>{html.escape(tool)}</code>{cut}<br>{body}</div>")


def policy_html(text: str, tool: str = "search", term: str = "") -> str:
    """A policy turn's text as its parts: thoughts, tool calls, answers, and any text outside the protocol's tags."""
    out = []
    for tag, content, closed in parts(strip_template(text)):
        if tag in _CALL_TAGS:
            out.append(_call_html(content, tool, closed, term))
        elif tag is None:
            out.append(f"<div style='font-family:monospace;white-space:pre-wrap'>{_esc(content, term)}</div>")
        else:
            name = PART_NAMES.get(tag, tag)
            style = "font-style:italic;color:#333" if tag == "think" else ("font-weight:bold" if tag == "answer" else "")
            cut = "" if closed else " <span style='color:#b00'>(unclosed)</span>"
            out.append(f"<div style='background:{TAG_COLOURS.get(tag, '#f5f5f5')};border-radius:3px;padding:2px 6px;"
                       f"margin:2px 0'><span style='color:#555;font-size:11px'>{html.escape(name)}{cut}</span> "
                       f"<span style='{style}'>{_esc(content, term)}</span></div>")
    return "".join(out) or "<i style='color:#777'>(empty turn)</i>"


def results_html(call: Any, gold_hops: Mapping[int, Sequence[int]] | None = None, term: str = "",
                 open_: bool = True) -> str:
    """One tool call's result as a collapsible list: passages (title, text folded after ``PASSAGE_CHARS``) or triples;
    an error in red. ``gold_hops``: rank (from 1) -> the hops whose gold passage that result is (:func:`gold_marks`),
    marked ``gold · hop k``."""
    gold_hops = gold_hops or {}
    args = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in (call.args or {}).items())
    items, n_gold = [], 0
    for rank, r in enumerate(call.results, 1):
        if "relation" in r:
            items.append(f"<li><code>({_esc(str(r.get('head')), term)}, {_esc(str(r.get('relation')), term)}, "
                         f"{_esc(str(r.get('tail')), term)})</code></li>")
            continue
        text, title = str(r.get("text", "")), str(r.get("title", "")) or MISSING
        hops = gold_hops.get(rank, ())
        n_gold += bool(hops)
        badge = (f" <b class='wb-gold' style='color:#1b7f3b'>★ gold · hop{'s' if len(hops) > 1 else ''} "
                 f"{', '.join(str(h) for h in hops)}</b>") if hops else ""
        head, tail = text[:PASSAGE_CHARS], text[PASSAGE_CHARS:]
        more = f"<details style='display:inline'><summary>more</summary>{_esc(tail, term)}</details>" if tail else ""
        items.append(f"<li style='margin:2px 0'><b>{_esc(title, term)}</b>{badge} "
                     f"<span style='color:#777'>{html.escape(str(r.get('id', '')))}</span><br>{_esc(head, term)}"
                     f"{'…' if tail else ''}{more}</li>")
    what = "triples" if call.results and "relation" in call.results[0] else "passages"
    gold_note = f" · {n_gold} gold" if n_gold else ""
    err = f" · <b style='color:#b00'>failed: {html.escape(str(call.error))}</b>" if call.error else ""
    ms = f" · {call.latency_s * 1000:.0f} ms" if call.latency_s else ""
    summary = (f"<span style='color:#555'>tool result</span> <b>{html.escape(call.name)}</b>({html.escape(args)}) → {len(call.results)} {what}{gold_note}"
               f"{ms}{err}")
    return (f"<details{' open' if open_ else ''} class='wb-result' style='margin:2px 0'><summary>{summary}</summary>"
            f"<ol style='margin:2px 0 2px 18px;padding:0'>{''.join(items)}</ol></details>")


def gold_marks(golds: Sequence[GoldRetrieval]) -> dict[tuple[int, int], dict[int, list[int]]]:
    """``(turn, call) -> {rank: hops}``: the results that are gold passages, as :func:`results_html` marks them."""
    out: dict[tuple[int, int], dict[int, list[int]]] = {}
    for g in golds:
        for turn, call, rank in g.found:
            out.setdefault((turn, call), {}).setdefault(rank, []).append(g.hop)
    return out


def evidence_html(golds: Sequence[GoldRetrieval]) -> str:
    """Per gold passage of the question, ``hop k: retrieved at turn t, rank r`` (its first retrieval) or ``not
    retrieved`` ("" when the question names no gold passage)."""
    if not golds:
        return ""
    parts = []
    for g in golds:
        name = g.title if g.title is not None else g.id
        where = (f"<b style='color:#1b7f3b'>retrieved at turn {g.turn}, rank {g.rank}</b>" if g.retrieved
                 else "<b style='color:#b00020'>not retrieved</b>")
        parts.append(f"<li>hop {g.hop} <span style='color:#555'>“{html.escape(str(name))}”</span>: {where}</li>")
    n = sum(g.retrieved for g in golds)
    return ("<div class='wb-evidence' style='font-family:sans-serif;font-size:12px;margin:4px 0'>"
            f"gold evidence: {n} of {len(golds)} gold passages retrieved "
            f"<span style='color:#666'>(matched by {html.escape(golds[0].by)})</span>"
            f"<ul style='margin:2px 0 2px 18px;padding:0'>{''.join(parts)}</ul></div>")


def _example_for(traj: Trajectory, example: Any) -> Any:
    if example is None or hasattr(example, "answers"):
        return example
    if isinstance(example, Mapping):
        return example.get(traj.example_id)
    if isinstance(example, Sequence):
        return next((e for e in example if getattr(e, "id", None) == traj.example_id), None)
    return None


def turns_html(traj: Trajectory, max_chars: int = 4000, highlight: str = "", example: Any = None,
               metric: str = "cem", threshold: float = 0.5) -> str:
    """The transcript: a header, the verdict (with ``example``'s gold answers), a timeline, then one block per turn:
    policy turns white and split into their parts, tool results green and collapsible (loss mask 0). Each turn
    folds its exact text (chat-template tokens included) under *raw*.

    Args:
        max_chars: text of a turn shown before it is cut (the raw view is cut there too).
        highlight: a string to mark (case-insensitive) in the question and every turn.
        example: the trajectory's :class:`~workbench.data.example.Example` (gold answers, gold passages), or a
            collection of examples to look it up in by ``example_id``; None: the verdict says the gold is unknown.
        metric, threshold: how correctness is judged (:func:`workbench.eval.compare.judge`).
    """
    ex = _example_for(traj, example)
    gold = list(getattr(ex, "answers", None) or [])
    golds = gold_retrievals(traj, ex) if ex is not None else []
    marks = gold_marks(golds)
    method = traj.meta.get("method") or traj.protocol
    out = [
        f"<div style='font-family:sans-serif'><b>{html.escape(traj.id)}</b> · {html.escape(str(method))}"
        + (f" ({html.escape(traj.protocol)})" if method != traj.protocol else "")
        + f" · finish: <code>{html.escape(traj.finish_reason or MISSING)}</code></div>",
        f"<div style='color:#333;margin:4px 0;font-family:sans-serif'>Q: {_esc(traj.question, highlight)}</div>",
        verdict_html(judge(traj.answer, gold, metric, threshold)),
        evidence_html(golds),
        timeline_html(traj),
    ]
    for i, t in enumerate(traj.turns):
        text = t.text if len(t.text) <= max_chars else t.text[:max_chars] + " …"
        if t.kind == OBSERVATION:
            style, label = "background:#f1f8f1;border-left:4px solid #7cb87c", "observation (loss mask 0)"
            if t.tool_calls:
                body = "".join(results_html(c, marks.get((i, j)), highlight) for j, c in enumerate(t.tool_calls))
            else:
                body = (f"<div style='font-family:monospace;white-space:pre-wrap;color:#444'>"
                        f"{_esc(strip_template(text), highlight)}</div>")
        else:
            style, label = "background:#fff;border-left:4px solid #4a7bd0", f"policy · {t.finish_reason or MISSING}"
            nxt = traj.turns[i + 1] if i + 1 < len(traj.turns) else None
            calls = t.tool_calls or (nxt.tool_calls if nxt is not None and nxt.kind == OBSERVATION else [])
            body = policy_html(text, calls[0].name if calls else "search", highlight)
            if t.tool_calls:  # a protocol that records the call on the policy turn
                body += "".join(results_html(c, marks.get((i, j)), highlight) for j, c in enumerate(t.tool_calls))
        action = t.action or {}
        note = f" · action <b>{html.escape(str(action.get('kind')))}</b>" if action else ""
        if action.get("reason"):
            note += f" <span style='color:#b00'>({html.escape(action['reason'])})</span>"
        raw = (f"<details class='wb-raw' style='font-size:11px'><summary style='color:#888'>raw</summary>"
               f"<pre style='white-space:pre-wrap;margin:0'>{highlight_html(_colour_tags(html.escape(text)), highlight)}"
               "</pre></details>")
        out.append(
            f"<div style='{style};padding:4px 8px;margin:4px 0;font-size:12px'>"
            f"<div style='color:#777;font-family:sans-serif'>turn {i} · {label}{note} · {_turn_stats(t)}</div>"
            f"<div style='font-family:sans-serif'>{body}</div>{raw}</div>"
        )
    return "\n".join(out)


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
