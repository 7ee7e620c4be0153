"""``TaggedProtocol``: a protocol whose grammar is a flat sequence of tagged blocks.

DynaSearcher, both R-Search variants and When-to-Search share one format recipe: scan the
policy turns for the protocol's tags (observation turns only for the observation tags), check
the block sequence against the protocol's shape, list what is wrong in words, and add the
protocol's own flags. A subclass declares its grammar as class attributes and adds checks in
``extra_checks``; ``format_flags`` is written once, here.

A protocol whose blocks are written with literal markers rather than ``<tag>`` pairs declares
them in ``markers``. R1-Searcher (Song et al., 2025), for instance, is::

    class R1Searcher(PassageSearchProtocol):
        name = "r1_searcher"
        tags = ("think", "query", "documents", "answer")
        markers = {"query": ("<|begin_of_query|>", "<|end_of_query|>"),
                   "documents": ("<|begin_of_documents|>", "<|end_of_documents|>")}
        search_tag, observation_tag = "query", "documents"
        shape = r"think ((query documents )+think )?answer"  # see its paper for the exact one
        stop = ("<|end_of_query|>", "</answer>")
        invalid_message = "..."
        system_text = SYSTEM_PROMPT  # demo_question, demo_steps: the worked example

(``tests/test_protocols_tagged.py`` builds exactly such a class and runs it.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from workbench.core.types import Hit
from workbench.protocols.base import (
    Action,
    Block,
    Markers,
    Observation,
    Protocol,
    format_errors,
    parse_tag_action,
    policy_blocks,
    shape_ok,
    turn_blocks,
)
from workbench.tools.base import Toolbox, clean_text, render_passages

if TYPE_CHECKING:
    from workbench.core.trajectory import Trajectory


class TaggedProtocol(Protocol):
    """Base of tag-grammar protocols: declared tags and shape, one ``format_flags``.

    Class attributes (the grammar):
        tags: every block name of the protocol; policy turns are scanned for all of them (so a
            policy that writes its own observation block is caught).
        observation_tags: the blocks the environment writes; observation turns are scanned for
            these only (the words of an invalid-action message do not count as blocks).
        markers: ``{name: (open, close)}`` for blocks not written ``<name> ... </name>``.
        shape: a regex the block names, joined by single spaces (each followed by a space except
            the last), must fully match: the ``order_ok`` flag.
        search_tag / answer_tag: the two action blocks ``parse`` looks for.
    """

    tags: ClassVar[tuple[str, ...]] = ()
    observation_tags: ClassVar[tuple[str, ...]] = ()
    markers: ClassVar[dict[str, tuple[str, str]]] = {}
    shape: ClassVar[str] = ""
    search_tag: ClassVar[str] = "search"
    answer_tag: ClassVar[str] = "answer"

    @property
    def marker_items(self) -> Markers:
        """``markers`` as ``((name, open, close), ...)``, the form the block scanners take."""
        return tuple((name, o, c) for name, (o, c) in self.markers.items())

    def open_close(self, tag: str) -> tuple[str, str]:
        """How ``tag`` is written: its markers, or ``<tag>`` / ``</tag>``."""
        return self.markers.get(tag, (f"<{tag}>", f"</{tag}>"))

    # ------------------------------------------------------------------ actions
    def parse(self, text: str) -> Action:
        """The last complete search or answer block (see ``parse_tag_action``). Never raises."""
        return parse_tag_action(text, self.search_tag, self.answer_tag, self.marker_items)

    def wrap(self, tag: str, body: str, max_chars: int, pad: str = "\n\n") -> str:
        """``<tag>body</tag>`` (or the tag's markers) with the body capped at ``max_chars``."""
        if len(body) > max_chars:
            body = body[: max(0, max_chars - 1)].rstrip() + "…"
        o, c = self.open_close(tag)
        return f"{pad}{o}{body}{c}{pad}"

    # ------------------------------------------------------------------ format
    def blocks_of(self, traj: Trajectory, tag: str) -> list[Block]:
        """The ``tag`` blocks of the policy turns (scanned among all ``tags``)."""
        return policy_blocks(traj, tag, self.tags, self.marker_items)

    def answer_box(self, block: Block) -> bool:
        """Whether an answer block counts in ``answer_boxes`` (default: well-formed)."""
        return block.well_formed

    def extra_checks(
        self, traj: Trajectory, blocks: list[Block], flags: dict[str, Any], errors: list[str]
    ) -> dict[str, Any]:
        """The protocol's own flags (returned) and format errors (appended to ``errors``).

        ``blocks`` are the whole response's blocks in order; ``flags`` holds the base flags plus
        ``order_ok``; ``errors`` already lists the generic problems (``format_errors``).
        """
        return {}

    def format_flags(self, traj: Trajectory) -> dict[str, Any]:
        """Base flags, ``answer_boxes``, ``order_ok``, the ``extra_checks`` flags, ``format_errors``;
        ``format_ok`` iff there is no format error."""
        flags = super().format_flags(traj)
        blocks, problems = turn_blocks(traj, self.tags, self.observation_tags, self.marker_items)
        order_ok = shape_ok(blocks, self.shape) if self.shape else True
        errors = format_errors(flags, problems, order_ok, blocks)
        answers = [b for b in self.blocks_of(traj, self.answer_tag) if self.answer_box(b)]
        extra = self.extra_checks(traj, blocks, {**flags, "order_ok": order_ok}, errors)
        flags.update(format_ok=not errors, answer_boxes=len(answers), order_ok=order_ok, **extra, format_errors=errors)
        return flags


class PassageSearchProtocol(TaggedProtocol):
    """A tagged protocol whose only tool is ``search``: a search action becomes one ``search`` call,
    its passages rendered in ``observation_tag`` (``passage_style`` of ``render_passages``); any
    other action gets ``invalid_message``. Subclasses set these class attributes and the grammar."""

    observation_tag: ClassVar[str] = "information"
    passage_style: ClassVar[str] = "doc"
    invalid_message: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "observation_tags" not in cls.__dict__:
            cls.observation_tags = (cls.observation_tag,)

    def act(self, action: Action, toolbox: Toolbox, example: Any) -> Observation:
        return self.search_observation(action, toolbox)

    def render(self, hits: list[Hit] | str) -> str:
        """Passages (or a message) wrapped in ``observation_tag``, capped at ``max_obs_chars``."""
        if isinstance(hits, str):
            body = clean_text(hits)
        else:
            body = render_passages(hits, self.passage_style, self.max_chars_per_hit)
        return self.wrap(self.observation_tag, body or "No results.", self.max_obs_chars)

    def invalid_observation(self, action: Action) -> Observation:
        return Observation(self.invalid_message)
