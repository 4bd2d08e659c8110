"""Throughput benchmark: tokens/s of ``shards`` with 1 and 2 workers on the default corpus.

Each run is a separate ``python -m data_prep shards`` process (wall time includes its start-up);
its peak memory is the peak of the summed RSS of the process and its workers (sampled every
20 ms with psutil). The 1- and 2-worker runs read the corpus repeated ``scale`` times; a last
run on the corpus once shows that memory does not grow with the input. Prints a table and writes
JSON (``tokens_per_s``, ``speedup_2_vs_1``, ``peak_rss_mb``, identical outputs).
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
              json_path: str | None = "runs/bench/data_prep.json") -> dict:
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
    plan = [(1, scale), (2, scale)] + ([(2, 1)] if scale > 1 else [])
    for workers, s in plan:
        prefix = os.path.join(out_dir, f"bench_w{workers}_x{s}")
        wall, rss = _run_shards(["--input", *inputs[s], "--tokenizer", tok, "--out", prefix,
                                 "--workers", str(workers), *flags])
        with open(prefix + ".manifest.json", encoding="utf-8") as f:
            tokens = json.load(f)["num_tokens"]
        runs.append({"workers": workers, "input_scale": s, "tokens": tokens,
                     "seconds": round(wall, 3), "tokens_per_s": round(tokens / wall),
                     "peak_rss_mb": round(rss, 1), "bin_sha256": sha256_file(prefix + ".bin")})
        print(f"workers {workers}  input x{s}  {tokens:>11,} tokens  {wall:7.2f} s  "
              f"{tokens / wall:>12,.0f} tok/s  peak RSS {rss:7.1f} MB", flush=True)
    result = {
        "kind": kind, "vocab_size": vocab_size, "cpus": len(os.sched_getaffinity(0)), "runs": runs,
        "speedup_2_vs_1": round(runs[1]["tokens_per_s"] / runs[0]["tokens_per_s"], 3),
        "identical_1_vs_2_workers": runs[0]["bin_sha256"] == runs[1]["bin_sha256"],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
    }
    print(f"speedup 2 vs 1 workers: {result['speedup_2_vs_1']:.2f}x   "
          f"peak RSS {result['peak_rss_mb']:.0f} MB")
    if json_path:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        write_manifest(json_path, result)
    return result
