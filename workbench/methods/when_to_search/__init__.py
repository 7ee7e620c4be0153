"""Learning When to Search (anonymous ACL submission, 2025): a two-stage reward for efficient agentic RAG, trained with DAPO.

Protocol: ``<think>`` / ``<search>`` / ``<information>`` / ``<reflect>`` / ``<answer>``.
Reward: ``r_a + r_s + r_f`` (Eq. 12), β = 0.3; stage 1 (Eq. 10) rewards searching, stage 2
(Eq. 11) charges for it. ``r_s`` reads query-embedding similarity (Eq. 8) and correctness
may come from a YES/NO judge (Appendix B.4). Optimizer: DAPO (no KL, clip-higher, token-mean,
dynamic sampling).
"""

from workbench.methods.base import Method
from workbench.methods.when_to_search import expert, reward
from workbench.methods.when_to_search.protocol import WhenToSearch

METHOD = Method(
    name="when_to_search",
    title="Learning When to Search: Multi-Stage Reward Design for Efficient Agentic RAG with Reasoning Language Models",
    citation="anonymous ACL submission, 2025",
    source="anonymous ACL submission, 2025 (no arXiv id)",
    protocol=WhenToSearch,
    reward=reward.PRESET,
    expert=expert.WRITER,
    optimizer="dapo",
    stages={"stage_switch_searches": 1.0},
    train={"max_turns": 5},
    paper={"group_size": 32, "lr": 1e-6, "batch_size": 32, "steps": 500, "max_turns": 5, "temperature": 1.0,
           "top_p": 1.0, "kl_loss_coef": 1e-4},
    notes={"reward": "Eqs. 6-12, β = 0.3", "optimizer": "DAPO (Sec. 3.1)", "paper": "Table 5",
           "stages": "the paper switches stage 1 -> 2 once retrieval has risen, without a number; the workbench "
                     "switches when a step's mean searches per answer reaches 1.0 (a project decision)",
           "paper.kl_loss_coef": "Table 5 lists kl_loss_coef 1e-4 although the text says DAPO drops the KL term"},
)

METHODS = (METHOD,)
