"""Input files -> raw records -> validated document text.

Formats (chosen by extension): ``.jsonl``/``.ndjson``/``.json`` (one JSON object a line),
``.parquet`` (read in record batches, never whole), anything else plain text (a blank line
separates documents). Globs are expanded in sorted order.

Readers run in the main process and only cut files into :class:`Record` s (cheap, streaming);
:func:`parse_record` runs in the tokenizer workers and turns a record into text or a
:class:`Problem`. Every record and problem names its file and 1-based line (row for parquet;
line 0 for a whole-file problem), so nothing bad passes silently.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

PROBLEM_KINDS = (
    "bad_json",  # a line that is not a JSON object
    "missing_key",  # the JSON key / parquet column is absent or null
    "bad_type",  # the value is not a string
    "bad_utf8",  # bytes that are not UTF-8 (or a lone surrogate escape)
    "empty_document",  # only whitespace
    "empty_input",  # a file with no documents at all
)
PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Problem:
    """One piece of bad input, with where it is."""

    kind: str
    file: str
    line: int
    detail: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.kind}: {self.detail}"

    def to_dict(self) -> dict:
        return asdict(self)


class BadInput(Exception):
    """Raised for the first problem under ``--strict`` (CLI exit code 2)."""

    def __init__(self, problem: Problem):
        super().__init__(str(problem))
        self.problem = problem


@dataclass(frozen=True)
class Record:
    """One unparsed document: ``raw`` is bytes (text/jsonl), str/bytes/None (parquet value)."""

    file: str
    line: int
    fmt: str
    raw: bytes | str | None


def expand_inputs(patterns: Iterable[str]) -> list[str]:
    """Expand globs (sorted, duplicates dropped); raise FileNotFoundError if one matches nothing."""
    out: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if os.path.exists(m)]
        if not matches:
            raise FileNotFoundError(f"input {pattern!r} matches no file")
        out.extend(m for m in matches if m not in out)
    return out


def detect_format(path: str) -> str:
    """``jsonl`` | ``parquet`` | ``text`` from the file name."""
    lower = path.lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith(".parquet"):
        return "parquet"
    return "text"


def read_records(path: str, json_key: str = "text") -> Iterator[Record | Problem]:
    """Stream the records of one file; a file-level problem is yielded as a Problem."""
    fmt = detect_format(path)
    if fmt == "parquet":
        yield from _read_parquet(path, json_key)
        return
    with open(path, "rb") as f:
        if fmt == "jsonl":
            for lineno, line in enumerate(f, 1):
                if not line.isspace():
                    yield Record(path, lineno, fmt, line)
            return
        doc: list[bytes] = []
        start = 0
        for lineno, line in enumerate(f, 1):
            if not line.isspace():
                if not doc:
                    start = lineno
                doc.append(line)
            elif doc:
                yield Record(path, start, fmt, b"".join(doc))
                doc = []
        if doc:
            yield Record(path, start, fmt, b"".join(doc))


def _read_parquet(path: str, column: str) -> Iterator[Record | Problem]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    if column not in pf.schema_arrow.names:
        yield Problem("missing_key", path, 0, f"no column {column!r} (has {pf.schema_arrow.names})")
        return
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=[column]):
        for value in batch.column(0).to_pylist():
            row += 1
            yield Record(path, row, "parquet", value)


def _decode(raw: bytes, rec: Record) -> str | Problem:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Problem("bad_utf8", rec.file, rec.line, f"byte {e.start}: {e.reason}")


def parse_record(rec: Record, json_key: str = "text") -> str | Problem:
    """Validate one record; return its document text or the Problem it has."""
    raw = rec.raw
    if rec.fmt == "jsonl":
        line = _decode(raw, rec)
        if isinstance(line, Problem):
            return line
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            return Problem("bad_json", rec.file, rec.line, f"column {e.colno}: {e.msg}")
        if not isinstance(obj, dict):
            return Problem("bad_json", rec.file, rec.line, f"not an object: {type(obj).__name__}")
        if obj.get(json_key) is None:
            return Problem("missing_key", rec.file, rec.line, f"no key {json_key!r}")
        raw = obj[json_key]
        if not isinstance(raw, str):
            return Problem("bad_type", rec.file, rec.line,
                           f"{json_key!r} is {type(raw).__name__}, not a string")
    elif rec.fmt == "parquet" and raw is None:
        return Problem("missing_key", rec.file, rec.line, f"null {json_key!r}")
    if isinstance(raw, bytes):
        raw = _decode(raw, rec)
        if isinstance(raw, Problem):
            return raw
        if rec.fmt == "text" and raw.endswith("\n"):
            raw = raw[:-1]
    if not isinstance(raw, str):
        return Problem("bad_type", rec.file, rec.line, f"value is {type(raw).__name__}")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError as e:
        return Problem("bad_utf8", rec.file, rec.line, f"char {e.start}: {e.reason}")
    if not raw.strip():
        return Problem("empty_document", rec.file, rec.line, "document is only whitespace")
    return raw


class ProblemLog:
    """Counts problems by kind, keeps the first ``keep`` of them, and makes the first fatal
    when ``strict``. ``report()`` prints a summary (each kept problem with file and line)."""

    def __init__(self, strict: bool = False, keep: int = 1000):
        self.strict = strict
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.problems: list[Problem] = []

    def add(self, problem: Problem) -> None:
        if self.strict:
            raise BadInput(problem)
        self.counts[problem.kind] = self.counts.get(problem.kind, 0) + 1
        if len(self.problems) < self.keep:
            self.problems.append(problem)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def report(self, stream=None) -> None:
        import sys

        stream = stream or sys.stderr
        if not self.total:
            return
        summary = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        print(f"skipped bad input ({summary}):", file=stream)
        for p in self.problems:
            print(f"  {p}", file=stream)
        if self.total > len(self.problems):
            print(f"  ... and {self.total - len(self.problems)} more", file=stream)

    def to_dict(self) -> dict:
        return {"counts": dict(sorted(self.counts.items())),
                "first": [p.to_dict() for p in self.problems]}


def iter_documents(paths: Iterable[str], json_key: str, log: ProblemLog) -> Iterator[Record]:
    """All records of all files in order; file-level problems (and empty files) go to ``log``."""
    for path in paths:
        n = 0
        for item in read_records(path, json_key):
            if isinstance(item, Problem):
                log.add(item)
                n += 1
                continue
            n += 1
            yield item
        if n == 0:
            log.add(Problem("empty_input", path, 0, "no documents"))
