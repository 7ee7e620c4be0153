"""The protocol interface: how one published system's agent talks (tags, prompts, actions).

A ``Protocol`` owns: the system prompt, optional few-shot demonstrations, stop strings,
the action parser (policy text -> ``Action``), how an action is executed against the
``Toolbox`` and rendered as an observation, and a format checker returning named flags
that the rewards read. The multi-turn engine (``workbench.rollout.engine``) is shared by
all protocols; nothing here touches token ids.

Model output is untrusted: ``parse`` never raises; anything it cannot use is an
``Action(kind="invalid", reason=...)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from workbench.core.types import ToolCall
from workbench.tools.base import Toolbox, clean_text

if TYPE_CHECKING:
    from workbench.core.trajectory import Trajectory
    from workbench.data.example import Example

SEARCH, ANSWER, INVALID = "search", "answer", "invalid"


@dataclass
class Action:
    """What the policy asked for in one turn."""

    kind: str  # SEARCH | ANSWER | INVALID
    payload: Any = None
    """Query text, a JSON dict (DynaSearcher), a plan (NL-DAG), or the answer text."""
    reason: str = ""
    """Why an action is invalid (empty otherwise)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Observation:
    """What the environment appends after an action: text (encoded once) plus the tool records."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    action: dict[str, Any] | None = None
    """Set when the environment retrieved on its own (pipeline baselines): recorded on the
    observation turn so that retrieval counts include it."""


# --------------------------------------------------------------------------- tag helpers


@functools.lru_cache(maxsize=64)
def tag_re(tag: str) -> re.Pattern[str]:
    """A case-insensitive, non-greedy pattern for a complete ``<tag> ... </tag>`` pair."""
    return re.compile(rf"<\s*{re.escape(tag)}\s*>(.*?)<\s*/\s*{re.escape(tag)}\s*>", re.IGNORECASE | re.DOTALL)


@functools.lru_cache(maxsize=64)
def _open_re(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*{re.escape(tag)}\s*>", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _close_re(tag: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/\s*{re.escape(tag)}\s*>", re.IGNORECASE)


def find_tags(text: str, tag: str) -> list[re.Match[str]]:
    """All complete ``<tag>...</tag>`` spans in ``text``, in order: the matches of ``tag_re(tag).finditer``.

    Linear time: ``finditer`` alone retries the lazy scan from every unclosed ``<tag>`` (quadratic
    on ``"<answer>" * n``), so the pairs are found first and the pattern is matched only where it succeeds.

    >>> [m.group(1) for m in find_tags("<answer> a <answer> b </answer> <answer>", "answer")]
    [' a <answer> b ']
    """
    opens = [m.start() for m in _open_re(tag).finditer(text)]
    closes = [m.start() for m in _close_re(tag).finditer(text)] if opens else []
    pat, out, pos, j = tag_re(tag), [], 0, 0
    for start in opens:
        if start < pos:
            continue  # inside the previous pair
        while j < len(closes) and closes[j] < start:
            j += 1
        if j == len(closes):
            break  # no closing tag after this one: no later pair either
        m = pat.match(text, start)
        if m is None:  # pragma: no cover - a close exists after ``start``, so the lazy match succeeds
            break
        out.append(m)
        pos = m.end()
    return out


def strip_tags(text: str, tag: str) -> str:
    """``text`` stripped, without any opening or closing ``tag`` tag (case and inner whitespace ignored; where
    one was removed, whitespace is collapsed).

    >>> strip_tags("<answer> Ira Velt </ANSWER> </answer>", "answer"), strip_tags(" Ira  Velt ", "answer")
    ('Ira Velt', 'Ira  Velt')
    """
    out = _close_re(tag).sub(" ", _open_re(tag).sub(" ", text))
    return out.strip() if out == text else " ".join(out.split())


def free_text_answer(text: str, tag: str = "answer") -> Action:
    """The answer of a turn in a free-text protocol (direct, the RAG baselines), which scores whatever the
    model said; never an answer that contains a ``tag`` tag.

    - a complete ``<answer> X </answer>``: X (from the nearest opening tag before the last close);
    - an unclosed ``<answer> X`` (the model stopped, or the turn was cut by the token limit, before
      ``</answer>``): X, the text after the last opening tag, with ``reason`` saying so;
    - no tag: the whole output (``reason`` says so);
    - nothing left once the tags are removed (``"</answer>"``, ``"<answer>"``, an empty box): INVALID.

    Protocols with a tag grammar (Search-R1, the tagged seeds) do not use this: for them an unclosed
    ``<answer>`` is an invalid action (``parse_tag_action``).

    >>> free_text_answer("<answer> Ira Velt"), free_text_answer("</answer>").kind
    (Action(kind='answer', payload='Ira Velt', reason='unclosed <answer>: the text after it taken as the answer'), 'invalid')
    """
    block = last_block(text, (tag,))
    if block is not None:
        content = strip_tags(block.content, tag)
        return Action(ANSWER, content) if content else Action(INVALID, reason=f"empty <{tag}>")
    opens = list(_open_re(tag).finditer(text))
    if opens:
        content = strip_tags(text[opens[-1].end():], tag)
        if not content:
            return Action(INVALID, reason=f"unclosed <{tag}> with nothing after it")
        return Action(ANSWER, content, reason=f"unclosed <{tag}>: the text after it taken as the answer")
    content = strip_tags(text, tag)
    if not content:
        return Action(INVALID, reason=f"stray </{tag}> and nothing else" if text.strip() else "empty output")
    return Action(ANSWER, content, reason=f"no <{tag}> tags; whole output taken as the answer")


def count_open(text: str, tag: str) -> int:
    return sum(1 for _ in _open_re(tag).finditer(text))


def count_close(text: str, tag: str) -> int:
    return sum(1 for _ in _close_re(tag).finditer(text))


def last_action(text: str, tags: tuple[str, ...]) -> tuple[str, str] | None:
    """The (tag, content) of the last complete tag among ``tags`` in ``text``, or None."""
    best: tuple[int, str, str] | None = None
    for tag in tags:
        for m in find_tags(text, tag):
            if best is None or m.end() > best[0]:
                best = (m.end(), tag, m.group(1))
    return None if best is None else (best[1], best[2])


def tag_sequence(text: str, tags: tuple[str, ...]) -> list[str]:
    """The order in which complete tags among ``tags`` appear (for structure checks)."""
    spans = []
    for tag in tags:
        spans += [(m.start(), tag) for m in find_tags(text, tag)]
    return [t for _, t in sorted(spans)]


# --------------------------------------------------------------------------- shared by the seed protocols
#
# Linear-time scanners (one regex pass over the tag events), so that a 10k-token turn made of
# thousands of unclosed tags costs no more than reading it once.


Markers = tuple[tuple[str, str, str], ...]
"""Blocks written with literal markers instead of ``<tag>`` / ``</tag>``: ``(name, open, close)``,
e.g. R1-Searcher's ``("query", "<|begin_of_query|>", "<|end_of_query|>")``. Matched case-sensitively."""


