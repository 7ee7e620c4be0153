# What produced graph_profile.json on the H200 (2026-11-28), run from the repository root with /tmp/gc/tok holding
# the packaged SmolLM2-135M's config and tokenizer: the functions of bench/gpu/rollout_profile.py one by one, because
# that script's own run had not finished within its stage limit (device_check_profile_stage.log). The script now
# makes the same measurements (its "graph" rows, --group-rows, the agreement check) and prints each as it ends.
import json
import sys
import time  # noqa: F401

import torch

sys.path.insert(0, "bench/gpu")
import rollout_profile as rp  # noqa: E402

from workbench.rl.policy import LoRAPolicy  # noqa: E402
from workbench.rollout.backends.graph import GraphBackend  # noqa: E402
from workbench.rollout.backends.hf import HFBackend  # noqa: E402

m, tok, cfg = rp.build("/tmp/gc/tok", False, "cuda", torch.bfloat16)
p = list(range(100, 700))
res = {}
for n in (8, 24, 32):
    res[f"generate {n}"] = rp.time_generate(m, p, n, 64, "cuda", 2)
pol = LoRAPolicy(model=m, tokenizer=tok, r=16, alpha=32, device=None)
with torch.no_grad():
    for k, q in pol.model.named_parameters():
        if "lora_B" in k:
            q.normal_(0, 0.02)
lo, gr, ea = HFBackend(pol.model, tok), GraphBackend(pol.model, tok), GraphBackend(pol.model, tok, graphs=False)
for n in (8, 24, 32):
    for name, b in (("graph", gr), ("hf+lora", lo), ("graph eager", ea)):
        res[f"{name} {n}"] = rp.time_backend(b, p, n, 64, "cuda", 2)
res["agreement"] = rp.agreement(lo, gr, p, 8, 64)
res["stats"] = {k: gr.stats[k] for k in ("graph_captures", "graph_replays", "eager_steps", "merged_layers",
                                         "graph_fallback")}
json.dump(res, open(sys.argv[1] if len(sys.argv) > 1 else "graph_profile.json", "w"), indent=1)
