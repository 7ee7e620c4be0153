"""Agent protocols, one module per published system, sharing one engine.

``get_protocol(name, **kwargs)`` returns an instance; ``PROTOCOLS`` lists them.
"""

from workbench.protocols import (  # noqa: F401  (registers)
    baselines,
    direct,
    dynasearcher,
    rsearch_dag,
    rsearch_evidence,
    search_r1,
    when_to_search,
)
from workbench.protocols.base import PROTOCOLS, Action, Observation, Protocol, get_protocol

__all__ = ["PROTOCOLS", "Action", "Observation", "Protocol", "get_protocol"]
