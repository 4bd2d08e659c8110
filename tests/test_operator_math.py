"""Every line of docs/design.md's operator math, checked against explicit F and T matrices."""

from __future__ import annotations

import pytest
import torch

from mlsys.operators import coalesce, decoalesce
from tests.tiny_models import make, perturb

HIDDEN, HEADS, FFN, LAYERS = 32, 4, 64, 4
HEAD_DIM = HIDDEN // HEADS


def f_matrix(size: int, unit: int, scheme: str) -> torch.Tensor:
    """F ∈ R^{d×D}: row k averages the two elements of pair k (units of ``unit`` elements)."""
    n = size // unit
    pairs = [(i, i + n // 2) for i in range(n // 2)] if scheme == "stride" else \
        [(2 * i, 2 * i + 1) for i in range(n // 2)]
    f = torch.zeros(size // 2, size)
    for k, (a, b) in enumerate(pairs):
        for o in range(unit):
            f[k * unit + o, a * unit + o] = 0.5
            f[k * unit + o, b * unit + o] = 0.5
    return f


def spaces(scheme):
    fh, fq, ff = f_matrix(HIDDEN, 1, scheme), f_matrix(HIDDEN, HEAD_DIM, scheme), \
        f_matrix(FFN, 1, scheme)
    return {"h": fh, "q": fq, "f": ff}


def T(f: torch.Tensor) -> torch.Tensor:  # noqa: N802 - the name of the matrix in docs/design.md
    return 2 * f.T


def close(a, b):
    assert torch.allclose(a, b, atol=1e-6, rtol=0), (a - b).abs().max()


@pytest.mark.parametrize("scheme", ["stride", "adjacent"])
def test_f_times_t_is_identity(scheme):
    for f in spaces(scheme).values():
        assert torch.equal(f @ T(f), torch.eye(f.shape[0]))


@pytest.mark.parametrize("scheme", ["stride", "adjacent"])
def test_bert_width_coalesce_and_decoalesce_lines(scheme):
    m = make("bert-mlm")
    s = coalesce(m, width=2, depth=1, scheme=scheme)
    F = spaces(scheme)
    P, S = dict(m.named_parameters()), dict(s.named_parameters())
    lay = "bert.encoder.layer.1."
    linear = {  # name → (out space, in space)
        "attention.self.query": ("q", "h"), "attention.self.key": ("q", "h"),
        "attention.self.value": ("q", "h"), "attention.output.dense": ("h", "q"),
        "intermediate.dense": ("f", "h"), "output.dense": ("h", "f"),
    }
    for name, (o, i) in linear.items():
        close(S[lay + name + ".weight"], F[o] @ P[lay + name + ".weight"] @ T(F[i]))
        close(S[lay + name + ".bias"], F[o] @ P[lay + name + ".bias"])
    for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
        close(S[lay + ln + ".weight"], F["h"] @ P[lay + ln + ".weight"])
        close(S[lay + ln + ".bias"], F["h"] @ P[lay + ln + ".bias"])
    for emb in ("word", "position", "token_type"):
        key = f"bert.embeddings.{emb}_embeddings.weight"
        close(S[key], P[key] @ F["h"].T)  # columns averaged, no rescaling
    head = "cls.predictions.transform.LayerNorm."
    close(S[head + "weight"], 2 * F["h"] @ P[head + "weight"])  # tied head: ×2 on coalesce
    close(S[head + "bias"], 2 * F["h"] @ P[head + "bias"])
    close(S["cls.predictions.bias"], P["cls.predictions.bias"])

    s = perturb(s, seed=11)
    S = dict(s.named_parameters())
    L = dict(decoalesce(s, m.config, scheme=scheme).named_parameters())
    for name, (o, i) in linear.items():
        close(L[lay + name + ".weight"], T(F[o]) @ S[lay + name + ".weight"] @ F[i])
        close(L[lay + name + ".bias"], T(F[o]) @ S[lay + name + ".bias"])
    close(L[head + "weight"], 0.5 * T(F["h"]) @ S[head + "weight"])  # ×½ on decoalesce
    close(L["bert.embeddings.word_embeddings.weight"],
          S["bert.embeddings.word_embeddings.weight"] @ T(F["h"]).T)


@pytest.mark.parametrize("scheme", ["stride", "adjacent"])
def test_gpt2_fused_attention_and_conv1d(scheme):
    m = make("gpt2")
    s = coalesce(m, width=2, depth=1, scheme=scheme)
    F = spaces(scheme)
    P, S = dict(m.named_parameters()), dict(s.named_parameters())
    qkv = torch.block_diag(F["q"], F["q"], F["q"])  # q, k, v each halved by whole heads
    lay = "transformer.h.2."
    # Conv1D stores W as in × out: W_s = (F_out W^T T_in)^T = T_in^T W F_out^T
    close(S[lay + "attn.c_attn.weight"], T(F["h"]).T @ P[lay + "attn.c_attn.weight"] @ qkv.T)
    close(S[lay + "attn.c_attn.bias"], qkv @ P[lay + "attn.c_attn.bias"])
    close(S[lay + "attn.c_proj.weight"], T(F["q"]).T @ P[lay + "attn.c_proj.weight"] @ F["h"].T)
    f_ffn = f_matrix(4 * HIDDEN, 1, scheme)  # GPT-2's n_inner None: 4 × hidden
    close(S[lay + "mlp.c_fc.weight"], T(F["h"]).T @ P[lay + "mlp.c_fc.weight"] @ f_ffn.T)
    close(S[lay + "mlp.c_proj.weight"], T(f_ffn).T @ P[lay + "mlp.c_proj.weight"] @ F["h"].T)
    close(S["transformer.ln_f.weight"], 2 * F["h"] @ P["transformer.ln_f.weight"])


@pytest.mark.parametrize("scheme,pairs", [
    ("stride", [(0, 2), (1, 3)]), ("adjacent", [(0, 1), (2, 3)]),
])
def test_depth_averages_pairs_and_copies_back(scheme, pairs):
    m = make("bert-mlm", layers=LAYERS)
    s = coalesce(m, width=1, depth=2, scheme=scheme)
    P, S = dict(m.named_parameters()), dict(s.named_parameters())
    rel = "attention.self.query.weight"
    for k, (a, b) in enumerate(pairs):
        close(S[f"bert.encoder.layer.{k}.{rel}"],
              (P[f"bert.encoder.layer.{a}.{rel}"] + P[f"bert.encoder.layer.{b}.{rel}"]) / 2)
    L = dict(decoalesce(s, m.config, scheme=scheme).named_parameters())
    for k, (a, b) in enumerate(pairs):
        for j in (a, b):
            small = S[f"bert.encoder.layer.{k}.{rel}"]
            assert torch.equal(L[f"bert.encoder.layer.{j}.{rel}"], small)


def test_identity_depth_mapping_zeroes_second_copy_outputs_and_sums_back():
    m = make("gpt2", layers=LAYERS)
    s = coalesce(m, width=1, depth=2, scheme="stride", depth_mapping="identity")
    P, S = dict(m.named_parameters()), dict(s.named_parameters())
    out, other = "attn.c_proj.weight", "attn.c_attn.weight"
    close(S[f"transformer.h.0.{out}"], P[f"transformer.h.0.{out}"] + P[f"transformer.h.2.{out}"])
    close(S[f"transformer.h.0.{other}"],
          (P[f"transformer.h.0.{other}"] + P[f"transformer.h.2.{other}"]) / 2)
    L = dict(decoalesce(s, m.config, depth_mapping="identity").named_parameters())
    assert torch.equal(L[f"transformer.h.0.{out}"], S[f"transformer.h.0.{out}"])
    for name in ("attn.c_proj.weight", "attn.c_proj.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"):
        assert not L[f"transformer.h.2.{name}"].any()
    assert torch.equal(L[f"transformer.h.2.{other}"], S[f"transformer.h.0.{other}"])
