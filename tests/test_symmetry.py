"""Symmetry breakers: relative noise, width detail from the saved model, a dropout window."""

from __future__ import annotations

import copy

import pytest
import torch

from mlsys.operators import coalesce, decoalesce
from mlsys.vcycle.symmetry import (
    add_detail,
    add_relative_noise,
    add_width_detail,
    dropout_after_up,
    set_dropout,
)
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


def _widened(kind: str, depth_mapping: str = "copy"):
    """A de-coalesced model (paired units exact copies) and an unrelated saved large model."""
    small = perturb(coalesce(make(kind), width=2, depth=2, depth_mapping=depth_mapping), seed=3)
    large = decoalesce(small, make(kind).config, depth_mapping=depth_mapping).eval()
    return small, large, make(kind, seed=7).eval()


@pytest.mark.parametrize("kind", ["gpt2", "bert-mlm"])
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_width_detail_is_invisible_to_coalescing(kind, depth_mapping):
    small, large, old = _widened(kind, depth_mapping)
    add_width_detail(large, old, 0.5, width=2, scheme="stride")
    again = coalesce(large, width=2, depth=2, depth_mapping=depth_mapping)
    for (n, p), (_, q) in zip(again.named_parameters(), small.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=n)


@pytest.mark.parametrize("kind", ["gpt2", "bert-mlm"])
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_width_and_depth_detail_is_invisible_to_coalescing(kind, depth_mapping):
    small, large, old = _widened(kind, depth_mapping)

    def zero_tensors() -> int:
        return sum(int(not p.any()) for p in large.parameters())

    empty = zero_tensors()  # identity blocks: residual-branch output projections all zero
    assert (empty > 0) == (depth_mapping == "identity")
    add_detail(large, old, 0.7, width=2, depth=2, scheme="stride", depth_mapping=depth_mapping)
    assert zero_tensors() == 0  # the identity blocks got the saved layers' detail
    again = coalesce(large, width=2, depth=2, depth_mapping=depth_mapping)
    for (n, p), (_, q) in zip(again.named_parameters(), small.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=n)


def test_width_detail_breaks_duplicates_at_second_order_only():
    small, large, old = _widened("gpt2")
    w = large.transformer.h[0].mlp.c_fc.weight  # in × out; out units i and i+64 are copies
    assert torch.equal(w[:, :64], w[:, 64:])
    ref = outputs(large, inputs())[0]

    def moved(weight: float) -> float:
        m = copy.deepcopy(large)
        add_width_detail(m, old, weight, width=2, scheme="stride")
        assert not torch.equal(m.transformer.h[0].mlp.c_fc.weight[:, :64],
                               m.transformer.h[0].mlp.c_fc.weight[:, 64:])
        return float((outputs(m, inputs())[0] - ref).abs().max())

    # a first-order change doubles with the weight; this one quadruples
    small_move, double_move = moved(0.01), moved(0.02)
    assert 0 < small_move and 3.5 < double_move / small_move < 4.5


def test_width_detail_rejects_a_bad_weight():
    _, large, old = _widened("gpt2")
    with pytest.raises(ValueError, match="weight"):
        add_width_detail(large, old, 1.5, width=2, scheme="stride")


def test_dropout_window_sets_and_restores_every_dropout():
    assert dropout_after_up(True, 0, 0.1, 2) == 0.1
    assert dropout_after_up(True, 2, 0.1, 2) is None  # the window is over
    assert dropout_after_up(False, 0, 0.1, 2) is None  # not after an up-transition
    assert dropout_after_up(True, 0, 0.0, 2) is None
    model = make("gpt2", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0).train()
    ids = inputs()
    reference = outputs(model, ids)[0]
    set_dropout(model, 0.5)
    rates = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert rates == {0.5}
    assert not torch.equal(outputs(model, ids)[0], reference)
    set_dropout(model, None)
    assert torch.equal(outputs(model, ids)[0], reference)
