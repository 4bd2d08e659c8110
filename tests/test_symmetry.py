"""Noise that breaks duplicated units while keeping the function close."""

from __future__ import annotations

import torch

from mlsys.operators import coalesce, decoalesce
from mlsys.symmetry import add_relative_noise
from tests.tiny_models import inputs, make, outputs, perturb


def test_noise_breaks_duplicates_and_barely_moves_the_function():
    small = perturb(coalesce(make("gpt2"), width=2, depth=1), seed=3)
    large = decoalesce(small, make("gpt2").config).eval()
    w = large.transformer.h[0].mlp.c_fc.weight  # in × out; out units i and i+64 are copies
    assert torch.equal(w[:, :64], w[:, 64:])
    before = [t.clone() for t in outputs(large, inputs())]
    add_relative_noise(large, 1e-3, seed=0)
    assert not torch.equal(w[:, :64], w[:, 64:])
    after = outputs(large, inputs())
    rel = (after[0] - before[0]).abs().max() / before[0].abs().max()
    assert 0 < rel < 5e-2


def test_noise_is_deterministic_and_scaled_per_tensor():
    a, b = make("gpt2"), make("gpt2")
    ref = {n: p.clone() for n, p in a.named_parameters()}
    add_relative_noise(a, 0.01, seed=5)
    add_relative_noise(b, 0.01, seed=5)
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        assert torch.equal(p, q)
        delta = (p - ref[n]).pow(2).mean().sqrt() / ref[n].pow(2).mean().sqrt()
        if ref[n].numel() > 1000:
            assert 0.005 < delta < 0.02, n
