"""Search-R1 (Jin et al., 2025): the search agent most of the field builds on, with an exact-match outcome reward.

Protocol: ``<think>`` / ``<search>`` / ``<information>`` / ``<answer>``. Reward: EM of the
final answer (``reward.py``). Optimizer: GRPO (the paper also runs PPO)
with KL 1e-3, top-3 passages, up to 4 turns.
"""

from workbench.methods.base import Method
from workbench.methods.search_r1 import expert, reward
from workbench.methods.search_r1.protocol import SearchR1

METHOD = Method(
    name="search_r1",
    title="Search-R1: Training LLMs to Reason and Leverage Search Engines with Reinforcement Learning",
    citation="Jin et al., 2025",
    source="arXiv:2503.09516",
    protocol=SearchR1,
    reward=reward.PRESET,
    expert=expert.WRITER,
    optimizer="grpo",
    paper={"lr": 1e-6, "group_size": 5, "kl_coef": 1e-3, "clip": 0.2, "top_k": 3, "max_turns": 4, "temperature": 1.0},
    notes={"reward": "Sec. 3.4: rule-based outcome reward, exact match", "paper": "Sec. 4 / Appendix B"},
)

METHODS = (METHOD,)