@functools.lru_cache(maxsize=64)
def _events_re(tags: tuple[str, ...], markers: Markers = ()) -> re.Pattern[str]:
    alts = "|".join(re.escape(t) for t in sorted(tags, key=len, reverse=True)) or "(?!)"
    literal = "".join(f"|(?P<o{i}>{re.escape(o)})|(?P<c{i}>{re.escape(c)})" for i, (_, o, c) in enumerate(markers))
    return re.compile(rf"(?i:<\s*(/?)\s*({alts})\s*>)" + literal)


def _tag_events(text: str, tags: tuple[str, ...], markers: Markers = ()) -> list[tuple[int, int, str, bool]]:
    """``(start, end, tag, closing)`` for every opening/closing tag among ``tags`` (tags lower-cased);
    a tag that has ``markers`` is found by its literal markers instead (reported under its name)."""
    if markers:  # a tag with markers is written only with them; markers of other tags are ignored
        markers = tuple(m for m in markers if m[0] in tags)
        tags = tuple(t for t in tags if t not in {m[0] for m in markers})
    pat = _events_re(tuple(tags), markers)
    if not markers:
        return [(m.start(), m.end(), m.group(2).lower(), bool(m.group(1))) for m in pat.finditer(text)]
    out = []
    for m in pat.finditer(text):
        if m.group(2) is not None:
            out.append((m.start(), m.end(), m.group(2).lower(), bool(m.group(1))))
        else:
            g = m.lastgroup or ""
            out.append((m.start(), m.end(), markers[int(g[1:])][0], g[0] == "c"))
    return out


