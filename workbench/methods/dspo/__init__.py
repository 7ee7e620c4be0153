"""DSPO (Gu et al., 2025; arXiv:2510.09255): dynamic-filter sequence-level policy optimization for agentic search.

Protocol: Search-R1's (``<search>`` / ``<information>`` / ``<answer>``; the ``tool_call``
variant is ``protocol_kwargs={"variant": "tool_call"}``), BM25 retrieval. Reward: binary
subEM. Optimizer: GSPO's sequence ratio (Eq. 6), group-std advantages (Eq. 10), the dynamic
filter keeping groups with mixed outcomes (Eq. 9), the clipped objective without KL (Eq. 11).
"""

from workbench.methods.base import Method
from workbench.methods.dspo import reward
from workbench.methods.search_r1 import expert as search_r1_expert
from workbench.methods.search_r1.protocol import SearchR1

METHOD = Method(
    name="dspo",
    title="DSPO: Stable and Efficient Policy Optimization for Agentic Search and Reasoning",
    citation="Gu et al., 2025",
    source="arXiv:2510.09255",
    protocol=SearchR1,
    reward=reward.PRESET,
    expert=search_r1_expert.WRITER,
    optimizer="dspo",  # sequence ratio, ε 3e-4 / 4e-4 (GSPO), dynamic filter, no KL
    paper={"retriever": "bm25", "eps_low": 3e-4, "eps_high": 4e-4, "kl_coef": 0.0},
    notes={"reward": "Sec. 3: binary subEM", "optimizer": "Eqs. 6, 9-11; ε from GSPO (Zheng et al., 2025)",
           "protocol": "Search-R1 grammar (Jin et al., 2025b), BM25"},
)

METHODS = (METHOD,)
