"""Length as a level (mlsys/length.py): the pooled forward at k = 1 is the plain model, at
k = 2 a hand-written reference; weights untouched; every token an input, the right tokens
targets; gradients reach every embedding row a scored position used; the config field."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from mlsys.config import ConfigError, ModelConfig, parse_run_config
from mlsys.length import causal_targets, length_forward, length_loss, pooled_forward
from mlsys.models import build_model, hf_config

B, S, V = 2, 16, 100
FAMILIES = ("gpt", "llama", "bert")


def tiny(family: str, **extra) -> torch.nn.Module:
    if family == "llama":
        extra = {"num_key_value_heads": 2, **extra}
    m = ModelConfig(family=family, hidden_size=32, num_layers=2, num_heads=4, max_position=32,
                    dropout=0.0, extra=extra)
    return build_model(hf_config(m, V), seed=0).double().eval()


def batch(family: str, seed: int = 0) -> dict[str, torch.Tensor]:
    """Distinct token ids (so a row of the word table is one token of the batch); BERT: two
    segments whose boundary (after token 5) falls inside a window of 2, 30 % masked."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randperm(V, generator=g)[:B * S].reshape(B, S)
    if family != "bert":
        return {"input_ids": ids, "labels": ids.clone()}
    types = (torch.arange(S) >= 5).long().expand(B, S).clone()
    masked = torch.rand(B, S, generator=g) < 0.3
    masked[:, 0] = True
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": torch.ones_like(ids),
            "labels": torch.where(masked, ids, -100)}


@pytest.mark.parametrize("family", FAMILIES)
def test_k1_is_the_plain_model_exactly(family: str) -> None:
    model, b = tiny(family), batch(family)
    if family == "bert":  # padding at the end: the mask is passed through at k = 1
        b["attention_mask"][:, -3:] = 0
    plain = model(**b)
    pooled = pooled_forward(model, 1, **b)
    assert torch.equal(pooled.logits, plain.logits)
    assert pooled.loss.item() == plain.loss.item()