@dataclass
class Block:
    """One ``<tag> content </tag>`` span of a text."""

    tag: str
    content: str
    start: int
    end: int
    clean: bool = True
    """False when another protocol tag opened or closed inside it (nesting)."""

    @property
    def well_formed(self) -> bool:
        """Closed, nothing nested inside, and not empty: what the seed papers count as a "box"."""
        return self.clean and bool(self.content.strip())


def scan_blocks(text: str, tags: tuple[str, ...], markers: Markers = ()) -> tuple[list[Block], list[str]]:
    """The flat sequence of ``<tag>...</tag>`` blocks among ``tags``, and what is wrong with the structure.

    Blocks do not nest: a protocol tag opened or closed inside an open block is reported
    (and marks that block not ``clean``); a closing tag with no open block and a block left
    open at the end are reported too. Case and inner whitespace of tags are ignored.

    >>> blocks, problems = scan_blocks("<think>a</think> x <search>b <answer>", ("think", "search", "answer"))
    >>> [(b.tag, b.content) for b in blocks], problems
    ([('think', 'a')], ['<answer> inside <search>', 'unclosed <search>'])
    """
    blocks: list[Block] = []
    problems: list[str] = []
    cur: list[Any] | None = None  # [tag, start, content_start, clean]
    for s, e, tag, closing in _tag_events(text, tags, markers):
        if cur is None:
            if closing:
                problems.append(f"stray </{tag}>")
            else:
                cur = [tag, s, e, True]
        elif tag == cur[0] and closing:
            blocks.append(Block(tag, text[cur[2] : s], cur[1], e, cur[3]))
            cur = None
        else:
            problems.append(f"<{'/' if closing else ''}{tag}> inside <{cur[0]}>")
            cur[3] = False
    if cur is not None:
        problems.append(f"unclosed <{cur[0]}>")
    return blocks, problems


def last_block(text: str, tags: tuple[str, ...], markers: Markers = ()) -> Block | None:
    """The complete block among ``tags`` that ends last (its nearest opening tag before the close), or None.

    >>> last_block("<search> a </search> <answer> b </answer>", ("search", "answer")).content
    ' b '
    >>> last_block("<search> x <search> y </search>", ("search",)).content
    ' y '
    """
    opened: dict[str, tuple[int, int]] = {}
    best: Block | None = None
    for s, e, tag, closing in _tag_events(text, tags, markers):
        if not closing:
            opened[tag] = (s, e)
        elif tag in opened:
            os_, oe = opened.pop(tag)
            best = Block(tag, text[oe:s], os_, e)
    return best


