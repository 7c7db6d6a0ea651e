"""hf3fs_meta.__version__: the project's one version, CMakeLists.txt's project() (setup.py reads the same)."""

import re
import subprocess
import sys
from pathlib import Path

import hf3fs_meta
from hf3fs_meta import _core

ROOT = Path(__file__).resolve().parents[2]


def project_version() -> str:
    found = re.search(r"project\(hf3fs_meta VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert found, "CMakeLists.txt names no project version"
    return found.group(1)


def test_version_is_the_project_version() -> None:
    assert hf3fs_meta.__version__ == project_version()
    # From the module CMake built, not a copy in the Python sources.
    assert hf3fs_meta.__version__ is _core.__version__


def test_setup_py_gives_pip_the_same_version() -> None:
    ran = subprocess.run([sys.executable, "setup.py", "--version"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    assert ran.stdout.strip().splitlines()[-1] == project_version()
