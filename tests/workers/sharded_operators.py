"""Worker: the operators on ZeRO-3 partitioned models (2 ranks) against the dense result.

Rank 0 writes ``{"checks": {name: max_abs_difference}}`` to the JSON path given last.
"""

from __future__ import annotations

import json
import sys

import deepspeed
import torch
from deepspeed.utils import safe_get_full_fp32_param
from transformers.integrations import HfDeepSpeedConfig
from transformers.integrations.deepspeed import unset_hf_deepspeed_config

from mlsys.distributed.process import end_process_group
from mlsys.distributed.zero import full_shape, model_is_partitioned
from mlsys.operators import coalesce, decoalesce, interpolate
from mlsys.vcycle.optimizer_state import DeepSpeedAdamState, TorchAdamState, map_adam_state
from mlsys.vcycle.symmetry import add_detail, add_width_detail
from tests.tiny_models import make, perturb

DS_CONFIG = {
    "train_micro_batch_size_per_gpu": 1,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 3},
}


def initialize(model, stage: int = 3):
    """An engine as the controller builds it: torch AdamW, 2-D and 1-D parameter groups."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if len(full_shape(p)) >= 2]},
              {"params": [p for p in params if len(full_shape(p)) < 2], "weight_decay": 0.0}]
    config = {**DS_CONFIG, "zero_optimization": {"stage": stage}}
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(groups, lr=1e-3),
                                      config=config)
    return engine


def engine_checks(kind: str, stage: int, checks: dict[str, float]) -> None:
    """Inside an engine (ZeRO ``stage``): the operators read the fp32 masters after a real
    optimizer step, and Adam's moments mapped into a new engine equal the dense map."""
    zero3_building(stage == 3)
    tag = f"{kind}/engine{stage}"
    trained = make(kind)
    engine = initialize(partitioned_copy(trained) if stage == 3 else make(kind), stage)
    ids = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(0))
    extra = {"next_sentence_label": torch.zeros(1, dtype=torch.long)} if "bert" in kind else {}
    engine.backward(engine(input_ids=ids, labels=ids, **extra).loss)
    engine.step()
    masters = {n: safe_get_full_fp32_param(p).reshape(full_shape(p))
               for n, p in engine.module.named_parameters()}
    with torch.no_grad():
        for n, p in trained.named_parameters():
            p.copy_(masters[n])
    small = coalesce(engine.module)
    checks[f"{tag}/moved"] = max_diff(masters, make(kind))
    checks[f"{tag}/coalesce"] = max_diff(full(small), dense(coalesce, trained))

    small_engine = initialize(small, stage)
    source = DeepSpeedAdamState(engine)
    map_adam_state(engine.module, source, small_engine.module, DeepSpeedAdamState(small_engine))
    ref_opt = torch.optim.AdamW(trained.parameters())
    ref = TorchAdamState(ref_opt)
    for (_, p), (_, q) in zip(engine.module.named_parameters(), trained.named_parameters(),
                              strict=True):
        for key in ("exp_avg", "exp_avg_sq"):
            ref.set(q, key, source.get(p, key))
    ref.set_step(source.step())
    ref_small = dense(coalesce, trained)
    ref_small_opt = torch.optim.AdamW(ref_small.parameters())
    map_adam_state(trained, ref, ref_small, TorchAdamState(ref_small_opt))
    got = DeepSpeedAdamState(small_engine)
    for key in ("exp_avg", "exp_avg_sq"):
        checks[f"{tag}/map/{key}"] = max(
            (got.get(p, key) - ref_small_opt.state[q][key]).abs().max().item()
            for (_, p), (_, q) in zip(small_engine.module.named_parameters(),
                                      ref_small.named_parameters(), strict=True))
        checks[f"{tag}/map/{key}/nonzero"] = max(
            ref_small_opt.state[q][key].abs().max().item() for q in ref_small.parameters()
            if q.dim() < 2)  # the second param group, which DeepSpeed links late
    checks[f"{tag}/map/step"] = float(got.step())
    small_engine.destroy()
    engine.destroy()
    zero3_building(True)


_ALIVE: list[HfDeepSpeedConfig] = []


def zero3_building(on: bool) -> None:
    """Switch whether ``_from_config`` builds partitioned models (the reference runs dense)."""
    _ALIVE.clear()
    unset_hf_deepspeed_config()
    if on:
        _ALIVE.append(HfDeepSpeedConfig(DS_CONFIG))


def dense(fn, *args, **kw):
    zero3_building(False)
    try:
        return fn(*args, **kw)
    finally:
        zero3_building(True)


def full(model) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        with deepspeed.zero.GatheredParameters([p]):
            out[name] = p.data.detach().clone()
    return out


def partitioned_copy(reference):
    """A ZeRO-3 partitioned model holding ``reference``'s weights."""
    model = type(reference)._from_config(reference.config)
    assert model_is_partitioned(model)
    src = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        with deepspeed.zero.GatheredParameters([p], modifier_rank=0):
            p.data.copy_(src[name].data)
    return model.eval()


def max_diff(a: dict, b) -> float:
    b = dict(b.named_parameters()) if not isinstance(b, dict) else b
    assert a.keys() == b.keys()
    return max((a[n].float() - b[n].float()).abs().max().item() for n in a)


def main(out_path: str) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    zero3_building(True)
    checks: dict[str, float] = {}
    for kind in ("bert-pretraining", "gpt2", "llama"):
        for scheme, mapping in (("stride", "copy"), ("adjacent", "identity")):
            model = make(kind)
            sharded = partitioned_copy(model)
            small = coalesce(sharded, scheme=scheme, depth_mapping=mapping)
            checks[f"{kind}/{scheme}/partitioned"] = float(model_is_partitioned(small))
            checks[f"{kind}/{scheme}/coalesce"] = max_diff(
                full(small), dense(coalesce, model, scheme=scheme, depth_mapping=mapping))
            model_small = perturb(dense(coalesce, model, scheme=scheme), seed=3)
            large = decoalesce(partitioned_copy(model_small), model.config, scheme=scheme,
                               depth_mapping=mapping)
            expect_large = dense(decoalesce, model_small, model.config, scheme=scheme,
                                 depth_mapping=mapping)
            checks[f"{kind}/{scheme}/decoalesce"] = max_diff(full(large), expect_large)
            interpolate(large, sharded, 0.3)
            interpolate(expect_large, model, 0.3)
            checks[f"{kind}/{scheme}/interpolate"] = max_diff(full(large), expect_large)
            add_width_detail(large, sharded, 0.4, width=2, scheme=scheme)
            dense(add_width_detail, expect_large, model, 0.4, width=2, scheme=scheme)
            checks[f"{kind}/{scheme}/width_detail"] = max_diff(full(large), expect_large)
            add_detail(large, sharded, 0.3, 2, 2, scheme, mapping)
            dense(add_detail, expect_large, model, 0.3, 2, 2, scheme, mapping)
            checks[f"{kind}/{scheme}/detail"] = max_diff(full(large), expect_large)

        for stage in (3, 1):
            engine_checks(kind, stage, checks)
    if torch.distributed.get_rank() == 0:
        with open(out_path, "w") as f:
            json.dump({"checks": checks}, f, indent=1)
    end_process_group()


if __name__ == "__main__":
    main(sys.argv[-1])
