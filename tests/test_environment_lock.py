"""The environment `make install` builds is the one constraints.txt pins, every distribution of
it: the packages corpus (data_prep) is made of their sources, so a version that floats changes
the corpus's bytes and hash from one install to the next."""

from __future__ import annotations

import re
from pathlib import Path

from data_prep.packages import distributions

ROOT = Path(__file__).resolve().parents[1]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned() -> dict[str, str]:
    """constraints.txt as {normalised name: version}; a line that is not `name==version` fails."""
    pins = {}
    for number, line in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        assert m, f"constraints.txt:{number}: {line!r} is not name==version"
        pins[_normal(m[1])] = m[2]
    return pins


def test_every_distribution_the_corpus_reads_is_installed_at_its_pinned_version():
    pins = pinned()
    installed = {}
    for entry in distributions():
        name, version = entry.split("==")
        installed[_normal(name)] = version.split("+")[0]  # torch's local tag: 2.13.0+cpu
    installed.pop("mlsys", None)  # the project itself, editable: not in the site's files
    unpinned = sorted(set(installed) - set(pins))
    assert not unpinned, f"installed but not in constraints.txt: {unpinned}"
    drifted = {n: (v, pins[n]) for n, v in installed.items() if v != pins[n]}
    assert not drifted, f"installed version != constraints.txt's: {drifted}"


def test_the_direct_pins_agree_with_the_lock():
    pins = pinned()
    text = (ROOT / "pyproject.toml").read_text()
    direct = re.findall(r'"([A-Za-z0-9._-]+)==([^"]+)"', text)
    assert direct, "pyproject.toml pins nothing"
    for name, version in direct:
        assert pins.get(_normal(name)) == version, (
            f"pyproject.toml pins {name}=={version}, constraints.txt {pins.get(_normal(name))}")