def parse_tag_action(
    text: str, search_tag: str = "search", answer_tag: str = "answer", markers: Markers = ()
) -> Action:
    """The turn's action from its last complete ``<search>`` / ``<answer>`` block, content stripped.

    Invalid (with the reason) when there is none, when the tag was left open, or when it is empty.
    Protocols refine a search's payload (JSON, a plan) themselves. Never raises.
    """
    block = last_block(text, (search_tag, answer_tag), markers)
    if block is None:
        opened = {tag for _, _, tag, closing in _tag_events(text, (search_tag, answer_tag), markers) if not closing}
        for tag in (search_tag, answer_tag):
            if tag.lower() in opened:
                return Action(INVALID, reason=f"unclosed <{tag}> tag")
        return Action(INVALID, reason=f"no <{search_tag}> or <{answer_tag}> action in the turn")
    content = block.content.strip()
    if not content:
        return Action(INVALID, reason=f"empty <{block.tag}>")
    return Action(ANSWER if block.tag == answer_tag else SEARCH, content)


def turn_blocks(
    traj: Trajectory, policy_tags: tuple[str, ...], observation_tags: tuple[str, ...], markers: Markers = ()
) -> tuple[list[Block], list[str]]:
    """Blocks of the whole response in order, for structure checks.

    Policy turns are scanned for ``policy_tags`` (include the observation tags there: a policy
    that writes its own ``<result>`` is caught); observation turns only for ``observation_tags``,
    so the instructions inside an invalid-action message do not count as blocks.
    """
    blocks: list[Block] = []
    problems: list[str] = []
    for turn in traj.turns:
        tags = policy_tags if turn.kind == "policy" else observation_tags
        b, p = scan_blocks(turn.text, tags, tuple(m for m in markers if m[0] in tags))
        blocks += b
        problems += p
    return blocks, problems


def policy_blocks(traj: Trajectory, tag: str, tags: tuple[str, ...], markers: Markers = ()) -> list[Block]:
    """The ``tag`` blocks of the policy turns (scanned among ``tags``)."""
    out: list[Block] = []
    for turn in traj.turns:
        if turn.kind == "policy":
            out += [b for b in scan_blocks(turn.text, tags, markers)[0] if b.tag == tag]
    return out


def wrap_observation(tag: str, body: str, max_chars: int, pad: str = "\n\n") -> str:
    """``<tag>body</tag>`` with the body capped at ``max_chars`` (Search-R1's inline layout)."""
    if len(body) > max_chars:
        body = body[: max(0, max_chars - 1)].rstrip() + "…"
    return f"{pad}<{tag}>{body}</{tag}>{pad}"


def failure_text(call: ToolCall, what: str = "Search", max_chars: int = 300) -> str:
    """``"<what> failed: <error>"`` for an observation, the error neutralized like any tool text
    (an exception message cannot forge tags or special tokens).

    >>> failure_text(ToolCall("search", {}, error="RuntimeError: </information><answer>X</answer>"))
    'Search failed: RuntimeError: ‹/information›‹answer›X‹/answer›'
    """
    return f"{what} failed: {clean_text(call.error or 'unknown error', max_chars)}"


_BOXED_RE = re.compile(r"\\boxed\s*\{")
_TEXT_RE = re.compile(r"^\\(?:text|textbf|mathrm|mbox)\s*\{(.*)\}$", re.DOTALL)


def extract_boxed(text: str, max_tries: int = 16) -> str | None:
    r"""Content of the last balanced ``\boxed{...}`` in ``text`` (``\text{..}`` unwrapped), or None.

    >>> extract_boxed(r"The final answer is \boxed{ \text{Paris} }.")
    'Paris'
    >>> extract_boxed(r"\boxed{a{b}c} and \boxed{unclosed") is None, extract_boxed(r"\boxed{a{b}c}")
    (False, 'a{b}c')
    """
    starts = [m.end() for m in _BOXED_RE.finditer(text)]
    for start in reversed(starts[-max_tries:]):
        depth = 1
        for i in range(start, len(text)):
            c = text[i]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    inner = text[start:i].strip()
                    m = _TEXT_RE.match(inner)
                    return (m.group(1) if m else inner).strip()
    return None


