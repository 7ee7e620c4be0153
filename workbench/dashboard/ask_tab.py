"""The dashboard's Ask tab: a question in, a method (with the trained adapter or without) over the world, a corpus file
or a retrieval server; each step of each turn (thought, query, passages found, answer) appears as it happens; the
exchange is saved as a run of kind ``ask`` under the dashboard's runs root, which the inspector opens and the page's
run lists (the runs table, the Trajectories tab...) show at once: the tab tells the page (``on_saved``), which reads the
runs again.

The questions of every browser session go to one :class:`~workbench.eval.ask.Asker` per server, which keeps the model
loaded between questions and answers one at a time. A dashboard served to other machines (``--allow-remote``) offers
the world only, and the shipped adapter: a path or URL typed there would be read, or fetched, by this machine.
Everything shown is escaped.
"""

from __future__ import annotations

import asyncio
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workbench.eval.adapters import TRAINED_ADAPTER
from workbench.eval.ask import DEFAULT_METHOD, Asker, Step
from workbench.eval.compare import judge
from workbench.eval.config import TRAINED

#: Colours of the steps (left border), by :data:`workbench.eval.ask.STEP_KINDS`.
STEP_COLOURS = {"thought": "#9e9e9e", "search": "#e0a800", "passages": "#2e7d32", "error": "#b00020",
                "answer": "#1565c0", "invalid": "#b00020", "observation": "#607d8b"}
SOURCES = ("world", "corpus file", "retrieval server")


def step_html(step: Step, max_chars: int = 400) -> str:
    """One step as HTML (all text escaped): its kind, its text, the passages found with their scores."""
    colour = STEP_COLOURS.get(step.kind, "#607d8b")
    label = {"passages": "found", "observation": "shown"}.get(step.kind, step.kind)
    secs = f" · {1000 * step.seconds:.0f} ms" if step.seconds is not None else ""
    text = step.text if len(step.text) <= max_chars else step.text[:max_chars] + " …"
    hits = "".join(f"<li><b>{html.escape(h.title)}</b> <span style='color:#777'>[{h.score:.3f}]</span> "
                   f"{html.escape(h.text[:max_chars])}</li>" for h in step.hits)
    return (f"<div class='wb-ask-step wb-ask-{html.escape(step.kind)}' style='border-left:4px solid {colour};"
            f"padding:2px 8px;margin:3px 0;font-family:sans-serif'><span style='color:{colour};font-weight:bold'>"
            f"{html.escape(label)}</span><span style='color:#777'>{secs}</span> {html.escape(text)}"
            + (f"<ol style='margin:2px 0 2px 18px;font-size:13px'>{hits}</ol>" if hits else "") + "</div>")


def _methods() -> list[str]:
    from workbench.methods import METHODS

    names = [n for n, m in METHODS.items() if m.protocol.required_tools] + [n for n, m in METHODS.items()
                                                                             if not m.protocol.required_tools]
    return [DEFAULT_METHOD] + [n for name in names for n in (name, f"{name}{TRAINED}") if n != DEFAULT_METHOD]


