"""Input files -> raw records -> validated document text.

Formats: ``.jsonl``/``.ndjson``/``.json`` (one JSON object a line), parquet (read in record
batches, never whole), a Hugging Face ``datasets`` directory written by ``save_to_disk``
(``state.json`` naming its ``data-*.arrow`` files, Arrow IPC streams read a batch at a time with
pyarrow; no ``datasets`` import) or a single ``.arrow`` file, anything else plain text (a blank
line separates documents). Content decides before the name (:func:`detect_input`): a file
starting ``PAR1`` is parquet, one starting ``1f 8b`` is gzip and one starting ``28 b5 2f fd``
zstd (read through ``zstandard`` when it is importable, else through the ``zstd`` program,
``zstd -dc``, when it is on the PATH, else refused naming the file), decompressed as a stream;
the name without ``.gz``/``.zst`` then says jsonl or text. Globs are expanded in sorted order.

Readers run in the main process and only cut files into :class:`Record` s (cheap, streaming);
:func:`parse_record` runs in the tokenizer workers and turns a record into text or a
:class:`Problem`. Every record and problem names its file and 1-based line (row for parquet;
line 0 for a whole-file problem), so nothing bad passes silently; for compressed files the
line is the decompressed line. Compressed data that ends early or is corrupt is a
``bad_compression`` problem at the line where reading stopped.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

PROBLEM_KINDS = (
    "bad_json",  # a line that is not a JSON object
    "missing_key",  # the JSON key / parquet column is absent or null
    "bad_type",  # the value is not a string
    "bad_utf8",  # bytes that are not UTF-8 (or a lone surrogate escape)
    "empty_document",  # only whitespace
    "empty_input",  # a file with no documents at all
    "bad_compression",  # gzip/zstd data that is truncated or corrupt (reading stops there)
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


GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
HF_STATE = "state.json"  # what marks a ``save_to_disk`` directory


def _format_by_name(name: str) -> str:
    lower = name.lower()
    if lower.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lower.endswith(".parquet"):
        return "parquet"
    if lower.endswith(".arrow"):
        return "arrow"
    return "text"


def detect_input(path: str) -> tuple[str, str | None]:
    """``(format, compression)`` of an input: format ``jsonl`` | ``parquet`` | ``arrow`` (one
    IPC file) | ``hf_dataset`` (a ``save_to_disk`` directory) | ``text``; compression ``gzip``
    | ``zstd`` | None. By content first (magic bytes of a regular file; a directory holding
    ``state.json``), then by name (a FIFO or pipe is never read ahead). ValueError (naming
    the path) for a directory that is not a saved dataset."""
    if os.path.isdir(path):
        if os.path.isfile(os.path.join(path, HF_STATE)):
            return "hf_dataset", None
        if os.path.isfile(os.path.join(path, "dataset_dict.json")):
            raise ValueError(f"{path}: a saved DatasetDict; give one split's directory "
                             f"(e.g. {os.path.join(path, 'train')})")
        raise ValueError(f"{path}: a directory, but not a Hugging Face dataset saved with "
                         f"save_to_disk (no {HF_STATE})")
    head = b""
    if os.path.isfile(path):  # a pipe or FIFO is not read ahead: that would consume its data
        with open(path, "rb") as f:
            head = f.read(6)
    if head.startswith(PARQUET_MAGIC):
        return "parquet", None
    if head.startswith(ARROW_FILE_MAGIC):
        return "arrow", None
    name = path
    compression = None
    if head.startswith(GZIP_MAGIC):
        compression = "gzip"
    elif head.startswith(ZSTD_MAGIC):
        compression = "zstd"
    if compression is not None:
        lower = name.lower()
        for ext in (".gz", ".gzip", ".zst", ".zstd"):
            if lower.endswith(ext):
                name = name[: -len(ext)]
                break
        fmt = _format_by_name(name)
        if fmt in ("parquet", "arrow"):
            raise ValueError(f"{path}: {compression}-compressed {fmt} is not supported; "
                             "decompress it first")
        return fmt, compression
    fmt = _format_by_name(name)
    if fmt == "parquet":
        raise ValueError(f"{path}: not a parquet file (it does not start with PAR1)")
    return fmt, None


def detect_format(path: str) -> str:
    """The record format of :func:`detect_input` (``jsonl`` | ``parquet`` | ``arrow`` |
    ``hf_dataset`` | ``text``)."""
    return detect_input(path)[0]


class ZstdProgramError(EOFError):
    """zstd data that is truncated or corrupt (the program's exit, or the module's frame)."""


def _whole_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines of a stream of byte chunks; a last line without its newline comes last."""
    tail = b""
    for chunk in chunks:
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            yield line + b"\n"
    if tail:
        yield tail


