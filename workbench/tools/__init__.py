"""Search tools: BM25, dense, knowledge graph, multi-source, NL-DAG plans; result hygiene."""

from workbench.core.types import Hit, Passage, ToolCall, Triple
from workbench.tools.base import Toolbox, clean_text, neutralize_tags, render_passages, render_triples

__all__ = [
    "Hit",
    "Passage",
    "ToolCall",
    "Toolbox",
    "Triple",
    "clean_text",
    "neutralize_tags",
    "render_passages",
    "render_triples",
]
