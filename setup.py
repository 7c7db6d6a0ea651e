"""`pip install --no-build-isolation .`: setuptools drives CMake to build the Python module hf3fs_meta
for the interpreter that runs pip, with the SDK linked in statically (the installed module needs no
libhf3fs_meta_*.so). Offline: everything it needs is a Debian package (scripts/bootstrap)."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build = Path(self.build_temp).resolve() / "cmake"
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        f"-DPython3_EXECUTABLE={sys.executable}", "-DBUILD_SHARED_LIBS=OFF",
                        "-DCMAKE_POSITION_INDEPENDENT_CODE=ON", "-DHF3FS_META_BUILD_TESTS=OFF",
                        "-DHF3FS_META_BUILD_EXAMPLES=OFF", "-DHF3FS_META_BUILD_CLI=OFF",
                        "-DHF3FS_META_BUILD_SERVER=OFF", "-DHF3FS_META_BUILD_BENCHMARKS=OFF"], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "hf3fs_meta_python",
                        "-j", str(os.cpu_count() or 1)], check=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build / "python" / "hf3fs_meta" / target.name, target)


# The version is CMake's project version: one place.
VERSION = re.search(r"project\(hf3fs_meta VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text()).group(1)

setup(
    name="hf3fs-meta",
    version=VERSION,
    description="C++ SDK client for vLLM's HF3FS metadata service, with a drop-in Hf3fsGlobalMetadataClient",
    python_requires=">=3.8",
    packages=["hf3fs_meta"],
    package_dir={"": "python"},
    package_data={"hf3fs_meta": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("hf3fs_meta._core", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    zip_safe=False,
)
