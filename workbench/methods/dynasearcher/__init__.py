"""DynaSearcher (Hao et al., 2025; arXiv:2507.17365): KG-augmented search with a multi-reward GRPO.

Protocol: ``<think>`` / ``<search>`` JSON requests (``query`` for documents, ``entity`` /
``relation`` for the knowledge graph) / ``<result>`` / ``<answer>`` with ``\\boxed{}``.
Reward: ``r_acc + r_gain`` (Eqs. 1–6), recall by title *or* embedding (Eq. 3), so the
feature step computes embeddings. Optimizer: GRPO with KL 1e-3 and clip 0.2 (Sec. 4.1).
"""

from workbench.methods.base import Method
from workbench.methods.dynasearcher import expert, reward
from workbench.methods.dynasearcher.protocol import DynaSearcher

METHOD = Method(
    name="dynasearcher",
    title="DynaSearcher: Dynamic Knowledge Graph Augmented Search Agent via Multi-Reward Reinforcement Learning",
    citation="Hao et al., 2025",
    source="arXiv:2507.17365",
    protocol=DynaSearcher,
    reward=reward.PRESET,  # α = 0.5, γ = 0.9, β = −0.2, n = 3 are the preset's defaults
    expert=expert.WRITER,
    optimizer="grpo",  # KL 1e-3, clip 0.2
    paper={"lr": 1e-6, "group_size": 8, "temperature": 1.0, "top_p": 0.95, "kl_coef": 1e-3, "clip": 0.2,
           "train_batch_size": 16, "epochs": 1, "max_response_length": 8192, "top_k": 5, "retriever": "dense (e5)"},
    notes={"reward": "Eqs. 1-6; α, γ, β, n: Sec. 4.1", "optimizer": "GRPO, Sec. 3.3", "paper": "Sec. 4.1 and Appendix",
           "needs": "Eq. 3: a gold passage counts if matched by title or embedding similarity",
           "top_k": "Sec. 3.1 Doc Search Tool: top-k 5"},
)

METHODS = (METHOD,)
