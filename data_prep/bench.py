"""Throughput benchmark: tokens/s of ``shards`` with 1 and 2 workers on the default corpus.

Each run is a separate ``python -m data_prep shards`` process (wall time includes its start-up);
its peak memory is the peak of the summed RSS of the process and its workers (sampled every
20 ms with psutil). The 1- and 2-worker runs read the corpus repeated ``scale`` times; a last
run on the corpus once shows that memory does not grow with the input. Prints a table and writes
JSON (``tokens_per_s``, ``speedup_2_vs_1``, ``peak_rss_mb``, identical outputs). ``hf``: the
same 1- and 2-worker runs, side by side, with a Hugging Face ``tokenizer.json`` (a byte-level
BPE of the same vocabulary size trained on the corpus, ``data_prep.hf_bpe``), compared on
input bytes per second (the two tokenizers cut the same text into different token counts).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from data_prep.default import KIND_TO_CORPUS, prepare_default
from mlsys.atomic import atomic_path
from mlsys.data.manifest import sha256_file, write_manifest


def _run_shards(args: list[str]) -> tuple[float, float]:
    """(wall seconds, peak summed RSS in MB) of one shards process."""
    import psutil

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "data_prep", "shards", "--quiet", *args],
                            stdout=subprocess.DEVNULL)
    ps, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            rss = sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)])
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"shards {args} exited {proc.returncode}")
    return wall, peak / 2**20


def run_bench(out_dir: str, kind: str = "causal", vocab_size: int = 4096, scale: int = 3,
              json_path: str | None = "runs/bench/data_prep.json", hf: bool = False) -> dict:
    prep = prepare_default(out_dir, kind, vocab_size=vocab_size, workers=2)
    corpus = os.path.join(out_dir, kind, f"stdlib_{KIND_TO_CORPUS[kind]}.jsonl")
    flags = ["--split-sentences"] if kind == "masked" else ["--append-eod"]
    tok = prep["tokenizer_dir"]
    runs = []
    inputs = {1: [corpus]}
    if scale > 1:
        big = os.path.join(out_dir, f"bench_x{scale}.jsonl")
        if not os.path.exists(big):
            with atomic_path(big) as tmp, open(tmp, "wb") as out:
                for _ in range(scale):
                    with open(corpus, "rb") as f:
                        out.write(f.read())
        inputs[scale] = [big]
    # the throughput pair runs on the big input (process start-up amortised); the last run,
    # on the corpus once, shows memory does not grow with input size
    plan = [(1, scale, tok), (2, scale, tok)] + ([(2, 1, tok)] if scale > 1 else [])
    if hf:
        from data_prep.hf_bpe import train_byte_level_bpe

        hf_tok = os.path.join(out_dir, f"hf_bpe_{kind}_{vocab_size}")
        if not os.path.exists(os.path.join(hf_tok, "tokenizer_config.json")):
            train_byte_level_bpe([corpus], vocab_size, hf_tok)
        plan += [(1, scale, hf_tok), (2, scale, hf_tok)]
    for workers, s, tokenizer in plan:
        tag = "" if tokenizer == tok else "_hf"
        prefix = os.path.join(out_dir, f"bench_w{workers}_x{s}{tag}")
        wall, rss = _run_shards(["--input", *inputs[s], "--tokenizer", tokenizer, "--out",
                                 prefix, "--workers", str(workers), *flags])
        with open(prefix + ".manifest.json", encoding="utf-8") as f:
            tokens = json.load(f)["num_tokens"]
        size = sum(os.path.getsize(p) for p in inputs[s])
        runs.append({"tokenizer": "tokenizer.json" if tag else "sentencepiece",
                     "workers": workers, "input_scale": s, "tokens": tokens,
                     "seconds": round(wall, 3), "tokens_per_s": round(tokens / wall),
                     "input_mb_per_s": round(size / wall / 2**20, 3),
                     "peak_rss_mb": round(rss, 1), "bin_sha256": sha256_file(prefix + ".bin")})
        print(f"{runs[-1]['tokenizer']:<14} workers {workers}  input x{s}  {tokens:>11,} tokens "
              f"{wall:7.2f} s  {tokens / wall:>12,.0f} tok/s  {size / wall / 2**20:6.2f} MB/s  "
              f"peak RSS {rss:7.1f} MB", flush=True)
    result = {
        "kind": kind, "vocab_size": vocab_size, "cpus": len(os.sched_getaffinity(0)), "runs": runs,
        "speedup_2_vs_1": round(runs[1]["tokens_per_s"] / runs[0]["tokens_per_s"], 3),
        "identical_1_vs_2_workers": runs[0]["bin_sha256"] == runs[1]["bin_sha256"],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }
    if hf:
        sp, js = runs[:2], runs[-2:]
        result["tokenizer_json_vs_sentencepiece_bytes_per_s"] = {
            f"{w} workers": round(j["input_mb_per_s"] / s["input_mb_per_s"], 3)
            for w, s, j in zip((1, 2), sp, js, strict=True)}
        result["tokenizer_json_identical_1_vs_2_workers"] = \
            js[0]["bin_sha256"] == js[1]["bin_sha256"]
        print(f"tokenizer.json / sentencepiece, input bytes/s: "
              f"{result['tokenizer_json_vs_sentencepiece_bytes_per_s']}")
    print(f"speedup 2 vs 1 workers: {result['speedup_2_vs_1']:.2f}x   "
          f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        write_manifest(json_path, result)
    return result
