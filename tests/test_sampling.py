"""The rollout backends' sampler (``workbench.rollout.backends.hf.draw``): inverse CDF, one uniform per row."""

import pytest
import torch

from workbench.rollout.backends.hf import _sample, draw


def test_draws_follow_the_rows_probabilities():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 2.0, 0.0]])  # row 3: not normalized
    gen = torch.Generator().manual_seed(0)
    n = 20000
    counts = torch.zeros_like(probs)
    for _ in range(n // 100):
        idx = draw(probs.repeat(100, 1), gen).view(100, 3)
        for r in range(3):
            counts[r] += torch.bincount(idx[:, r], minlength=4)
    freq = counts / n
    expected = probs / probs.sum(-1, keepdim=True)
    assert counts[probs == 0].sum() == 0  # zero entries are never drawn
    assert torch.allclose(freq, expected, atol=0.015), freq  # 3 sigma of a share near 0.5 over 20,000 draws: 0.011


def test_a_seed_gives_the_same_draws_and_another_seed_others():
    probs = torch.softmax(torch.randn(6, 49152, generator=torch.Generator().manual_seed(1)), -1)
    a = draw(probs.clone(), torch.Generator().manual_seed(7))  # draw overwrites its input with the cumulative sums
    b = draw(probs.clone(), torch.Generator().manual_seed(7))
    c = torch.stack([draw(probs.clone(), torch.Generator().manual_seed(s)) for s in range(8, 12)])
    assert torch.equal(a, b)
    assert (c != a).any()


def test_a_generator_per_row_draws_each_row_apart_from_the_others():
    """One generator per row: a row's index depends on its own generator alone, not on which rows share the call
    nor their order; a list of the wrong length is an error."""
    probs = torch.softmax(torch.randn(3, 500, generator=torch.Generator().manual_seed(2)), -1)

    def gens(*seeds):
        return [torch.Generator().manual_seed(s) for s in seeds]

    together = draw(probs.clone(), gens(1, 2, 3))
    backwards = draw(probs.flip(0).clone(), gens(3, 2, 1)).flip(0)
    alone = torch.cat([draw(probs[r:r + 1].clone(), gens(s)) for r, s in enumerate((1, 2, 3))])
    assert torch.equal(together, backwards) and torch.equal(together, alone)
    assert not torch.equal(together, draw(probs.clone(), gens(4, 5, 6)))
    with pytest.raises(ValueError, match="2 generators for 3 rows"):
        draw(probs.clone(), gens(1, 2))


def test_a_tiny_tail_entry_is_drawn_at_its_rate():
    # cumulative sums accumulated in float64: a token of probability 1e-2 after 49,151 others is still drawn about that often
    probs = torch.full((1, 49152), (1 - 1e-2) / 49151, dtype=torch.float32)
    probs[0, -1] = 1e-2
    gen = torch.Generator().manual_seed(3)
    hits = sum(int((draw(probs.repeat(200, 1), gen) == 49151).sum()) for _ in range(10))
    assert 8 <= hits <= 35  # 2,000 draws x 1e-2 = 20 expected


def test_logits_that_are_not_finite_are_an_error_naming_the_cause():
    logits = torch.zeros(2, 5)
    logits[1, 2] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        _sample(logits, 0.7, 1.0, torch.Generator().manual_seed(0))


def test_top_p_keeps_the_draws_inside_the_nucleus():
    logits = torch.log(torch.tensor([[0.6, 0.25, 0.1, 0.05]])).repeat(500, 1)
    ids, lp = _sample(logits, 1.0, 0.8, torch.Generator().manual_seed(0))
    assert set(ids.tolist()) <= {0, 1} and {0, 1} <= set(ids.tolist())
    assert torch.allclose(lp, torch.log(torch.tensor([0.6, 0.25]))[ids])
