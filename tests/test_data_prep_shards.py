"""Shards: megatron-compatible bytes, worker-count independent, atomic, lossless."""

from __future__ import annotations

import filecmp
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from data_prep.sentences import split_sentences
from data_prep.shards import build_shards
from mlsys.data.indexed import IncompleteDataset, check_complete
from mlsys.data.indexed_writer import IndexedWriter


def _docs(corpus: str) -> list[str]:
    with open(corpus, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def test_writer_bytes_equal_megatron_builder(tmp_path):
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

    rng = np.random.default_rng(0)
    docs = [[rng.integers(0, 60000, rng.integers(1, 50)) for _ in range(rng.integers(1, 5))]
            for _ in range(30)]
    ref = IndexedDatasetBuilder(str(tmp_path / "ref.bin"), dtype=np.uint16)
    with IndexedWriter(str(tmp_path / "ours"), np.uint16) as w:
        for chunk in (docs[:7], docs[7:8], docs[8:]):
            seqs = [s for d in chunk for s in d]
            w.add_chunk(np.concatenate(seqs), [len(s) for s in seqs], [len(d) for d in chunk])
        w.commit({})
    for d in docs:
        ref.add_document(torch.from_numpy(np.concatenate(d)), [len(s) for s in d])
    ref.finalize(str(tmp_path / "ref.idx"))
    for ext in ("bin", "idx"):
        assert filecmp.cmp(tmp_path / f"ref.{ext}", tmp_path / f"ours.{ext}", shallow=False)
    ds = IndexedDataset(str(tmp_path / "ours"))
    seqs = [s for d in docs for s in d]
    assert len(ds) == len(seqs) and all(np.array_equal(ds[i], s) for i, s in enumerate(seqs))
    assert ds.document_indices.tolist() == np.cumsum([0] + [len(d) for d in docs]).tolist()


def test_two_workers_same_shards_as_one(tmp_path, gpt_data, bert_data):
    for data, flags in ((gpt_data, {"append_eod": True}), (bert_data, {"split_sentences": True})):
        for workers in (1, 2):
            build_shards([data["corpus"]], data["tokenizer_dir"], str(tmp_path / f"w{workers}"),
                         workers=workers, progress=False, **flags)
        for ext in ("bin", "idx"):
            assert filecmp.cmp(tmp_path / f"w1.{ext}", tmp_path / f"w2.{ext}", shallow=False)
            # the in-process path (workers=0, used by the fixtures) agrees too
            assert filecmp.cmp(tmp_path / f"w1.{ext}", f"{data['data_prefix']}.{ext}",
                               shallow=False)


def test_round_trip_documents(gpt_data, bert_data):
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    from mlsys.data.megatron import load_tokenizer

    tok = load_tokenizer(gpt_data["tokenizer_dir"])
    ds = IndexedDataset(gpt_data["data_prefix"])
    docs = _docs(gpt_data["corpus"])
    assert len(ds) == len(docs) == 40
    for i, text in enumerate(docs):  # code: exact, eod last
        assert ds[i][-1] == tok.eod
        assert tok.detokenize(ds[i][:-1]) == text

    tok = load_tokenizer(bert_data["tokenizer_dir"])
    ds = IndexedDataset(bert_data["data_prefix"])
    docs = _docs(bert_data["corpus"])
    assert len(ds.document_indices) - 1 == len(docs)
    for d, text in enumerate(docs):  # prose: sentence by sentence, modulo whitespace
        lo, hi = ds.document_indices[d], ds.document_indices[d + 1]
        sentences = [tok.detokenize(ds[i]) for i in range(lo, hi)]
        assert sentences == split_sentences(text)
        assert " ".join(sentences) == " ".join(text.split())


def test_failure_mid_run_leaves_no_output(tmp_path, gpt_data, monkeypatch):
    import data_prep.shards as shards

    prefix = str(tmp_path / "out")
    calls = {"n": 0}
    real = IndexedWriter.add_chunk

    def failing(self, *a):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as if Ctrl-C arrived mid-run
        real(self, *a)

    monkeypatch.setattr(shards, "CHUNK_DOCS", 4)
    monkeypatch.setattr(IndexedWriter, "add_chunk", failing)
    with pytest.raises(KeyboardInterrupt):
        build_shards([gpt_data["corpus"]], gpt_data["tokenizer_dir"], prefix, workers=0,
                     progress=False)
    assert os.listdir(tmp_path) == []
    with pytest.raises(IncompleteDataset):
        check_complete(prefix)


def test_crash_between_renames_does_not_look_complete(tmp_path, gpt_data, monkeypatch):
    prefix = str(tmp_path / "out")
    build_shards([gpt_data["corpus"]], gpt_data["tokenizer_dir"], prefix, workers=0,
                 progress=False)
    check_complete(prefix)
    real, seen = os.replace, []

    def dying_replace(src, dst):
        seen.append(dst)
        if dst.endswith(".bin"):
            raise SystemExit("killed")  # after the new .idx is in place, before the .bin
        real(src, dst)

    monkeypatch.setattr(os, "replace", dying_replace)
    with pytest.raises(SystemExit):
        build_shards([gpt_data["corpus"]], gpt_data["tokenizer_dir"], prefix, workers=0,
                     append_eod=True, progress=False)
    monkeypatch.undo()
    assert seen == [prefix + ".idx", prefix + ".bin"]
    with pytest.raises(IncompleteDataset, match="no manifest"):
        check_complete(prefix)


def test_killed_process_leaves_nothing_complete(tmp_path, gpt_data):
    """SIGKILL while the run is blocked reading its (FIFO) input: no dataset, only temp files."""
    fifo = tmp_path / "in.txt"
    os.mkfifo(fifo)
    prefix = str(tmp_path / "out")
    proc = subprocess.Popen(
        [sys.executable, "-m", "data_prep", "shards", "--input", str(fifo), "--tokenizer",
         gpt_data["tokenizer_dir"], "--out", prefix, "--workers", "2", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(fifo, "w") as writer:
        for i in range(3000):
            writer.write(f"document number {i}, with some words in it.\n\n")
        writer.flush()
        deadline = time.monotonic() + 60
        while not any(n.startswith(".out.tmp-") and n.endswith(".bin")
                      for n in os.listdir(tmp_path)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    names = os.listdir(tmp_path)
    assert not {"out.bin", "out.idx", "out.manifest.json"} & set(names), names
    with pytest.raises(IncompleteDataset):
        check_complete(prefix)
