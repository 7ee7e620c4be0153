"""RL for search agents: losses, advantages and the dynamic filter, LoRA policy, batches, the trainer.

Import order points one way: the trainer imports these; these import nothing of the trainer.
``policy`` (peft/transformers) is imported lazily so that the pure tensor functions load fast.
"""

from workbench.rl.advantages import (
    ADV_ALIASES,
    ADVANTAGES,
    FilterStats,
    batch_std_advantages,
    compute_advantages,
    fill_batch,
    group_mean_advantages,
    group_std_advantages,
    keep_groups,
    mean_only_advantages,
    reinforce_pp_advantages,
    rloo_advantages,
)
from workbench.rl.batch import RLBatch, build_batch
from workbench.rl.config import PRESETS, LossConfig, get_loss_config, kl_coef_at, register_loss_preset, valid_names
from workbench.rl.losses import (
    AGGREGATIONS,
    IMPORTANCE,
    KL_ESTIMATORS,
    SURROGATES,
    aggregate,
    approx_kl,
    clip_fraction,
    clipped_surrogate,
    dual_clip_surrogate,
    entropy_from_logits,
    entropy_from_logits_chunked,
    kl_k1,
    kl_k2,
    kl_k3,
    normalizers,
    policy_loss,
    sequence_ratio,
    sequence_ratio_token,
    token_ratio,
)

__all__ = [
    "ADVANTAGES", "ADV_ALIASES", "AGGREGATIONS", "IMPORTANCE", "KL_ESTIMATORS", "PRESETS", "SURROGATES", "DataStream",
    "FilterStats", "LoRAPolicy", "LossConfig", "RLBatch", "RunParts", "TrainConfig", "Trainer", "latest_checkpoint",
    "aggregate", "approx_kl", "batch_std_advantages", "build_batch", "clip_fraction", "clipped_surrogate",
    "compute_advantages", "dual_clip_surrogate", "entropy_from_logits", "entropy_from_logits_chunked", "fill_batch",
    "get_loss_config", "group_mean_advantages", "group_std_advantages", "keep_groups", "kl_coef_at", "kl_k1", "kl_k2",
    "kl_k3", "mean_only_advantages", "normalizers", "policy_loss", "register_loss_preset", "reinforce_pp_advantages",
    "rloo_advantages", "selective_logprobs", "sequence_ratio", "sequence_ratio_token", "token_ratio", "valid_names",
]


def __getattr__(name: str):
    if name in ("LoRAPolicy", "selective_logprobs"):
        from workbench.rl import policy

        return getattr(policy, name)
    if name in ("TrainConfig", "RunParts"):
        from workbench.rl import train_config

        return getattr(train_config, name)
    if name == "DataStream":
        from workbench.rl.data_stream import DataStream

        return DataStream
    if name == "latest_checkpoint":
        from workbench.rl.checkpoint import latest_checkpoint

        return latest_checkpoint
    if name == "Trainer":
        from workbench.rl.trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'workbench.rl' has no attribute {name!r}")
