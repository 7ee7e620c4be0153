"""RL for search agents: losses, advantages and the dynamic filter, LoRA policy, batches, the trainer.

Import order points one way: the trainer imports these; these import nothing of the trainer.
Every name here is loaded on first use (:func:`__getattr__`), so importing a light submodule such as
``workbench.rl.train_config`` (the command line's flags) does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the public names and the submodule each lives in
_WHERE = {
    "advantages": ("ADV_ALIASES", "ADVANTAGES", "FilterStats", "batch_std_advantages", "compute_advantages",
                   "fill_batch", "group_mean_advantages", "group_std_advantages", "keep_groups",
                   "mean_only_advantages", "reinforce_pp_advantages", "rloo_advantages"),
    "batch": ("RLBatch", "build_batch"),
    "config": ("PRESETS", "LossConfig", "get_loss_config", "kl_coef_at", "register_loss_preset", "valid_names"),
    "losses": ("AGGREGATIONS", "IMPORTANCE", "KL_ESTIMATORS", "SURROGATES", "aggregate", "approx_kl", "clip_fraction",
               "clipped_surrogate", "dual_clip_surrogate", "entropy_from_logits", "entropy_from_logits_chunked",
               "kl_k1", "kl_k2", "kl_k3", "normalizers", "policy_loss", "sequence_ratio", "sequence_ratio_token",
               "token_ratio"),
    "policy": ("LoRAPolicy", "selective_logprobs"),
    "train_config": ("TrainConfig", "RunParts"),
    "data_stream": ("DataStream",),
    "checkpoint": ("latest_checkpoint",),
    "trainer": ("Trainer",),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE)


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'workbench.rl' has no attribute {name!r}")
    return getattr(importlib.import_module(f"workbench.rl.{module}"), name)
