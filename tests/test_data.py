"""Runtime datasets (mlsys.data.megatron) on real megatron-core datasets and real sentencepiece
shards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mlsys.data.megatron import build_datasets, collate_hf, load_tokenizer
from mlsys.data.stream import batches, micro_indices

SEQ = 64


def _gpt(gpt_data, tmp_path, seed=1, n=50, split="100,0,0", cache=None):
    return build_datasets("causal", gpt_data["data_prefix"], gpt_data["tokenizer_dir"], SEQ, seed,
                          (n, 0, 0), split=split,
                          cache_dir=str(tmp_path / (cache or f"cache{seed}")))


def _contains(haystack: np.ndarray, needle: np.ndarray) -> bool:
    hb, nb = haystack.astype(np.int32).tobytes(), needle.astype(np.int32).tobytes()
    start = hb.find(nb)
    while start != -1 and start % 4:
        start = hb.find(nb, start + 1)
    return start != -1


def test_tokenizer_adapter(gpt_data):
    from megatron.core.tokenizers import MegatronTokenizerBase

    tok = load_tokenizer(gpt_data["tokenizer_dir"])
    assert isinstance(tok, MegatronTokenizerBase) and tok.vocab_size == 512
    specials = [tok.pad, tok.unk, tok.cls, tok.sep, tok.mask, tok.eod]
    assert specials == [0, 1, 4, 5, 6, 2]
    text = "def f(x):\n    return x  # ok é\n"
    assert tok.detokenize(tok.tokenize(text)) == text
    assert tok.tokenize("[MASK]") != [tok.mask]  # specials never come from text
    ids = tok.tokenize(" return")
    pieces = [tok.inv_vocab[i] for i in ids]
    assert not pieces[0].startswith("##") and all(p.startswith("##") for p in pieces[1:])
    assert tok.inv_vocab[tok.vocab["<0xE9>"]].startswith("##")  # bytes continue a word


def test_gpt_samples_are_the_token_stream(gpt_data, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    train, valid, test = _gpt(gpt_data, tmp_path)
    assert valid is None and test is None
    docs = IndexedDataset(gpt_data["data_prefix"])
    stream = np.concatenate([docs[i] for i in range(len(docs))]).astype(np.int64)
    eod = load_tokenizer(gpt_data["tokenizer_dir"]).eod
    counts = np.zeros(512, dtype=np.int64)
    for i in range(len(train)):
        s = train[i]
        assert torch.equal(s["tokens"][1:], s["labels"][:-1])
        text = np.append(s["tokens"].numpy(), s["labels"][-1].item())
        counts += np.bincount(s["tokens"].numpy(), minlength=512)
        if i < 400:  # every piece between eods lies inside one document
            for seg in np.split(text, np.flatnonzero(text == eod) + 1):
                assert len(seg) == 0 or _contains(stream, seg)
    want = np.bincount(stream, minlength=512)
    assert (counts <= want).all() and 0 <= (want - counts).sum() <= SEQ  # one epoch, no loss
    assert len(train) == (len(stream) - 1) // SEQ


def test_gpt_deterministic_per_seed_and_multi_epoch(gpt_data, tmp_path):
    a, _, _ = _gpt(gpt_data, tmp_path, seed=7)
    b, _, _ = build_datasets("causal", gpt_data["data_prefix"], gpt_data["tokenizer_dir"], SEQ, 7,
                             (50, 0, 0), split="100,0,0", cache_dir=str(tmp_path / "other"))
    c, _, _ = _gpt(gpt_data, tmp_path, seed=8)
    assert all(torch.equal(a[i]["tokens"], b[i]["tokens"]) for i in range(len(a)))
    assert not all(torch.equal(a[i]["tokens"], c[i]["tokens"]) for i in range(20))
    epoch = len(a)
    many, _, _ = _gpt(gpt_data, tmp_path, seed=9, n=3 * epoch + 5)
    assert len(many) >= 3 * epoch + 5
    assert many[len(many) - 1]["tokens"].shape == (SEQ,)


def test_gpt_order_within_one_epoch_does_not_depend_on_the_sample_count(gpt_data, tmp_path):
    """Any count up to one epoch builds the same epoch in the same order (a run may raise
    ``data.train_samples`` when it is extended, as cpu-size-gpt's 17000-step forks do); past
    an epoch the count changes the order."""
    few, _, _ = _gpt(gpt_data, tmp_path, seed=11, n=5)
    epoch = len(few)
    full, _, _ = _gpt(gpt_data, tmp_path, seed=11, n=epoch, cache="full")
    assert len(full) == epoch > 5
    assert all(torch.equal(few[i]["tokens"], full[i]["tokens"]) for i in range(epoch))
    two, _, _ = _gpt(gpt_data, tmp_path, seed=11, n=2 * epoch, cache="two")
    assert not all(torch.equal(few[i]["tokens"], two[i]["tokens"]) for i in range(epoch))


def test_gpt_split_and_hf_loss(gpt_data, tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    train, valid, test = _gpt(gpt_data, tmp_path, n=30, split="80,10,10")
    assert len(train) >= 30 and len(valid) > 0 and len(test) > 0
    samples = [train[i] for i in range(4)]
    batch = collate_hf(samples, "causal")
    assert torch.equal(batch["labels"], batch["input_ids"])  # HF shifts; loss mask is all 1
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=512, n_positions=SEQ, n_embd=32, n_layer=1,
                                       n_head=2)).eval()
    with torch.no_grad():
        out = model(**batch)
    mega_labels = torch.stack([s["labels"] for s in samples])
    ce = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 512),
                                           mega_labels[:, :-1].reshape(-1))
    assert torch.allclose(out.loss, ce, atol=1e-6)


def test_resume_from_consumed_samples(gpt_data, tmp_path):
    """The stream the controller reads (mlsys.data.stream) continues at ``consumed_samples``."""
    train, _, _ = _gpt(gpt_data, tmp_path)

    def stream(consumed: int, steps: int) -> list[dict]:  # one rank, micro-batch 4
        return [b for s in range(steps) for b in batches(
            train, micro_indices(consumed + 4 * s, 4, 1, 0, 1), lambda x: collate_hf(x, "causal"))]

    full, resumed = stream(0, 10), stream(12, 7)
    assert len(resumed) == len(full) - 3
    assert all(torch.equal(x["input_ids"], y["input_ids"])
               for x, y in zip(full[3:], resumed, strict=True))
    ranks = [[micro_indices(8 + 6 * s, 2, 3, r, 1)[0] for s in range(5)] for r in range(3)]
    assert ranks[0][:2] == [[8, 9], [14, 15]] and ranks[2][0] == [12, 13]
    step = [i for r in range(3) for i in ranks[r][1]]
    assert sorted(step) == list(range(14, 20))


def _bert(bert_data, tmp_path, nsp=False, n=400, seed=3):
    train, _, _ = build_datasets("masked", bert_data["data_prefix"], bert_data["tokenizer_dir"],
                                 128, seed, (n, 0, 0), split="100,0,0",
                                 cache_dir=str(tmp_path / "bcache"), nsp=nsp)
    return train


def test_bert_masking_statistics_and_whole_words(bert_data, tmp_path):
    tok = load_tokenizer(bert_data["tokenizer_dir"])
    train = _bert(bert_data, tmp_path)
    batch = collate_hf([train[i] for i in range(400)], "masked")
    assert "next_sentence_label" not in batch
    ids, labels, attn = batch["input_ids"], batch["labels"], batch["attention_mask"]
    masked = labels != -100
    real = (attn == 1) & (ids != tok.cls) & (ids != tok.sep)
    frac = masked.sum().item() / real.sum().item()
    assert 0.13 <= frac <= 0.155, frac
    n = masked.sum().item()
    to_mask = (ids[masked] == tok.mask).sum().item() / n
    kept = (ids[masked] == labels[masked]).sum().item() / n
    assert abs(to_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02, (to_mask, kept)
    random = ids[masked][(ids[masked] != tok.mask) & (ids[masked] != labels[masked])]
    assert not np.isin(random.numpy(), list(tok.special_ids)).any()
    original = torch.where(masked, labels, ids)
    for row in range(len(ids)):  # a word is masked whole or not at all
        # (megatron joins a piece that continues a word to the previous word across [SEP])
        keep = real[row].numpy()
        word = np.cumsum(tok.is_word_start[original[row].numpy()[keep]])
        row_masked = masked[row].numpy()[keep]
        for w in np.unique(word[row_masked]):
            assert row_masked[word == w].all()


def test_bert_samples_come_from_documents_and_nsp(bert_data, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    tok = load_tokenizer(bert_data["tokenizer_dir"])
    ds = IndexedDataset(bert_data["data_prefix"])
    docs = [np.concatenate([ds[i] for i in range(ds.document_indices[d],
                                                 ds.document_indices[d + 1])])
            for d in range(len(ds.document_indices) - 1)]
    train = _bert(bert_data, tmp_path, nsp=True, n=200)
    batch = collate_hf([train[i] for i in range(200)], "masked")
    nsp = batch["next_sentence_label"]
    assert 0.35 < nsp.float().mean().item() < 0.65
    original = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
    continued = 0
    for row in range(200):
        seq = original[row][batch["attention_mask"][row] == 1].numpy()
        seps = np.flatnonzero(seq == tok.sep)
        assert seq[0] == tok.cls and len(seps) == 2 and seps[1] == len(seq) - 1
        types = batch["token_type_ids"][row][: len(seq)].numpy()
        assert (types[: seps[0] + 1] == 0).all() and (types[seps[0] + 1:] == 1).all()
        a, b = seq[1: seps[0]], seq[seps[0] + 1: -1]
        assert any(_contains(d, a) for d in docs) and any(_contains(d, b) for d in docs)
        if nsp[row] == 0 and not train[row]["truncated"]:  # B continues A in its document
            assert any(_contains(d, np.concatenate([a, b])) for d in docs)
            continued += 1
    assert continued >= 3


def test_refuses_incomplete_or_mismatched_shards(gpt_data, bert_data, tmp_path):
    with pytest.raises(ValueError, match="another tokenizer"):
        build_datasets("causal", gpt_data["data_prefix"], bert_data["tokenizer_dir"], SEQ, 1,
                       (10, 0, 0), cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="no manifest"):
        build_datasets("causal", str(tmp_path / "missing"), gpt_data["tokenizer_dir"], SEQ, 1,
                       (10, 0, 0), cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="split-sentences"):
        build_datasets("masked", gpt_data["data_prefix"], gpt_data["tokenizer_dir"], SEQ, 1,
                       (10, 0, 0), cache_dir=str(tmp_path))


WORKER = r"""
import hashlib, json, os, sys, warnings
warnings.filterwarnings("ignore")
import torch
torch.distributed.init_process_group("gloo")
from mlsys.data.megatron import build_datasets
out = {}
for kind, d in (("causal", json.loads(sys.argv[1])), ("masked", json.loads(sys.argv[2]))):
    train, _, _ = build_datasets(kind, d["data_prefix"], d["tokenizer_dir"], 64, 5, (60, 0, 0),
                                 split="100,0,0", cache_dir=sys.argv[3])
    h = hashlib.sha256()
    for i in range(60):
        for v in train[i].values():
            h.update(torch.as_tensor(v).numpy().tobytes())
    out[kind] = h.hexdigest()
with open(os.path.join(sys.argv[3], f"rank{os.environ['RANK']}.json"), "w") as f:
    json.dump(out, f)
torch.distributed.destroy_process_group()
"""


def _digest(dataset, n=60) -> str:
    import hashlib

    h = hashlib.sha256()
    for i in range(n):
        for v in dataset[i].values():
            h.update(torch.as_tensor(v).numpy().tobytes())
    return h.hexdigest()


@pytest.mark.slow
def test_two_ranks_build_the_same_samples(gpt_data, bert_data, tmp_path):
    """Real 2-process gloo group: rank 0 builds the index caches, both ranks read the same
    samples, equal to a single-process build."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = tmp_path / "shared_cache"
    cache.mkdir()
    paths = [json.dumps({k: str(d[k]) for k in ("data_prefix", "tokenizer_dir")})
             for d in (gpt_data, bert_data)]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen(
        [sys.executable, "-c", WORKER, *paths, str(cache)], cwd=root,
        env=dict(os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port), PYTHONPATH=root, OMP_NUM_THREADS="1"),
        stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    r0, r1 = (json.loads((cache / f"rank{r}.json").read_text()) for r in range(2))
    assert r0 == r1
    for kind, d in (("causal", gpt_data), ("masked", bert_data)):
        train, _, _ = build_datasets(kind, d["data_prefix"], d["tokenizer_dir"], 64, 5,
                                     (60, 0, 0), split="100,0,0",
                                     cache_dir=str(tmp_path / f"single_{kind}"))
        assert _digest(train) == r0[kind]
