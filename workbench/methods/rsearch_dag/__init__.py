"""R-Search, multi-source NL-DAG (Shi & Shen, 2025; arXiv:2506.08352): plans over several sources, GRPO with LoRA.

Protocol: ``<think>`` / ``<search>`` NL-DAG plan / ``<result>`` / ``<answer>``; the ``plan``
tool executes the DAG over the multi-source registry. Reward: ``0.25·F_fmt + 0.25·F_dag +
0.5·F_ans`` (Eq. 3), F_ans from a similarity judge (F1 when none is configured).
Optimizer: group-mean advantages without std division (Eq. 4), KL annealed 0.1 → 0.01, group
size 4, lr 5e-6 with LoRA — the one seed that trains LoRA, so its lr applies here as is.
"""

from workbench.methods.base import Method
from workbench.methods.rsearch_dag import expert, reward
from workbench.methods.rsearch_dag.protocol import RSearchDAG

METHOD = Method(
    name="rsearch_dag",
    title="Reinforcement Fine-Tuning for Reasoning towards Multi-Step Multi-Source Search in Large Language Models",
    citation="Shi & Shen, 2025",
    source="arXiv:2506.08352",
    protocol=RSearchDAG,
    reward=reward.PRESET,
    expert=expert.WRITER,
    optimizer="grpo",
    optimizer_overrides={"adv_norm": "mean_only", "kl_coef": 0.1, "kl_coef_end": 0.01},
    train={"group_size": 4, "lr": 5e-6, "curriculum": "sources"},
    paper={"lr": 5e-6, "group_size": 4, "kl_coef": 0.1, "kl_coef_end": 0.01, "effective_batch_size": 32,
           "top_k": 2, "lora": True},
    notes={"reward": "Eq. 3, 0.25 : 0.25 : 0.5", "optimizer_overrides": "Eq. 4 (no std division); β annealed 0.1 → 0.01 "
           "(Sec. 4.1)", "train": "group size 4, lr 5e-6 (Sec. 4.1); curriculum by number of sources (Sec. 3)"},
)

METHODS = (METHOD,)
