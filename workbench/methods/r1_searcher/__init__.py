"""R1-Searcher (Song et al., 2025): two-stage outcome-reward RL that teaches a model to search, REINFORCE++-style.

Everything of the method is in this package — the protocol, the two-stage reward, the expert's turns and the
declaration (see ``docs/architecture.md``, "How to add a method").

Protocol (paper Sec. 3.1; the authors' code, ``OpenRLHF-RAG``): the model thinks in
``<think> ... </think>``; inside its thinking it may search with
``<|begin_of_query|> keywords <|end_of_query|>`` (generation stops at the end marker); the
environment appends the top-3 passages as ``<|begin_of_documents|>\\n(1)... \\n(2)...
<|end_of_documents|>``; the final answer goes in ``<answer> ... </answer>``. Retrieved tokens
are masked from the loss.

Reward (paper Sec. 3.2), stage 1 → stage 2:

- stage 1, learn to search: ``r_retrieve = 0.5`` when the model searched at least once and the
  format is right, plus ``r_format = 0.5`` when the format is right;
- stage 2, learn to answer: ``r_answer = F1(answer, gold)`` and ``r_format = −2`` when the format
  is wrong (0 otherwise).

The format is right (``format_ok``) when, over the whole response: exactly one ``</think>``
and at most one ``<think>`` (the paper's prompt opens ``<think>`` for the model), exactly one
well-formed ``<answer>`` box, every query marker closed and answered by one document block,
and no query or document marker inside the answer — the authors' reward server's checks,
minus their language-specific ones. Their code differs from the paper in places (a ±1 answer
term in the Llama stage-1 server, −1 instead of −2 in its stage-2 server): the paper's values
are the defaults here and ``format_penalty`` is a parameter.

Optimizer: REINFORCE++ with a group-mean baseline and batch normalization of advantages (the
``reinforce_pp`` optimizer preset), 16 samples per question, lr 2e-6, no KL in the Qwen run.
"""

from workbench.methods.base import Method
from workbench.methods.r1_searcher import expert, reward
from workbench.methods.r1_searcher.protocol import R1Searcher

METHOD = Method(
    name="r1_searcher",
    title="R1-Searcher: Incentivizing the Search Capability in LLMs via Reinforcement Learning",
    citation="Song et al., 2025",
    source="arXiv:2503.05592; code: RUCAIBox/R1-Searcher",
    protocol=R1Searcher,
    reward=reward.PRESET,
    expert=expert.WRITER,
    optimizer="reinforce_pp",
    stages={"stage_switch_searches": 1.0},
    paper={"lr": 2e-6, "group_size": 16, "temperature": 1.0, "top_p": 0.95, "top_k": 3, "max_searches": 8,
           "rollout_batch_prompts": 64, "train_batch_size": 256, "optimizer_steps_per_batch": 4, "kl_coef": 0.0,
           "lr_schedule": "cosine, min 0.1·lr", "adam_betas": [0.9, 0.95], "grad_clip": 1.0, "retriever": "bge-large"},
    notes={"reward": "Sec. 3.2: stage 1 retrieve 0.5 + format 0.5; stage 2 F1, format −2",
           "optimizer": "REINFORCE++ (Hu, 2025) with the group mean as baseline (their --advantage_estimator "
                        "reinforce_baseline) and batch-normalized advantages",
           "stages": "the paper trains stage 1 on 350 and stage 2 on 8,148 questions; the workbench switches once a "
                     "step's mean searches per answer reaches 1.0 (a project decision)",
           "paper": "the authors' training scripts (Qwen-2.5-7B-Base run); KL 1e-4 in the reward in their Llama run"},
)

METHODS = (METHOD,)
