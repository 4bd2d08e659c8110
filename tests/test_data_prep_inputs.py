"""Bad input is counted and reported with file and line, fatal under --strict, never silent."""

from __future__ import annotations

import json
import os

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
