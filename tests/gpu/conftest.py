"""The GPU path (`make test-gpu`): collected by `make test` too, where every test here is
skipped at once unless CUDA is present and MLSYS_TEST_GPU=1 (set by `make test-gpu`)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config, items):
    import torch

    if os.environ.get("MLSYS_TEST_GPU") == "1" and torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="the GPU path: needs CUDA and MLSYS_TEST_GPU=1 (make test-gpu)")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)
