"""The agent-grammar toolkit every published method's protocol is built from: :class:`Protocol` (prompts, parse,
act, render, format flags), :class:`Action`, :class:`Observation`, the shared parsing helpers (``base.py``), and
:class:`TaggedProtocol` / :class:`PassageSearchProtocol` for ``<tag>`` grammars (``tagged.py``).

Each paper's own protocol lives in its method package (``workbench/methods/<paper>/protocol.py``);
``workbench.methods.get_protocol(name)`` finds one by name.
"""

from workbench.protocols.base import Action, Observation, Protocol
from workbench.protocols.tagged import PassageSearchProtocol, TaggedProtocol

__all__ = ["Action", "Observation", "PassageSearchProtocol", "Protocol", "TaggedProtocol"]