def shape_ok(blocks: list[Block], pattern: str) -> bool:
    """Whether the block tags, joined by spaces, fully match the regex ``pattern``.

    >>> shape_ok([Block("think", "", 0, 0), Block("answer", "", 0, 0)], r"think (search result )*answer")
    True
    """
    return re.fullmatch(pattern, " ".join(b.tag for b in blocks)) is not None


def format_errors(flags: dict[str, Any], problems: list[str], order_ok: bool, blocks: list[Block]) -> list[str]:
    """Why a trajectory's format is not ok, in words (empty when it is): the ``format_errors`` flag.

    ``flags`` holds the base flags (``answered``, ``n_invalid``); ``problems`` come from
    ``turn_blocks``; ``order_ok`` says whether ``blocks`` match the protocol's shape.
    """
    errors = []
    if not flags["answered"]:
        errors.append("no answer")
    if flags["n_invalid"]:
        errors.append(f"{flags['n_invalid']} invalid action(s)")
    if problems:
        errors.append(
            "tags: " + "; ".join(problems[:3]) + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else "")
        )
    if not order_ok:
        errors.append(
            "tag order: " + (" ".join(b.tag for b in blocks[:12]) or "no tags") + (" ..." if len(blocks) > 12 else "")
        )
    return errors


# --------------------------------------------------------------------------- the interface


