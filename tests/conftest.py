"""Shared fixtures, and a failure's reason written as it happens."""

from __future__ import annotations

import pytest


class _FailuresAtOnce:
    """Writes each failure's last traceback lines when it happens, not only in the summary at
    the end: a run cut off by a time limit (CI's 90 minutes) still shows why tests failed."""

    def __init__(self, terminal) -> None:
        self.terminal = terminal

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            tail = report.longreprtext.splitlines()[-12:]
            self.terminal.write_line(f"\nFAILED {report.nodeid} ({report.when}):")
            for line in tail:
                self.terminal.write_line(f"    {line}")


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    terminal = config.pluginmanager.get_plugin("terminalreporter")
    if terminal is not None:
        config.pluginmanager.register(_FailuresAtOnce(terminal), "failures-at-once")


def _tiny_corpus(root, kind: str, limit: int, **shard_options) -> dict:
    """``limit`` stdlib modules of ``kind`` -> 512-piece tokenizer -> shards under ``root``."""
    from data_prep.corpus import write_corpus
    from data_prep.shards import build_shards
    from data_prep.tokenizer import train_tokenizer

    corpus = write_corpus(str(root), kind, limit=limit)["path"]
    tok = str(root / "tok")
    train_tokenizer([corpus], 512, tok)
    prefix = str(root / "shards")
    build_shards([corpus], tok, prefix, workers=0, progress=False, **shard_options)
    return {"root": root, "corpus": corpus, "tokenizer_dir": tok, "data_prefix": prefix}


@pytest.fixture(scope="session")
def gpt_data(tmp_path_factory) -> dict:
    """Small code corpus (40 stdlib modules) -> 512-piece tokenizer -> shards with eod."""
    return _tiny_corpus(tmp_path_factory.mktemp("gpt_data"), "code", 40, append_eod=True)


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory) -> dict:
    """Small prose corpus (150 stdlib modules) -> 512-piece tokenizer -> sentence shards."""
    return _tiny_corpus(tmp_path_factory.mktemp("bert_data"), "prose", 150,
                        split_sentences=True)
