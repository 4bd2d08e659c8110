"""The default data, prepared by the data tool in a child process: ``python -m data_prep prepare``.

mlsys never imports data_prep (``tests/test_architecture.py``); where a run config leaves
``data.tokenizer_dir``/``data.data_prefix`` unset, the library runs the tool's documented
command instead. ``prepare`` builds or reuses (idempotently) the embedded default corpus,
tokenizer and shards under ``--out`` (vision: the digits image shards) and prints one JSON
object on stdout: ``tokenizer_dir``, ``data_prefix``, ``num_tokens`` (vision: ``data_prefix``,
``num_classes``, ``image_size``) and ``seconds``.

The child runs in this process's working directory (a relative ``prepare_dir`` means the same
directory as before) and environment, with the directory that holds this mlsys package first
on ``PYTHONPATH`` (so it runs the data_prep installed beside this mlsys, whatever the current
directory). Its stderr (progress, skipped input) is passed on to this process's stderr as it
comes. A non-zero exit, or stdout that is not the JSON object, raises ``DataPrepError`` naming
the command, its exit code and the last lines of its stderr. If this process is interrupted
while waiting (a signal raising, Ctrl-C), the child gets SIGTERM (data_prep then removes its
temp files and leaves finished outputs alone) and is waited for before the error propagates.
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

TOOL = "data_prep"
TAIL_BYTES = 8192  # of the child's stderr, kept for the error message
TERM_GRACE_SECONDS = 30.0


class DataPrepError(RuntimeError):
    """``python -m data_prep`` failed or printed no JSON result."""


def tool_command(subcommand: str, args: list[str]) -> list[str]:
    """The command line: this interpreter, ``-m data_prep SUBCOMMAND ARGS``."""
    return [sys.executable, "-m", TOOL, subcommand, *args]


def tool_env() -> dict[str, str]:
    """This process's environment, the directory holding the ``mlsys`` package (and beside
    it ``data_prep``) first on ``PYTHONPATH``."""
    root = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


def _pass_on(stream: IO[bytes], tail: bytearray) -> None:
    """Copy ``stream`` to this process's stderr as it comes, keeping its last bytes."""
    decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
    while chunk := stream.read1(65536):
        tail += chunk
        del tail[:-TAIL_BYTES]
        sys.stderr.write(decode(chunk))
        sys.stderr.flush()
    sys.stderr.write(decode(b"", final=True))


def run_tool(subcommand: str, args: list[str]) -> dict[str, Any]:
    """Run ``python -m data_prep SUBCOMMAND ARGS`` (see the module doc); its JSON result."""
    cmd = tool_command(subcommand, args)
    shown = " ".join(["python", *cmd[1:]])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=tool_env())
    tail = bytearray()
    relay = threading.Thread(target=_pass_on, args=(proc.stderr, tail), daemon=True)
    relay.start()
    try:
        out = proc.stdout.read()
        code = proc.wait()
    except BaseException:
        proc.terminate()
        try:
            proc.wait(TERM_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    finally:
        relay.join(5.0)
        proc.stdout.close()
    last = "\n".join(tail.decode("utf-8", "replace").splitlines()[-20:])
    if code != 0:
        raise DataPrepError(f"`{shown}` exited {code}" + (f":\n{last}" if last else ""))
    try:
        result = json.loads(out)
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise DataPrepError(f"`{shown}` printed no JSON object on stdout (got "
                            f"{out[-200:]!r})")
    return result


def prepare(out_dir: str, kind: str, *, vocab_size: int = 4096, source: str = "stdlib",
            image_size: int = 32) -> dict[str, Any]:
    """``python -m data_prep prepare`` for data ``kind`` (causal, masked or vision) under
    ``out_dir``; its JSON result (the paths as the tool prints them)."""
    args = ["--out", out_dir, "--kind", kind]
    if kind == "vision":
        args += ["--image-size", str(image_size)]
    else:
        args += ["--vocab-size", str(vocab_size), "--source", source]
    result = run_tool("prepare", args)
    missing = [k for k in ("data_prefix",) + (() if kind == "vision" else ("tokenizer_dir",))
               if not isinstance(result.get(k), str)]
    if missing:
        raise DataPrepError(f"`python -m {TOOL} prepare`: no {', '.join(missing)} in its "
                            f"result {result}")
    return result
