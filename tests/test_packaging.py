"""Only ``memstream`` is installed at the top of site-packages (issue 29): the
wheel built from this checkout holds the ``memstream`` package and its dist-info, nothing that
could collide with another distribution's ``schemas``, ``streams`` or ``consumers``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import memstream

ROOT = Path(__file__).resolve().parents[1]


def _source_tree(dest: Path) -> Path:
    """The files a build reads: pyproject, README and every top-level package folder (the old
    names' symlinks too, as they are in the repository), without caches."""
    src = dest / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for d in ROOT.iterdir():
        if (d / "__init__.py").is_file():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(d, src / d.name, symlinks=True, ignore=ignore)
    return src


def test_the_wheel_has_only_memstream_at_its_top(tmp_path: Path) -> None:
    pytest.importorskip("setuptools")
    out = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    done = subprocess.run(
        [*pip, "-w", str(out), str(_source_tree(tmp_path))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("memstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"memstream", f"memstream-{memstream.__version__}.dist-info"}
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).split() == [b"memstream"]
    # the subpackages and the package data came along
    assert "memstream/streams/app.py" in names
    assert "memstream/consumers/indexer.py" in names
    assert "memstream/schemas/json/Turn.schema.json" in names
