"""Shared-prompt prefill (``workbench.rl.shared_prefix``): the same loss and LoRA gradients as the plain
forward, to 1e-5, on random-initialised 2-layer models of real architectures (Llama, Qwen2)."""

from __future__ import annotations

import pytest
import torch

from workbench.rl.config import get_loss_config
from workbench.rl.losses import policy_loss
from workbench.rl.policy import LoRAPolicy
from workbench.rl.shared_prefix import common_prefix_len, shared_prefix_hidden


def tiny(arch: str, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=256)
    if arch == "llama":
        return LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=True)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=False)).eval()


def group_batch(G=4, P=20, seed=0, V=96):
    """G right-padded rows sharing a P-token prompt, responses of different lengths; loss on responses."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, V, (P,), generator=g)
    lens = [5 + 4 * i for i in range(G)]
    T = P + max(lens)
    ids = torch.zeros((G, T), dtype=torch.long)
    am = torch.zeros((G, T), dtype=torch.long)
    lm = torch.zeros((G, T))
    for i, n in enumerate(lens):
        ids[i, :P] = prompt
        ids[i, P : P + n] = torch.randint(0, V, (n,), generator=g)
        am[i, : P + n] = 1
        lm[i, P : P + n] = 1
        lm[i, P + 1] = 0  # an observation-like token inside the response carries no loss
    return ids, am, lm


def nudged_policy(arch: str) -> LoRAPolicy:
    model = tiny(arch)
    pol = LoRAPolicy(model=model, tokenizer=None, r=4, alpha=8, device=None)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:  # B starts at 0 (a no-op adapter): make the gradient check meaningful
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return pol


def loss_and_grads(pol: LoRAPolicy, ids, am, lm, prefix_len: int):
    pol.model.zero_grad(set_to_none=True)
    logp, ent = pol.logprobs(ids, am, target_mask=lm > 0, with_entropy=True, prefix_len=prefix_len)
    adv = torch.linspace(-1.0, 1.0, ids.shape[0])
    old = (logp.detach() - 0.05 * lm)  # off-policy ratios, so clipping and ratios are exercised
    loss, _ = policy_loss(logp, old, None, adv, lm, get_loss_config("grpo", kl_coef=0.0), int(lm.sum()), ids.shape[0])
    (loss + 0.01 * (ent * lm).sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in pol.model.named_parameters() if p.requires_grad}
    return float(loss.detach()), logp.detach(), grads


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_shared_prefix_matches_plain_forward(arch):
    pol = nudged_policy(arch)
    ids, am, lm = group_batch()
    P = common_prefix_len(ids, am)
    assert P == 20
    loss0, lp0, g0 = loss_and_grads(pol, ids, am, lm, prefix_len=0)
    loss1, lp1, g1 = loss_and_grads(pol, ids, am, lm, prefix_len=P)
    assert abs(loss0 - loss1) < 1e-5
    assert torch.allclose(lp0, lp1, atol=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 0
    nonzero = 0
    for n in g0:
        assert torch.allclose(g0[n], g1[n], atol=1e-5, rtol=1e-4), n
        nonzero += int(g0[n].abs().max() > 0)
    assert nonzero == len(g0)  # the prefix's k/v projections get gradient from every response


def test_shared_prefix_hidden_checks_its_input():
    model = tiny("llama")
    ids, am, _ = group_batch()
    ids[1, 3] = (ids[0, 3] + 1) % 96  # row 1 leaves the prefix early
    assert common_prefix_len(ids, am) == 3
    with pytest.raises(ValueError, match="do not share"):
        shared_prefix_hidden(model.model, ids, am, 10)
    with pytest.raises(ValueError, match="prefix_len must be"):
        shared_prefix_hidden(model.model, ids, am, ids.shape[1])


def test_common_prefix_leaves_a_token_per_row():
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    am = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    assert common_prefix_len(ids, am) == 2  # row 0 is the prompt alone: keep its last token out of the prefix


@pytest.mark.parametrize("mode", ["sequential", "bucket", "shared_prefix"])
def test_micro_batch_plans_cover_every_row_once(mode):
    from workbench.rl.batch import RLBatch
    from workbench.rl.update import plan_micro_batches

    ids, am, lm = group_batch(G=4)
    ids2, am2, lm2 = group_batch(G=4, P=12, seed=1)
    T = max(ids.shape[1], ids2.shape[1])
    pad = lambda x: torch.nn.functional.pad(x, (0, T - x.shape[1]))  # noqa: E731
    b = RLBatch(torch.cat([pad(ids), pad(ids2)]), torch.cat([pad(am), pad(am2)]), torch.cat([pad(lm), pad(lm2)]),
                torch.zeros(8, T), advantages=torch.arange(8.0), group_ids=["a"] * 4 + ["b"] * 4, index=list(range(8)),
                global_tokens=int(lm.sum() + lm2.sum()), global_seqs=8)
    plan = plan_micro_batches(b, 3, mode)
    rows = sorted(i for m, _ in plan for i in m.index)
    assert rows == list(range(8)) and all(len(m) <= 3 for m, _ in plan)
    assert all(m.global_tokens == b.global_tokens for m, _ in plan)  # the mini-batch's normalizers are kept
    if mode == "shared_prefix":
        assert all(len(set(m.group_ids)) == 1 for m, _ in plan)
        assert sorted(p for _, p in plan) == [0, 0, 12, 20]  # a lone row has nothing to share
        assert [len(m) for m, _ in plan] == [3, 1, 3, 1]
    else:
        assert all(p == 0 for _, p in plan)


def test_flops_count_the_shared_prompt_once():
    from workbench.rl.flops import ModelShape, backward_flops, forward_flops, work_of

    s = ModelShape(body_params=1000, lora_params=10, n_layers=2, attn_dim=8, head_params=500)
    tokens, pairs, targets = work_of([10, 12], targets=8)
    assert (tokens, pairs) == (22, 55 + 78)
    assert forward_flops(s, tokens, pairs, targets) == 2 * 1010 * 22 + 4 * 2 * 8 * 133 + 2 * 500 * 8
    assert backward_flops(s, tokens, pairs, targets) == 2 * 1000 * 22 + 4 * 10 * 22 + 8 * 2 * 8 * 133 + 4 * 500 * 8
    shared = work_of([10, 12], targets=8, prefix_len=6)
    assert shared[0] == 6 + 4 + 6 and shared[1] < pairs
