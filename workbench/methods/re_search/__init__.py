r"""ReSearch (Chen et al., 2025): reasoning interleaved with search, trained from scratch with GRPO on an F1 reward.

Everything of the method is in this package — the protocol, the reward, the expert's turns (``expert.py``) and the
declaration (see ``docs/architecture.md``, "How to add a method"). Paper: arXiv:2503.19470 (v3, NeurIPS 2025); code:
``Agent-RL/ReSearch`` (the repository is now ``Agent-RL/ReCall``; ReSearch is its history up to commit ``3b2fd14``).

Protocol (Sec. 2.1 "Rollout with Search", Table 1): ``<think>`` / ``<search>`` / ``<result>`` / ``<answer>`` with
the final answer in ``\boxed{}``; generation stops at ``</search>``, the top-5 passages (Sec. 3.1) come back in
``<result>`` and are masked from the loss (Sec. 2.1 "Retrieval Result Masking").

Reward (Sec. 2.3, Eq. 2): ``r = F1(a_pred, a_gt)`` if it is not 0, else 0.1 if the format is right, else 0;
``a_pred`` is the content of ``\boxed{}``.

Optimizer (Sec. 2.1 Eq. 1, Appendix B Table 4): GRPO with ``A_i = (r_i − mean) / std`` over 5 rollouts, clip 0.2,
KL loss 0.001, lr 1e-6, batch 256, 2 epochs, temperature 1.0 — full fine-tuning of Qwen2.5-7B/32B(-Instruct) on
MuSiQue's training set.
"""

from workbench.methods.base import Method
from workbench.methods.re_search import expert, reward
from workbench.methods.re_search.protocol import ReSearch

METHOD = Method(
    name="re_search",
    title="ReSearch: Learning to Reason with Search for LLMs via Reinforcement Learning",
    citation="Chen et al., 2025",
    source="arXiv:2503.19470; code: Agent-RL/ReSearch (now Agent-RL/ReCall, ReSearch up to commit 3b2fd14)",
    protocol=ReSearch,
    reward=reward.PRESET,
    expert=expert.WRITER,
    optimizer="grpo",  # clip 0.2, KL 1e-3 (Table 4)
    optimizer_overrides={"agg": "token-mean", "adv_std": "sample", "kl_clamp": 10.0},
    train={"group_size": 5},
    paper={"lr": 1e-6, "group_size": 5, "temperature": 1.0, "top_p": 1.0, "kl_coef": 1e-3, "clip": 0.2,
           "train_batch_size": 256, "ppo_mini_batch_size": 256, "epochs": 2, "max_prompt_length": 512,
           "max_response_length": 8192, "top_k": 5, "kl_estimator": "low_var_kl (k3, clamped to ±10)",
           "entropy_coef": 1e-3, "retriever": "dense (E5-base-v2), Wikipedia Dec. 2018 (FlashRAG)",
           "train_data": "MuSiQue train (19,938 questions)"},
    notes={"reward": "Sec. 2.3, Eq. 2: F1 of the \\boxed{} answer if not 0, else 0.1 for a right format, else 0; the "
                     "authors' compute_score returns 0 for a wrong format whatever the F1 (variant='code')",
           "protocol": "Sec. 2.1 and Table 1 (instruction-tuned system prompt, verbatim); format_ok is the authors' "
                       "validate_format; results rendered as their rollout appends them (' <result>\\n...\\n</result>')",
           "optimizer": "GRPO, Sec. 2.1 Eq. 1: A_i = (r_i − mean) / std; clip 0.2, KL loss 1e-3 (Table 4)",
           "optimizer_overrides": "what the paper leaves open, from the authors' verl (scripts/train/train.sh, "
                                  "core_algos.py): token-mean loss (masked_mean over a micro-batch's policy "
                                  "tokens), torch.std (sample) + 1e-6 in the advantage, kl_loss_type low_var_kl "
                                  "(k3 clamped to ±10); their entropy bonus 1e-3 (verl's default) is not reproduced",
           "train": "group size 5 (Table 4); lr stays TrainConfig's LoRA value (the paper's 1e-6 is full fine-tuning)",
           "paper": "Appendix B Table 4 (lr, batch, epochs, rollouts, temperature, KL, clip); Sec. 3.1 (MuSiQue "
                    "train, E5-base-v2, Wikipedia Dec. 2018, top-5); scripts/train/train.sh (prompt 512 / response "
                    "8192 tokens, mini-batch 256, low_var_kl); top_p and entropy: their ppo_trainer.yaml",
           "top_k": "Sec. 3.1: top-5 results per query in training and evaluation (the protocol's default)",
           "expert": "not in the paper (it trains from scratch); the workbench's cold start on this CPU needs expert "
                     "traces, written in the protocol's grammar by expert.py",
           "max_turns": "no turn limit in the paper (generation runs to EOS within 8,192 response tokens); "
                        "TrainConfig's max_turns applies here"},
)

METHODS = (METHOD,)
