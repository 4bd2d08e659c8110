"""``python -m data_prep {corpus,prepare,tokenizer,shards,bench,images}`` — see ``--help`` of each.

Exit codes: 0 done, 2 bad input under ``--strict`` / no usable input, 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from data_prep.inputs import BadInput


def _corpus(a: argparse.Namespace) -> dict:
    from data_prep.corpus import write_corpus

    meta = write_corpus(a.out, a.kind, a.limit, a.source)
    return {k: v for k, v in meta.items() if k != "distributions"}


def _prepare(a: argparse.Namespace) -> dict:
    import time

    t0 = time.perf_counter()
    if a.kind == "vision":
        from data_prep.images import prepare_default_images

        out = prepare_default_images(a.out, a.image_size)
    else:
        from data_prep.default import prepare_default

        out = prepare_default(a.out, a.kind, a.vocab_size, a.workers, a.source)
    return {**out, "seconds": round(time.perf_counter() - t0, 1)}


def _tokenizer(a: argparse.Namespace) -> dict:
    from data_prep.tokenizer import train_tokenizer

    meta = train_tokenizer(a.input, a.vocab_size, a.out, a.model_type, a.json_key, a.strict,
                           overwrite=a.overwrite)
    return {k: meta[k] for k in ("vocab_size", "model_type", "model_sha256", "ids", "problems")}


def _shards(a: argparse.Namespace) -> dict:
    from data_prep.shards import build_shards

    m = build_shards(a.input, a.tokenizer, a.out, a.workers, a.split_sentences, a.json_key,
                     a.append_eod, a.strict, progress=not a.quiet, overwrite=a.overwrite)
    return {k: m[k] for k in ("num_documents", "num_sequences", "num_tokens", "problems")}


def _bench(a: argparse.Namespace) -> dict:
    from data_prep.bench import run_bench

    return run_bench(a.out, a.kind, a.vocab_size, a.scale, a.json, a.hf)


def _images(a: argparse.Namespace) -> dict:
    from data_prep.images import build_images

    m = build_images(a.input, a.out, a.image_size, image_column=a.image_column,
                     label_column=a.label_column, hflip=not a.no_hflip, strict=a.strict,
                     shard_size=a.shard_size, progress=not a.quiet)
    return {k: m[k] for k in ("num_images", "num_classes", "image_size", "problems")}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m data_prep", description=(
        "Corpus -> sentencepiece tokenizer -> megatron-core indexed shards (.bin/.idx)."))
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("corpus", help="write the embedded default corpus (Python stdlib)")
    c.add_argument("--out", required=True, help="directory; writes <source>_<kind>.jsonl")
    c.add_argument("--source", choices=["stdlib", "packages", "packages-mixed"],
                   default="stdlib", help="stdlib: the standard library; packages: it plus "
                   "site-packages; packages-mixed: the same, kind mixed")
    c.add_argument("--kind", choices=["prose", "code", "mixed"], default="prose",
                   help="prose: docstrings and comments (BERT); code: module sources (GPT); "
                   "mixed: prose, then the module's code one line a paragraph (BERT, long)")
    c.add_argument("--limit", type=int, default=None, help="first N modules only (tests)")
    c.set_defaults(fn=_corpus)

    pr = sub.add_parser("prepare", help="corpus -> tokenizer -> shards, as a run prepares them "
                        "(vision: the digits image shards); prints the paths as JSON")
    pr.add_argument("--out", default="data/default", help="a run's data.prepare_dir")
    pr.add_argument("--kind", choices=["causal", "masked", "vision"], required=True)
    pr.add_argument("--source", choices=["stdlib", "packages", "packages-mixed"],
                    default="stdlib", help="packages-mixed: masked only, prose and code")
    pr.add_argument("--vocab-size", type=int, default=4096)
    pr.add_argument("--workers", type=int, default=2, help="tokenizer processes")
    pr.add_argument("--image-size", type=int, default=32, help="vision: square side")
    pr.set_defaults(fn=_prepare)

    t = sub.add_parser("tokenizer", help="train a sentencepiece tokenizer")
    t.add_argument("--input", nargs="+", required=True,
                   help="text/jsonl(.gz/.zst)/parquet files, saved HF dataset dirs, globs")
    t.add_argument("--vocab-size", type=int, required=True)
    t.add_argument("--out", required=True, help="output directory")
    t.add_argument("--model-type", choices=["bpe", "unigram"], default="bpe")
    t.add_argument("--json-key", default="text", help="jsonl key / parquet column")
    t.add_argument("--strict", action="store_true", help="first bad input is fatal (exit 2)")
    t.add_argument("--overwrite", action="store_true",
                   help="replace a tokenizer data_prep wrote in --out (other files stay)")
    t.set_defaults(fn=_tokenizer)

    s = sub.add_parser("shards", help="tokenize into megatron-core indexed datasets")
    s.add_argument("--input", nargs="+", required=True,
                   help="text/jsonl(.gz/.zst)/parquet files, saved HF dataset dirs, globs")
    s.add_argument("--tokenizer", required=True,
                   help="directory written by `tokenizer`, or a Hugging Face tokenizer "
                        "directory (tokenizer.json and tokenizer_config.json naming eos)")
    s.add_argument("--out", required=True, help="output prefix: PREFIX.bin/.idx/.manifest.json")
    s.add_argument("--workers", type=int, default=2, help="tokenizer processes (0: in-process)")
    s.add_argument("--split-sentences", action="store_true",
                   help="one sequence per sentence (BERT)")
    s.add_argument("--json-key", default="text", help="jsonl key / parquet column")
    s.add_argument("--append-eod", action="store_true", help="end each document with eod (GPT)")
    s.add_argument("--strict", action="store_true", help="first bad input is fatal (exit 2)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--overwrite", action="store_true",
                   help="replace shards data_prep wrote at --out")
    s.set_defaults(fn=_shards)

    b = sub.add_parser("bench", help="tokens/s with 1 and 2 workers on the default corpus")
    b.add_argument("--out", default="data/bench", help="work directory")
    b.add_argument("--kind", choices=["causal", "masked"], default="causal")
    b.add_argument("--vocab-size", type=int, default=4096)
    b.add_argument("--scale", type=int, default=3,
                   help="the 1/2-worker runs read the corpus repeated this many times")
    b.add_argument("--json", default="runs/bench/data_prep.json", help="result file")
    b.add_argument("--hf", action="store_true",
                   help="also a Hugging Face tokenizer.json (byte-level BPE), side by side")
    b.set_defaults(fn=_bench)
    im = sub.add_parser("images", help="image folder or parquet -> uint8 image shards")
    im.add_argument("--input", nargs="+", required=True,
                    help="a folder with one sub-folder per class, or parquet files/globs")
    im.add_argument("--out", required=True, help="output prefix: PREFIX-NNNNN.*.npy + manifest")
    im.add_argument("--image-size", type=int, default=224, help="square side after resize+crop")
    im.add_argument("--image-column", default="image", help="parquet: encoded image bytes")
    im.add_argument("--label-column", default="label", help="parquet: int or string label")
    im.add_argument("--no-hflip", action="store_true",
                    help="record that horizontal flips change the label (no flip augmentation)")
    im.add_argument("--shard-size", type=int, default=8192, help="images per shard file")
    im.add_argument("--strict", action="store_true", help="first bad image is fatal (exit 2)")
    im.add_argument("--quiet", action="store_true", help="no progress bar")
    im.set_defaults(fn=_images)
    return p


def _exit_on_signal(signum: int, frame: object) -> None:
    """SIGTERM/SIGINT end the command through its cleanup: temp files removed, finished
    outputs untouched."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _exit_on_signal)
    try:
        result = args.fn(args)
    except BadInput as e:
        print(f"error: bad input: {e}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