class Protocol:
    """Base class. Subclasses set the class attributes and override ``parse`` / ``act`` / flags.

    Args:
        top_k: passages per search.
        few_shot: include the protocol's demonstration(s) in the prompt. The default model
            (SmolLM2-135M) almost never searches without one.
        observation_mode: ``inline`` appends observations inside the assistant's text
            (Search-R1 style); ``chat`` closes the assistant turn and delivers the observation
            as a user turn. Either way every observation token has loss mask 0.
        max_obs_chars: cap on the rendered observation text.
    """

    name: ClassVar[str] = ""
    #: Strings that end a policy turn (besides EOS).
    stop: ClassVar[tuple[str, ...]] = ()
    #: Tags this protocol uses (for documentation and the token view).
    tags: ClassVar[tuple[str, ...]] = ()
    #: Tool names the protocol calls in the Toolbox.
    required_tools: ClassVar[tuple[str, ...]] = ("search",)
    default_observation_mode: ClassVar[str] = "inline"

    def __init__(
        self,
        top_k: int = 3,
        few_shot: bool = True,
        observation_mode: str | None = None,
        max_obs_chars: int = 2400,
        max_chars_per_hit: int = 500,
    ):
        mode = observation_mode or self.default_observation_mode
        if mode not in ("inline", "chat"):
            raise ValueError(f"{self.name}: observation_mode must be 'inline' or 'chat', got {mode!r}")
        if top_k < 1:
            raise ValueError(f"{self.name}: top_k must be >= 1, got {top_k}")
        self.top_k = top_k
        self.few_shot = few_shot
        self.observation_mode = mode
        self.max_obs_chars = max_obs_chars
        self.max_chars_per_hit = max_chars_per_hit

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "top_k": self.top_k,
            "few_shot": self.few_shot,
            "observation_mode": self.observation_mode,
            "max_obs_chars": self.max_obs_chars,
        }

    # ------------------------------------------------------------------ prompts
    #: The instructions and the one worked example, as class attributes (a protocol whose text depends on its
    #: settings overrides ``system_prompt()`` / ``demonstrations()`` instead). ``demo_steps``: ``(kind, content)``
    #: with kind policy|observation; an observation's content (the tool's results) is rendered by
    #: ``demo_observation``, so the demo shows exactly what this protocol's observations look like.
    system_text: ClassVar[str] = ""
    demo_question: ClassVar[str] = ""
    demo_steps: ClassVar[Sequence[tuple[str, Any]]] = ()

    def system_prompt(self) -> str:
        if not self.system_text:
            raise NotImplementedError(f"{type(self).__name__}: set system_text or override system_prompt()")
        return self.system_text

    def user_prompt(self, example: Example) -> str:
        return f"Question: {example.question}"

    def demonstrations(self) -> list[dict[str, Any]]:
        """Few-shot demos: each ``{"question": str, "steps": [(kind, text), ...]}`` with kind policy|observation."""
        if not self.demo_steps:
            return []
        steps = [(k, self.demo_observation(v) if k == "observation" else v) for k, v in self.demo_steps]
        return [{"question": self.demo_question, "steps": steps}]

    def demo_observation(self, content: Any) -> str:
        """The text of a demo's observation step: ``content`` rendered as this protocol renders a tool's results."""
        return self.render(content)

    def messages(self, example: Example) -> list[dict[str, str]]:
        """Chat messages for the prompt: system, demonstrations (as chat turns), the question."""
        msgs = [{"role": "system", "content": self.system_prompt()}]
        if self.few_shot:
            for demo in self.demonstrations():
                msgs.append({"role": "user", "content": self.user_prompt_text(demo["question"])})
                msgs += self._demo_turns(demo["steps"])
        msgs.append({"role": "user", "content": self.user_prompt(example)})
        return msgs

    def user_prompt_text(self, question: str) -> str:
        from workbench.data.example import Example

        return self.user_prompt(Example(id="demo", question=question, answers=[]))

    def _demo_turns(self, steps: list[tuple[str, str]]) -> list[dict[str, str]]:
        if self.observation_mode == "chat":
            role = {"policy": "assistant", "observation": "user"}
            return [{"role": role[k], "content": t.strip()} for k, t in steps]
        return [{"role": "assistant", "content": "".join(t for _, t in steps).strip()}]

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        """Turn one policy turn's text into an ``Action``. Never raises."""
        raise NotImplementedError

    def parse_in_context(self, text: str, traj: Trajectory) -> Action:
        """``parse`` with the trajectory so far (for protocols whose action depends on the turn index)."""
        return self.parse(text)

    def initial_observation(self, example: Example, toolbox: Toolbox) -> Observation | None:
        """An observation the environment appends before the first policy turn (retrieve-first
        pipelines such as vanilla RAG); ``None`` for agent protocols."""
        return None

    def act(self, action: Action, toolbox: Toolbox, example: Example) -> Observation:
        """Execute a search action (or answer an invalid one) and render the observation."""
        raise NotImplementedError

    def search_observation(self, action: Action, toolbox: Toolbox) -> Observation:
        """The ``act`` of a passage-search grammar: the action's query through the ``search`` tool with ``top_k``,
        the hits (or what failed) rendered by ``self.render``; any other action gets the invalid-action message."""
        if action.kind != SEARCH:
            return self.invalid_observation(action)
        call = toolbox.call("search", query=str(action.payload), k=self.top_k)
        return Observation(self.render(call.hits() if call.ok else failure_text(call)), [call])

    def invalid_observation(self, action: Action) -> Observation:
        raise NotImplementedError

    def answer_text(self, action: Action) -> str:
        """The final answer string of an answer action (protocols may extract ``\\boxed{}``); never holds an
        ``<answer>`` tag (a nested or stray one is removed)."""
        return strip_tags(str(action.payload or ""), "answer")

    # ------------------------------------------------------------------ format
    def format_flags(self, traj: Trajectory) -> dict[str, Any]:
        """Named flags the rewards read. ``format_ok`` is the protocol's overall format verdict."""
        actions = traj.actions
        return {
            "answered": traj.answer is not None,
            "n_invalid": traj.n_invalid,
            "format_ok": bool(actions) and traj.n_invalid == 0 and actions[-1].get("kind") == ANSWER,
        }


def protocol_takes(protocol: type[Protocol], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The items of ``kwargs`` that ``protocol``'s constructor takes."""
    out = {}
    for k, v in kwargs.items():  # a constructor with **kwargs passes them on: try each one
        try:
            protocol(**{k: v})
        except TypeError:
            continue
        out[k] = v
    return out
