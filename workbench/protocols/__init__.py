"""Agent protocols, one module per published system, sharing one engine.

``get_protocol(name, **kwargs)`` returns an instance; ``PROTOCOLS`` lists them.
"""

from workbench.protocols import direct, search_r1  # noqa: F401  (registers)
from workbench.protocols.base import PROTOCOLS, Action, Observation, Protocol, get_protocol

__all__ = ["PROTOCOLS", "Action", "Observation", "Protocol", "get_protocol"]
