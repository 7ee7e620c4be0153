"""The served dashboard's address keeps what the page shows: ``?tab=3&run=<id>&correct=wrong&methods=a,b&hops=2,3
&f1=0.2,1&evidence=some&text=...``. Opening that address (a copied link, a reload) reopens the same tab, run and filters.

Reading: the session's query arguments (``pn.state.session_args``), checked value by value (an unknown run, a tab
number out of range or a malformed range is ignored, never an error: the address is the user's input). Writing:
:class:`AddressBar`, a small browser component that replaces the address with ``history.replaceState`` whenever the
view's state changes (no reload, no new history entry). Panel's own ``Location`` is not used: it parses the
``Host`` header as ``name:port``, which an allowed ``[::1]:port`` breaks (``serve_dashboard`` turns it off).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import param
from panel.custom import JSComponent

from workbench.rewards.gold_evidence import EVIDENCE_KINDS

#: The query keys, in the order the address lists them.
KEYS = ("tab", "run", "correct", "methods", "hops", "f1", "evidence", "text")


class AddressBar(JSComponent):
    """Sets the browser's address to ``?<query>`` whenever ``query`` changes (nothing is drawn)."""

    query = param.String(default="")

    _esm = """
    export function render({ model }) {
      const apply = () => {
        const q = model.query;
        window.history.replaceState(null, "", window.location.pathname + (q ? "?" + q : ""));
      };
      model.on("query", apply);
      apply();
      return document.createElement("span");
    }
    """


def session_query() -> dict[str, str]:
    """The page's query arguments as first given (served sessions; empty elsewhere), decoded, unknown keys dropped."""
    import panel as pn

    args = getattr(pn.state, "session_args", None) or {}
    out = {}
    for key in KEYS:
        values = args.get(key)
        if values:
            v = values[0]
            out[key] = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return out


def parse_filters(query: dict[str, str], correctness: list[str]) -> dict[str, Any]:
    """The drill-down filters an address names, each only when well formed: ``correct`` (one of ``correctness``),
    ``methods`` (comma-separated), ``hops`` (comma-separated whole numbers), ``f1`` (``lo,hi`` in [0, 1]),
    ``evidence`` (one of ``workbench.rewards.gold_evidence.EVIDENCE_KINDS``), ``text``."""
    out: dict[str, Any] = {}
    if query.get("correct") in correctness:
        out["correct"] = query["correct"]
    if query.get("methods"):
        out["methods"] = [m for m in query["methods"].split(",") if m]
    if query.get("hops"):
        try:
            out["hops"] = [int(h) for h in query["hops"].split(",") if h]
        except ValueError:
            pass
    if query.get("f1"):
        try:
            lo, hi = (float(x) for x in query["f1"].split(","))
            if 0.0 <= lo <= hi <= 1.0:
                out["score"] = (lo, hi)
        except ValueError:
            pass
    if query.get("evidence") in EVIDENCE_KINDS:
        out["evidence"] = query["evidence"]
    if "text" in query:
        out["text"] = query["text"][:500]
    return out


def encode(state: dict[str, Any], defaults: dict[str, Any]) -> str:
    """The query of a view ``state`` (tab, run and the filters), leaving out the filters at their ``defaults``."""
    parts: list[tuple[str, str]] = []
    for key in KEYS:
        name = "score" if key == "f1" else key
        v = state.get(name)
        if v is None or (name in defaults and v == defaults[name]) or v == "" or v == []:
            continue
        if isinstance(v, (list, tuple)):
            v = ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v)
        parts.append((key, str(v)))
    return urlencode(parts)


class ViewAddress:
    """One session's view state and its address bar: sections report what they show (:meth:`set`), the bar follows."""

    def __init__(self, defaults: dict[str, Any]):
        self.query = session_query()
        self.defaults = dict(defaults)
        self.state: dict[str, Any] = {}
        self.bar = AddressBar(query=urlencode(self.query), height=0, width=0, margin=0)  # the address as opened

    def set(self, **values: Any) -> None:
        self.state.update(values)
        self.bar.query = encode(self.state, self.defaults)
