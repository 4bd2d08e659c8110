"""Bad input is counted and reported with file and line, fatal under --strict, never silent."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess

import pytest

from data_prep.__main__ import main
from data_prep.inputs import Problem, ProblemLog, expand_inputs, iter_documents, parse_record
from mlsys.data.indexed import check_complete

GOOD = b'{"text": "a good document."}\n'

# (file name, bytes, problem kind, line of the problem)
BAD_CASES = [
    ("bad.jsonl", GOOD + b'{"text": "unterminated\n' + GOOD, "bad_json", 2),
    ("list.jsonl", GOOD + b'["not", "an", "object"]\n', "bad_json", 2),
    ("nokey.jsonl", GOOD + GOOD + b'{"body": "x"}\n', "missing_key", 3),
    ("null.jsonl", b'{"text": null}\n' + GOOD, "missing_key", 1),
    ("type.jsonl", GOOD + b'{"text": 42}\n', "bad_type", 2),
    ("utf8.jsonl", GOOD + b'{"text": "caf\xe9"}\n', "bad_utf8", 2),
    ("surrogate.jsonl", GOOD + b'{"text": "half \\ud800 pair"}\n', "bad_utf8", 2),
    ("empty_doc.jsonl", GOOD + b'{"text": " \\n\\t "}\n', "empty_document", 2),
    ("utf8.txt", b"first doc\n\nsecond \xff\xfe doc\nline two\n\nthird\n", "bad_utf8", 3),
    ("empty.txt", b"", "empty_input", 0),
]


def _shards_args(tmp_path, name: str, content: bytes, tokenizer_dir: str) -> tuple[list, str]:
    path = tmp_path / name
    path.write_bytes(content)
    other = tmp_path / "other.jsonl"
    other.write_bytes(GOOD)
    prefix = str(tmp_path / "out")
    return ["shards", "--input", str(path), str(other), "--tokenizer", tokenizer_dir,
            "--out", prefix, "--workers", "0", "--quiet"], prefix


@pytest.mark.parametrize("name,content,kind,line", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_bad_input_is_counted_and_reported(tmp_path, capsys, gpt_data, name, content, kind, line):
    args, prefix = _shards_args(tmp_path, name, content, gpt_data["tokenizer_dir"])
    assert main(args) == 0
    manifest = check_complete(prefix)
    problems = manifest["problems"]
    assert problems["counts"] == {kind: 1}
    first = problems["first"][0]
    assert (first["kind"], first["line"], os.path.basename(first["file"])) == (kind, line, name)
    valid = content.count(GOOD) + (2 if name == "utf8.txt" else 0) + 1  # + other.jsonl
    assert manifest["num_documents"] == valid
    assert f"{name}:{line}: {kind}" in capsys.readouterr().err


@pytest.mark.parametrize("name,content,kind,line", BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_strict_makes_first_problem_fatal(tmp_path, capsys, gpt_data, name, content, kind, line):
    args, prefix = _shards_args(tmp_path, name, content, gpt_data["tokenizer_dir"])
    assert main([*args, "--strict"]) == 2
    assert f"{name}:{line}: {kind}" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == sorted([name, "other.jsonl"])  # nothing written


def test_tokenizer_strict_and_lenient(tmp_path, capsys):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(GOOD * 50 + b'{"text": 1}\n')
    assert main(["tokenizer", "--input", str(path), "--vocab-size", "300", "--out",
                 str(tmp_path / "tok"), "--strict"]) == 2
    assert not (tmp_path / "tok").exists()
    assert "mixed.jsonl:51: bad_type" in capsys.readouterr().err
    assert main(["tokenizer", "--input", str(path), "--vocab-size", "300", "--out",
                 str(tmp_path / "tok")]) == 0
    meta = json.loads((tmp_path / "tok" / "tokenizer_meta.json").read_text())
    assert meta["problems"]["counts"] == {"bad_type": 1}


def test_only_bad_input_writes_nothing(tmp_path, gpt_data):
    args, prefix = _shards_args(tmp_path, "bad.jsonl", b"{oops\n", gpt_data["tokenizer_dir"])
    args[args.index(str(tmp_path / "other.jsonl"))] = str(tmp_path / "bad.jsonl")
    assert main(args) == 2
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "other.jsonl"]


def test_missing_input_is_an_error(tmp_path, gpt_data):
    assert main(["shards", "--input", str(tmp_path / "nope*.jsonl"), "--tokenizer",
                 gpt_data["tokenizer_dir"], "--out", str(tmp_path / "o")]) == 2


def test_text_documents_globs_and_parquet_batches(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "b.txt").write_text("doc one\nstill one\n\n\n  \ndoc two\n")
    (tmp_path / "a.txt").write_text("first file\n")
    rows = [f"row {i}" for i in range(2500)]
    rows[1234] = None
    pq.write_table(pa.table({"text": rows, "n": list(range(2500))}), tmp_path / "c.parquet",
                   row_group_size=700)
    paths = expand_inputs([str(tmp_path / "*.txt"), str(tmp_path / "c.parquet")])
    assert [os.path.basename(p) for p in paths] == ["a.txt", "b.txt", "c.parquet"]
    log = ProblemLog()
    parsed = [(os.path.basename(r.file), r.line, parse_record(r))
              for r in iter_documents(paths, "text", log)]
    assert parsed[:3] == [("a.txt", 1, "first file"), ("b.txt", 1, "doc one\nstill one"),
                          ("b.txt", 6, "doc two")]
    pq_docs = parsed[3:]
    assert len(pq_docs) == 2500 and pq_docs[0] == ("c.parquet", 1, "row 0")
    assert pq_docs[1234][2] == Problem("missing_key", str(tmp_path / "c.parquet"), 1235,
                                       "null 'text'")
    assert pq_docs[-1] == ("c.parquet", 2500, "row 2499")
    missing_col = list(iter_documents([str(tmp_path / "c.parquet")], "body", log))
    assert missing_col == [] and log.counts == {"missing_key": 1}


# ---- compressed jsonl/text, parquet by content, Hugging Face save_to_disk directories -------

def _docs(paths: list[str], key: str = "text") -> tuple[list, ProblemLog]:
    """``(file name, line, text or Problem)`` of every record, and the file-level problems."""
    log = ProblemLog()
    return [(os.path.basename(r.file), r.line, parse_record(r, key))
            for r in iter_documents(paths, key, log)], log


def test_gzip_is_found_by_its_bytes_and_read_line_by_line(tmp_path):
    import gzip

    from data_prep.inputs import detect_input

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(GOOD + b'{"text": "two"}\n\n' + GOOD))
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"doc one\nstill one\n\ndoc two\n"))
    (tmp_path / "c.jsonl").write_bytes(gzip.compress(b'{"text": "named plain, is gzip"}\n'))
    paths = [str(tmp_path / n) for n in ("a.jsonl.gz", "b.txt.gz", "c.jsonl")]
    assert [detect_input(p) for p in paths] == [("jsonl", "gzip"), ("text", "gzip"),
                                                ("jsonl", "gzip")]
    docs, log = _docs(paths)
    assert docs == [("a.jsonl.gz", 1, "a good document."), ("a.jsonl.gz", 2, "two"),
                    ("a.jsonl.gz", 4, "a good document."), ("b.txt.gz", 1, "doc one\nstill one"),
                    ("b.txt.gz", 4, "doc two"), ("c.jsonl", 1, "named plain, is gzip")]
    assert log.total == 0


def test_truncated_gzip_is_a_problem_at_the_line_reading_stopped(tmp_path):
    import gzip

    body = b"".join(b'{"text": "document %d"}\n' % i for i in range(2000))
    blob = gzip.compress(body)
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    good, log = _docs([str(path)])
    assert good == [("cut.jsonl.gz", i + 1, f"document {i}") for i in range(len(good))]
    assert 0 < len(good) < 2000  # every whole line before the cut, in order
    assert log.counts == {"bad_compression": 1}
    (problem,) = log.problems
    assert (problem.kind, problem.file, problem.line) == ("bad_compression", str(path),
                                                          len(good) + 1)
    assert problem.detail.startswith("gzip data ends or breaks here (Compressed file ended")


GZ_CASES = [c for c in BAD_CASES if c[0].endswith(".jsonl")]


@pytest.mark.parametrize("name,content,kind,line", GZ_CASES, ids=[c[0] for c in GZ_CASES])
def test_compressed_jsonl_problems_name_file_and_line(tmp_path, capsys, gpt_data, name, content,
                                                      kind, line):
    import gzip

    name += ".gz"
    args, prefix = _shards_args(tmp_path, name, gzip.compress(content),
                                gpt_data["tokenizer_dir"])
    assert main(args) == 0
    problems = check_complete(prefix)["problems"]
    assert problems["counts"] == {kind: 1}
    first = problems["first"][0]
    assert (first["kind"], first["line"], os.path.basename(first["file"])) == (kind, line, name)
    assert check_complete(prefix)["num_documents"] == content.count(GOOD) + 1
    assert f"{name}:{line}: {kind}" in capsys.readouterr().err
    assert main([*args, "--overwrite", "--strict"]) == 2
    assert f"{name}:{line}: {kind}" in capsys.readouterr().err


def test_parquet_by_content_and_a_false_parquet_name(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["p one", None, "p three"]}), tmp_path / "rows.data")
    docs, _ = _docs([str(tmp_path / "rows.data")])
    assert docs == [("rows.data", 1, "p one"),
                    ("rows.data", 2, Problem("missing_key", str(tmp_path / "rows.data"), 2,
                                             "null 'text'")),
                    ("rows.data", 3, "p three")]
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(GOOD)
    with pytest.raises(ValueError, match=r"fake\.parquet: not a parquet file"):
        _docs([str(fake)])
    assert main(["tokenizer", "--input", str(fake), "--vocab-size", "300", "--out",
                 str(tmp_path / "tok")]) == 2
    assert "fake.parquet: not a parquet file" in capsys.readouterr().err


def _zstd(data: bytes) -> bytes:
    """``data`` zstd-compressed by whichever is here: the module, else the program."""
    try:
        import zstandard
    except ImportError:
        return subprocess.run(["zstd", "-cq"], input=data, stdout=subprocess.PIPE,
                              check=True).stdout
    return zstandard.ZstdCompressor().compress(data)


@pytest.mark.skipif(shutil.which("zstd") is None and importlib.util.find_spec("zstandard")
                    is None, reason="neither the zstandard module nor the zstd program")
def test_zstd_is_read_line_by_line_and_a_truncated_file_is_reported(tmp_path):
    path = tmp_path / "docs.jsonl.zst"
    data = _zstd(GOOD + b'{"text": 3}\n' + b"".join(
        b'{"text": "document %d."}\n' % i for i in range(20000)))
    path.write_bytes(data)
    docs, _ = _docs([str(path)])
    assert docs[:2] == [("docs.jsonl.zst", 1, "a good document."),
                        ("docs.jsonl.zst", 2, Problem("bad_type", str(path), 2,
                                                      "'text' is int, not a string"))]
    assert docs[-1] == ("docs.jsonl.zst", 20002, "document 19999.") and len(docs) == 20002
    frames = tmp_path / "frames.jsonl.zst"  # two frames, as `cat a.zst b.zst` makes
    frames.write_bytes(_zstd(GOOD) + _zstd(b'{"text": "the second frame."}\n'))
    assert [d[2] for d in _docs([str(frames)])[0]] == ["a good document.", "the second frame."]
    cut = tmp_path / "cut.jsonl.zst"
    cut.write_bytes(data[: len(data) // 2])
    good, log = _docs([str(cut)])
    assert good[2:] == [("cut.jsonl.zst", i + 3, f"document {i}.") for i in range(len(good) - 2)]
    assert 2 < len(good) < 20002  # every whole line before the cut, in order
    (problem,) = log.problems
    assert (problem.kind, problem.file, problem.line) == ("bad_compression", str(cut),
                                                          len(good) + 1)


def test_zstd_without_a_reader_is_refused_naming_the_file(tmp_path, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_zstandard(name, *args, **kwargs):
        if name == "zstandard":
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_zstandard)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    path = tmp_path / "docs.jsonl.zst"
    path.write_bytes(b"\x28\xb5\x2f\xfd" + b"\x00" * 16)  # the magic is what is looked at
    with pytest.raises(ValueError, match=r"docs\.jsonl\.zst: zstd-compressed .* neither the "
                                         "'zstandard' module nor the zstd program"):
        _docs([str(path)])


def _save_to_disk(directory, shards: list[dict]) -> None:
    """What ``datasets.Dataset.save_to_disk`` writes: ``data-XXXXX-of-NNNNN.arrow`` Arrow IPC
    *streams* (schema metadata ``huggingface`` holding the features), ``state.json`` listing
    them in ``_data_files``, and ``dataset_info.json``."""
    import pyarrow as pa

    directory.mkdir()
    features = {"text": {"dtype": "string", "_type": "Value"},
                "n": {"dtype": "int64", "_type": "Value"}}
    schema = pa.schema([("text", pa.string()), ("n", pa.int64())],
                       metadata={"huggingface": json.dumps({"info": {"features": features}})})
    names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
    for name, columns in zip(names, shards, strict=True):
        with pa.OSFile(str(directory / name), "wb") as sink:
            with pa.ipc.new_stream(sink, schema) as writer:
                table = pa.table(columns, schema=schema)
                for batch in table.to_batches(max_chunksize=2):
                    writer.write_batch(batch)
    state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "0123abcd",
             "_format_columns": None, "_format_kwargs": {}, "_format_type": None,
             "_output_all_columns": False, "_split": "train"}
    (directory / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
    (directory / "dataset_info.json").write_text(json.dumps({"features": features}))


def test_a_saved_hugging_face_dataset_directory(tmp_path, gpt_data):
    from data_prep.inputs import detect_input

    ds = tmp_path / "saved"
    _save_to_disk(ds, [{"text": ["hf one", "hf two", None, "hf four", "  "], "n": [1, 2, 3, 4, 5]},
                       {"text": ["hf six"], "n": [6]}])
    assert detect_input(str(ds)) == ("hf_dataset", None)
    first, second = (str(ds / f"data-0000{i}-of-00002.arrow") for i in (0, 1))
    docs, log = _docs([str(ds)])
    assert docs == [
        ("data-00000-of-00002.arrow", 1, "hf one"), ("data-00000-of-00002.arrow", 2, "hf two"),
        ("data-00000-of-00002.arrow", 3, Problem("missing_key", first, 3, "null 'text'")),
        ("data-00000-of-00002.arrow", 4, "hf four"),
        ("data-00000-of-00002.arrow", 5, Problem("empty_document", first, 5,
                                                 "document is only whitespace")),
        ("data-00001-of-00002.arrow", 1, "hf six")]
    docs, _ = _docs([str(ds)], key="n")
    assert docs[-1] == ("data-00001-of-00002.arrow", 1,
                        Problem("bad_type", second, 1, "value is int"))
    docs, log = _docs([str(ds)], key="body")
    assert docs == [] and log.problems == [
        Problem("missing_key", p, 0, "no column 'body' (has ['text', 'n'])")
        for p in (first, second)]
    prefix = str(tmp_path / "out")
    assert main(["shards", "--input", str(ds), "--tokenizer", gpt_data["tokenizer_dir"],
                 "--out", prefix, "--workers", "0", "--quiet"]) == 0
    manifest = check_complete(prefix)
    assert manifest["num_documents"] == 4
    assert manifest["problems"]["counts"] == {"empty_document": 1, "missing_key": 1}


def test_directories_that_are_not_a_saved_dataset_are_refused(tmp_path):
    (tmp_path / "plain").mkdir()
    with pytest.raises(ValueError, match=r"plain: a directory, but not a Hugging Face dataset"):
        _docs([str(tmp_path / "plain")])
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text('{"splits": ["train"]}')
    with pytest.raises(ValueError, match=r"dd: a saved DatasetDict; give one split"):
        _docs([str(tmp_path / "dd")])
    ds = tmp_path / "escape"
    _save_to_disk(ds, [{"text": ["x"], "n": [1]}])
    (ds / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../x.arrow"}]}))
    with pytest.raises(ValueError, match=r"'\.\./x\.arrow' is not a plain file name"):
        _docs([str(ds)])