def ask_section(runs_dir: Path, asker: Asker, allow_paths: bool = True,
                on_saved: Callable[[Any], None] | None = None) -> Any:
    """The Ask tab for a served dashboard over ``runs_dir``; ``allow_paths``: offer corpus files, retrieval servers
    and adapter paths (a loopback dashboard only); ``on_saved(run)``: called with each run the tab saves (the page
    lists it)."""
    import panel as pn

    question = pn.widgets.TextAreaInput(label="Question", placeholder="Who founded Treimveex Textiles?", rows=2,
                                        sizing_mode="stretch_width")
    gold = pn.widgets.TextInput(label="Gold answer (optional; aliases between |)", placeholder="Firnith Truxach",
                                width=420)
    method = pn.widgets.Select(label="Method (M+lora: with the adapter)", options=_methods(), value=DEFAULT_METHOD,
                               width=260)
    default_adapter = str(TRAINED_ADAPTER) if (TRAINED_ADAPTER / "adapter_model.safetensors").exists() else ""
    adapter = pn.widgets.TextInput(label="Adapter (for M+lora)", value=default_adapter, disabled=not allow_paths,
                                   placeholder="an adapter folder or an sft/train run", width=420)
    source = pn.widgets.RadioButtonGroup(options=list(SOURCES if allow_paths else SOURCES[:1]),
                                         value="world")
    corpus = pn.widgets.TextInput(label="Corpus file", placeholder="wiki.jsonl", visible=False, width=420)
    url = pn.widgets.TextInput(label="Retrieval server", placeholder="http://127.0.0.1:8000", visible=False, width=420)
    button = pn.widgets.Button(label="Ask", width=120)
    status = pn.pane.HTML("", sizing_mode="stretch_width")
    feed = pn.Column(sizing_mode="stretch_width", css_classes=["wb-ask-feed"])

    def show_source(event: Any) -> None:
        corpus.visible, url.visible = event.new == "corpus file", event.new == "retrieval server"

    source.param.watch(show_source, "value")

    def note(text: str, colour: str = "#1b4f72") -> str:
        return f"<div style='color:{colour};font-family:sans-serif'>{text}</div>"

    async def go(event: Any) -> None:
        q = question.value.strip()
        if not q:
            status.object = note("Type a question first.", "#b00020")
            return
        options: dict[str, Any] = {}
        answers = [a.strip() for a in gold.value.split("|") if a.strip()]
        if answers:  # the run scores the answer, and the tab says the verdict
            options["answers"] = answers
        if method.value.endswith(TRAINED) and adapter.value.strip():
            options["adapter"] = adapter.value.strip() if allow_paths else default_adapter
        if allow_paths and source.value == "corpus file":
            options["corpus"] = corpus.value.strip()
        if allow_paths and source.value == "retrieval server":
            options["retrieval_url"] = url.value.strip()
        button.disabled = True
        feed.clear()
        feed.append(pn.pane.HTML(f"<div style='font-family:sans-serif'><b>Q:</b> {html.escape(q)} · "
                                 f"<code>{html.escape(method.value)}</code></div>", sizing_mode="stretch_width"))
        status.object = note("Waiting for another question to finish…" if asker.busy else
                             "Working (the first question loads the model)…")
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()

        def put(kind: str, item: Any) -> None:
            loop.call_soon_threadsafe(events.put_nowait, (kind, item))

        def work() -> Any:
            try:
                return asker.ask(q, method.value, on_step=lambda s: put("step", s), log=lambda m: put("log", m),
                                 out=runs_dir, **options)
            finally:
                put("done", None)

        job = loop.run_in_executor(None, work)
        while True:
            kind, item = await events.get()
            if kind == "done":
                break
            if kind == "log":
                status.object = note(html.escape(item))
            else:
                feed.append(pn.pane.HTML(step_html(item), sizing_mode="stretch_width"))
        try:
            done = await job
        except Exception as e:  # noqa: BLE001 - shown in the tab, the server goes on
            status.object = note(f"<b>Could not answer:</b> {html.escape(f'{type(e).__name__}: {e}')}", "#b00020")
        else:
            t = done.trajectory
            answer = html.escape(str(t.answer)) if t.answer is not None else f"(none: {html.escape(t.finish_reason)})"
            verdict = ""
            if answers:
                v = judge(t.answer, answers)
                verdict = (f" · <b class='wb-ask-verdict' style='color:{'#1b7f3b' if v.correct else '#b00020'}'>"
                           f"{'✔ correct' if v.correct else '✘ wrong'}</b> ({html.escape(v.reason())})")
            where = ("listed in the runs table and the Trajectories tab" if on_saved is not None else
                     "reload the page to open it in the Trajectories tab")
            status.object = note(f"<b class='wb-ask-done'>Answer: {answer}</b>{verdict} · {done.seconds:.1f}s · saved as run "
                                 f"<code>{html.escape(done.run.path.name)}</code> ({where})")
            if on_saved is not None:
                try:
                    on_saved(done.run)
                except Exception as e:  # noqa: BLE001 - the answer stands; the lists show the run after a reload
                    why = html.escape(f"{type(e).__name__}: {e}")
                    status.object += note(f"The run lists could not be read again ({why}): reload the page to see the "
                                          "run.", "#b00020")
        finally:
            button.disabled = False

    button.on_click(go)
    remote = [] if allow_paths else [pn.pane.HTML(note(
        "Served to other machines: questions search the synthetic world, with the shipped adapter for M+lora "
        "(corpus files, retrieval servers and adapter paths only on a dashboard bound to 127.0.0.1)."),
        sizing_mode="stretch_width")]
    return pn.Column(*remote, question, gold, pn.Row(method, adapter), source, corpus, url, button, status, feed,
                     sizing_mode="stretch_width")