class _ZstdModule:
    """The lines of a zstd file through the ``zstandard`` module, frame after frame; data that
    ends inside a frame raises ``ZstdProgramError`` (its whole lines before come first)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "rb")

    def _chunks(self) -> Iterator[bytes]:
        import zstandard

        dobj, pending = zstandard.ZstdDecompressor().decompressobj(), b""
        while True:
            data = pending or self.file.read(1 << 20)
            pending = b""
            if not data:
                break
            try:
                out = dobj.decompress(data)
            except zstandard.ZstdError as err:
                raise ZstdProgramError(str(err)) from None
            if out:
                yield out
            if dobj.eof:  # the frame ended: what follows is the next frame
                pending, dobj = dobj.unused_data, zstandard.ZstdDecompressor().decompressobj()
                if not pending:
                    pending = self.file.read(1 << 20)
                    if not pending:
                        return
        raise ZstdProgramError("the data ends inside a frame")

    def __iter__(self) -> Iterator[bytes]:
        yield from _whole_lines(self._chunks())  # a cut line is never yielded: the error is

    def __enter__(self) -> _ZstdModule:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


class _ZstdProgram:
    """The lines ``zstd -dc -- PATH`` writes, as a context manager; at the end of its output
    a non-zero exit raises ``ZstdProgramError`` with its message. Leaving early ends it."""

    def __init__(self, program: str, path: str) -> None:
        import subprocess

        self.proc = subprocess.Popen([program, "-dcq", "--", path], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    def __iter__(self) -> Iterator[bytes]:
        tail = b""  # a last line without its newline: kept back until the exit says it is whole
        for line in self.proc.stdout:
            if line.endswith(b"\n"):
                yield line
            else:
                tail = line
        err = self.proc.stderr.read().decode("utf-8", "replace").strip()
        if self.proc.wait():
            raise ZstdProgramError(err.splitlines()[-1] if err else f"exit {self.proc.returncode}")
        if tail:
            yield tail

    def __enter__(self) -> _ZstdProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


def _open_binary(path: str, compression: str | None
                 ) -> io.BufferedIOBase | _ZstdProgram | _ZstdModule:
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            import shutil

            program = shutil.which("zstd")
            if program is not None:
                return _ZstdProgram(program, path)
            raise ValueError(f"{path}: zstd-compressed (starts 28 b5 2f fd), but neither the "
                             "'zstandard' module nor the zstd program is installed here; "
                             "decompress it first or give a .gz/.jsonl file") from None
        del zstandard
        return _ZstdModule(path)
    return open(path, "rb")


def _compression_errors() -> tuple[type[BaseException], ...]:
    errors: list[type[BaseException]] = [EOFError, gzip.BadGzipFile, zlib.error]  # and ours
    try:
        import zstandard

        errors.append(zstandard.ZstdError)
    except ImportError:
        pass
    return tuple(errors)


def _lines(path: str, compression: str | None) -> Iterator[tuple[int, bytes] | Problem]:
    """``(1-based line, bytes)`` of a file, decompressing; a truncated or corrupt stream
    ends with a ``bad_compression`` Problem at the line where reading stopped."""
    lineno = 0
    with _open_binary(path, compression) as f:
        try:
            for number, line in enumerate(f, 1):
                lineno = number
                yield lineno, line
        except _compression_errors() as err:
            yield Problem("bad_compression", path, lineno + 1,
                          f"{compression} data ends or breaks here ({err or type(err).__name__}); "
                          "the rest of the file is not read")


def read_records(path: str, json_key: str = "text") -> Iterator[Record | Problem]:
    """Stream the records of one file; a file-level problem is yielded as a Problem."""
    fmt, compression = detect_input(path)
    if fmt == "parquet":
        yield from _read_parquet(path, json_key)
        return
    if fmt == "hf_dataset":
        yield from _read_hf_dataset(path, json_key)
        return
    if fmt == "arrow":
        yield from _read_arrow(path, json_key)
        return
    if fmt == "jsonl":
        for item in _lines(path, compression):
            if isinstance(item, Problem):
                yield item
            elif not item[1].isspace():
                yield Record(path, item[0], fmt, item[1])
        return
    doc: list[bytes] = []
    start = 0
    for item in _lines(path, compression):
        if isinstance(item, Problem):
            if doc:
                yield Record(path, start, fmt, b"".join(doc))
                doc = []
            yield item
            continue
        lineno, line = item
        if not line.isspace():
            if not doc:
                start = lineno
            doc.append(line)
        elif doc:
            yield Record(path, start, fmt, b"".join(doc))
            doc = []
    if doc:
        yield Record(path, start, fmt, b"".join(doc))


def hf_dataset_files(directory: str) -> list[str]:
    """The arrow files of a ``save_to_disk`` directory, in ``state.json``'s order
    (``_data_files``); ValueError naming the file for a state that is unreadable, names a
    path that is not a plain file name, or a file that is not there."""
    state_path = os.path.join(directory, HF_STATE)
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{state_path}: not a datasets state file ({err})") from None
    out = []
    for name in names:
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise ValueError(f"{state_path}: data file {name!r} is not a plain file name")
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise ValueError(f"{state_path}: names {name}, which is not in {directory}")
        out.append(path)
    return out


def _read_hf_dataset(directory: str, column: str) -> Iterator[Record | Problem]:
    for path in hf_dataset_files(directory):
        yield from _read_arrow(path, column)


def _read_arrow(path: str, column: str) -> Iterator[Record | Problem]:
    """One Arrow IPC file (stream format, as ``datasets`` writes, or file format), a record
    batch at a time; a row's line is its 1-based row in this file."""
    import pyarrow as pa

    with pa.memory_map(path) as source:
        with open(path, "rb") as f:
            is_file = f.read(6) == ARROW_FILE_MAGIC
        try:
            reader = pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)
        except pa.ArrowInvalid as err:
            raise ValueError(f"{path}: not an Arrow IPC file ({err})") from None
        schema = reader.schema
        if column not in schema.names:
            yield Problem("missing_key", path, 0, f"no column {column!r} (has {schema.names})")
            return
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) \
            if is_file else reader
        row = 0
        for batch in batches:
            for value in batch.column(column).to_pylist():
                row += 1
                yield Record(path, row, "arrow", value)


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
    elif rec.fmt in ("parquet", "arrow") and raw is None:
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