def reference(model: torch.nn.Module, family: str, b: dict[str, torch.Tensor], k: int
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool by reshape-mean, run, score: (logits, loss), written out by hand."""
    ids, labels = b["input_ids"], b["labels"]
    p = S // k

    def mean(rows: torch.Tensor) -> torch.Tensor:
        return rows.reshape(B, p, k, -1).mean(2)

    if family == "bert":
        e = model.bert.embeddings
        x = mean(e.word_embeddings.weight[ids] + e.token_type_embeddings.weight[
            b["token_type_ids"]]) + e.position_embeddings.weight[:p]
        h = model.bert.encoder(e.LayerNorm(x)).last_hidden_state  # no padding: no mask
        logits = model.cls(h.repeat_interleave(k, dim=1))
        picked = [(bi, t) for bi in range(B) for t in range(S) if labels[bi, t] != -100]
        nll = [-F.log_softmax(logits[bi, t], -1)[labels[bi, t]] for bi, t in picked]
        return logits, torch.stack(nll).mean()
    # the HF model's own positions (0 .. p-1 by default) on the pooled embeddings
    logits = model(inputs_embeds=mean(model.get_input_embeddings().weight[ids])).logits
    nll = [-F.log_softmax(logits[bi, j].float(), -1)[ids[bi, (j + 1) * k + i]]
           for bi in range(B) for j in range(p - 1) for i in range(k)]
    return logits, torch.stack(nll).mean()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("k", [2, 4])
def test_pooled_forward_equals_the_reference(family: str, k: int) -> None:
    """Logits to 1e-10 (Llama 1e-5: RMSNorm and rotary in float32); the causal loss, which
    (as Hugging Face's) is computed from float32 logits, to 1e-6; BERT's loss to 1e-10."""
    model, b = tiny(family), batch(family)
    got = pooled_forward(model, k, **b)
    logits, loss = reference(model, family, b, k)
    assert got.logits.shape == ((B, S, V) if family == "bert" else (B, S // k, V))
    tol = 1e-5 if family == "llama" else 1e-10
    torch.testing.assert_close(got.logits, logits, rtol=0, atol=tol)
    assert abs(got.loss.item() - loss.item()) <= (1e-10 if family == "bert" else 1e-6)
    # and it is a different function from k = 1 (the test can tell)
    assert abs(got.loss.item() - model(**b).loss.item()) > 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_length_is_the_identity_on_weights(family: str) -> None:
    """Going to k = 2 and back adds, renames, reshapes or changes no parameter or buffer; the
    model at k = 1 afterwards is the model before."""
    model, b = tiny(family), batch(family)
    before = {n: (t.data_ptr(), t.shape, t.clone()) for n, t in model.state_dict().items()}
    params = dict(model.named_parameters())
    plain = model(**b).logits
    with length_forward(model, 2) as m:
        assert m is model
        assert dict(model.named_parameters()).keys() == params.keys()
        assert all(p is params[n] for n, p in model.named_parameters())
        out = model(**b)
        assert torch.equal(out.logits, pooled_forward(model, 2, **b).logits)
        out.loss.backward()
    assert "forward" not in vars(model)
    after = model.state_dict()
    assert after.keys() == before.keys()
    for n, (ptr, shape, value) in before.items():
        assert after[n].data_ptr() == ptr and after[n].shape == shape
        assert torch.equal(after[n], value), n
    assert torch.equal(model(**b).logits, plain)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("k", [2, 4])
def test_every_token_is_an_input_of_its_pooled_position(family: str, k: int) -> None:
    """Changing token t changes the backbone's input at pooled position t // k and nowhere
    else: each of the S tokens feeds exactly one of the S/k positions."""
    model, b = tiny(family), batch(family)
    seen: list[torch.Tensor] = []
    backbone = model.base_model
    hook = backbone.register_forward_pre_hook(
        lambda _m, _a, kw: seen.append(kw["inputs_embeds"].detach().clone()), with_kwargs=True)
    pooled_forward(model, k, **b)
    for t in range(S):
        changed = {**b, "input_ids": b["input_ids"].clone()}
        changed["input_ids"][:, t] = (changed["input_ids"][:, t] + 1) % V
        pooled_forward(model, k, **changed)
        diff = (seen[-1] - seen[0]).abs().amax(dim=(0, 2))
        assert (diff > 0).tolist() == [j == t // k for j in range(S // k)], t
    hook.remove()


@pytest.mark.parametrize("k", [1, 2, 4])
def test_causal_targets_are_the_next_patch(k: int) -> None:
    """Read the scored (position, token) pairs off the loss's gradient at uniform logits:
    position j is scored against exactly the k tokens of patch j+1; the first patch's tokens
    are targets of nothing, every other token of exactly one position; a -100 label is not
    scored."""
    p = S // k
    labels = torch.randperm(V)[:B * S].reshape(B, S)
    labels[1, S - 1] = -100  # not scored
    logits = torch.zeros(B, p, V, dtype=torch.float64, requires_grad=True)
    length_loss(logits, labels, k, "causal").backward()
    n = B * (S - k) - 1  # scored pairs
    scored = (-n * logits.grad > 0.5)  # grad = (n_j / V - [v is a target of j]) / n
    expected = torch.zeros(B, p, V, dtype=torch.bool)
    for bi in range(B):
        for j in range(p - 1):
            for t in range((j + 1) * k, (j + 2) * k):
                if labels[bi, t] != -100:
                    expected[bi, j, labels[bi, t]] = True
    assert torch.equal(scored, expected)
    targets = causal_targets(torch.arange(S).expand(B, S), k)
    assert sorted(targets[0][targets[0] >= 0].tolist()) == list(range(k, S))


@pytest.mark.parametrize("family", FAMILIES)
def test_gradients_reach_every_embedding_row_used(family: str) -> None:
    """Untied heads, k = 2: the word rows of every token a scored position reads (causal: all
    but the last patch, which predicts nothing; masked: all) get a gradient, no other row
    does; position rows 0 .. S/k-1 likewise (causal: the last pooled position's row none)."""
    k, p = 2, S // 2
    model, b = tiny(family, tie_word_embeddings=False), batch(family)
    model.zero_grad()
    pooled_forward(model, k, **b).loss.backward()
    rows = model.get_input_embeddings().weight.grad.abs().amax(-1) > 0
    used = b["input_ids"] if family == "bert" else b["input_ids"][:, :S - k]
    expected = torch.zeros(V, dtype=torch.bool)
    expected[used.flatten()] = True
    assert torch.equal(rows, expected)
    table = {"gpt": lambda m: m.transformer.wpe, "bert": lambda m: m.bert.embeddings
             .position_embeddings}.get(family)
    if table is not None:
        pos = table(model).weight.grad.abs().amax(-1) > 0
        last = p if family == "bert" else p - 1
        assert pos.tolist() == [i < last for i in range(pos.numel())]
    if family == "bert":  # both segments' type rows
        assert (model.bert.embeddings.token_type_embeddings.weight.grad.abs().amax(-1) > 0).all()


def test_bert_padding_windows_are_masked() -> None:
    """A window of padding only is not attended to: what its tokens are does not change the
    other positions' logits (a window with one real token is attended to)."""
    model, b = tiny("bert"), batch("bert")
    b["attention_mask"][:, -5:] = 0  # windows of 2: the last 2 padding only, one mixed
    a = pooled_forward(model, 2, **b).logits
    changed = {**b, "input_ids": b["input_ids"].clone()}
    changed["input_ids"][:, -4:] = 0
    c = pooled_forward(model, 2, **changed).logits
    torch.testing.assert_close(a[:, :-4], c[:, :-4], rtol=0, atol=1e-12)
    changed["input_ids"][:, -5] = 0  # the mixed window's padding token: attended to
    assert (pooled_forward(model, 2, **changed).logits[:, :-6] - a[:, :-6]).abs().max() > 1e-6


def test_vision_families_have_no_length_levels() -> None:
    model = build_model(hf_config(ModelConfig(family="vit", hidden_size=32, num_layers=2,
                                              num_heads=4, extra={"image_size": 8,
                                                                  "patch_size": 4}), 10), 0)
    with pytest.raises(ValueError, match="length"):
        with length_forward(model, 2):
            pass


GOOD = {"name": "t", "model": {"family": "gpt", "hidden_size": 64, "num_layers": 4,
                               "num_heads": 4, "max_position": 64},
        "data": {"seq_length": 32},
        "vcycle": {"width": 1, "depth": 1, "length": 2},
        "phases": [{"level": 1, "steps": 10, "lr": 1e-3}, {"level": 2, "steps": 20, "lr": 2e-3},
                   {"level": 3, "steps": 20, "lr": 2e-3}, {"level": 2, "steps": 20, "lr": 2e-3},
                   {"level": 1, "steps": 20, "lr": 1e-3}]}


def test_config_length_levels() -> None:
    cfg = parse_run_config(GOOD)
    assert [cfg.vcycle.length_factor(lv) for lv in (1, 2, 3)] == [1, 2, 4]
    data = json.loads(json.dumps(GOOD))
    data["vcycle"]["length"] = 4  # level 3 at k = 16 does not divide 40
    data["data"]["seq_length"] = 40
    with pytest.raises(ConfigError, match=r"data\.seq_length: 40 is not divisible by the "
                                          r"length factor 16"):
        parse_run_config(data)
    data["vcycle"]["length"] = 3
    with pytest.raises(ConfigError, match=r"vcycle\.length"):
        parse_run_config(data)
    data["vcycle"]["length"] = 1
    with pytest.raises(ConfigError, match="leave nothing to coalesce"):
        parse_run_config(data)


def test_config_vision_refuses_length() -> None:
    data = {"name": "v", "model": {"family": "vit", "hidden_size": 32, "num_layers": 2,
                                   "num_heads": 4, "extra": {"image_size": 8, "patch_size": 4}},
            "data": {"seq_length": 5}, "vcycle": {"width": 1, "depth": 1, "length": 2},
            "phases": [{"level": 1, "steps": 1, "lr": 1e-3}, {"level": 2, "steps": 1,
                                                              "lr": 1e-3}]}
    with pytest.raises(ConfigError, match=r"vcycle\.length: the vit family has no length"):
        parse_run_config(data)
