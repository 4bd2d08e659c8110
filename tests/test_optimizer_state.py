"""Adam moments mapped through the operators (``vcycle.optimizer: map``)."""

from __future__ import annotations

import pytest
import torch

from mlsys.operators import coalesce, decoalesce
from mlsys.vcycle.optimizer_state import TorchAdamState, map_adam_state
from tests.tiny_models import inputs, make, perturb

KINDS = ["bert-mlm", "gpt2", "llama", "llama-untied"]  # llama: GQA 4:2, SwiGLU, RMSNorm
NO_DROPOUT = {
    "bert-mlm": dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
    "gpt2": dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "llama": dict(attention_dropout=0.0),
    "llama-untied": dict(attention_dropout=0.0),
}


def adam_step(model, ids, steps: int = 1) -> torch.optim.Optimizer:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    return opt


def fresh_optimizer(model):
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scheme", ["stride", "adjacent"])
def test_mapped_state_equals_fresh_adam_on_the_duplicated_model(kind, scheme):
    """Width de-coalescing is function-preserving, so the duplicated model's gradients are
    fixed by the small model's; one identical step from fresh must give the mapped state."""
    base = make(kind, **NO_DROPOUT[kind])
    small = perturb(coalesce(base, width=2, depth=1, scheme=scheme), seed=6)
    target_config = base.config
    duplicated = decoalesce(small, target_config, scheme=scheme)
    ids = inputs(batch=4)
    expected_opt = adam_step(duplicated, ids)  # fresh Adam, one step on the duplicated model

    small_opt = adam_step(small, ids)           # the same step on the small model
    mapped_model = decoalesce(small, target_config, scheme=scheme)  # any weights: state only
    mapped_opt = fresh_optimizer(mapped_model)
    map_adam_state(small, TorchAdamState(small_opt), mapped_model, TorchAdamState(mapped_opt),
                   scheme=scheme)

    expected = dict(duplicated.named_parameters())
    # tolerance relative to the largest moment in the model: some gradients are exactly zero
    # in theory (BERT's key bias) and only float noise in practice
    scale = {key: max(s[key].abs().max().item() for s in expected_opt.state.values())
             for key in ("exp_avg", "exp_avg_sq")}
    for name, p in mapped_model.named_parameters():
        want = expected_opt.state[expected[name]]
        got = mapped_opt.state[p]
        assert int(got["step"]) == int(want["step"]) == 1
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.allclose(got[key], want[key], rtol=1e-4, atol=2e-5 * scale[key]), \
                (name, key)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("depth_mapping", ["copy", "identity"])
def test_state_round_trip_is_exact(kind, depth_mapping):
    large = make(kind)
    small = coalesce(large, depth_mapping=depth_mapping)
    small_opt = adam_step(small, inputs(batch=2), steps=3)
    up = decoalesce(small, large.config, depth_mapping=depth_mapping)
    up_opt = fresh_optimizer(up)
    map_adam_state(small, TorchAdamState(small_opt), up, TorchAdamState(up_opt),
                   depth_mapping=depth_mapping)
    back = coalesce(up, depth_mapping=depth_mapping)
    back_opt = fresh_optimizer(back)
    map_adam_state(up, TorchAdamState(up_opt), back, TorchAdamState(back_opt),
                   depth_mapping=depth_mapping)
    originals = dict(small.named_parameters())
    for name, p in back.named_parameters():
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(back_opt.state[p][key], small_opt.state[originals[name]][key])
        assert int(back_opt.state[p]["step"]) == 3
