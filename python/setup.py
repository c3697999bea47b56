"""Builds the firebreak package standalone, from the repository's sources:
the extension compiles the libfirebreak sources it needs (src/common,
src/lib, src/ckpt, the flight recorder's recorder.c) into itself, so no
installed libfirebreak is required.  XXH3 from Debian's libxxhash-dev
when its header is present (else CRC32C, as in the CMake build); the CUDA
device path when the toolkit's headers are found; no test hooks (a release
build).

    pip install ./python                    (from the repository root)
    pip install --no-build-isolation ./python   (offline: setuptools from the system)
"""
import os
import sysconfig

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(ROOT, "src")

if not os.path.exists(os.path.join(ROOT, "include", "firebreak", "firebreak.h")):
    raise SystemExit("firebreak: setup.py must be run from the repository's "
                     "python/ folder (it compiles ../src); %s has no "
                     "include/firebreak/firebreak.h" % ROOT)

# The libfirebreak objects (src/lib/CMakeLists.txt, src/ckpt/CMakeLists.txt,
# src/common/CMakeLists.txt, src/fr's recorder.c).  ctest python_sources
# (tests/python/sources.py) fails when this list and CMake's differ.
LIB_SOURCES = {
    "common": ["util.c", "json.c", "jsonw.c", "rundir.c"],
    "lib": ["lib.c", "segment.c", "segment_guard.c", "inject.c", "error.c", "sdc.c"],
    "ckpt": ["engine.c", "restore.c", "layout.c", "staging.c", "protect.c", "safetensors.c",
             "shard.c", "store.c", "tier.c", "names.c", "hash.c", "cuda.c"],
    "fr": ["recorder.c"],
}
sources = [os.path.join(HERE, "firebreak", "_firebreak.c")]
for comp, files in LIB_SOURCES.items():
    sources += [os.path.join(SRC, comp, f) for f in files]

macros = [("_GNU_SOURCE", None)]
xxhash = os.path.exists(os.path.join(sysconfig.get_config_var("INCLUDEDIR") or "/usr/include",
                                     "xxhash.h")) or os.path.exists("/usr/include/xxhash.h")
if xxhash:
    macros.append(("FB_HAVE_XXHASH", None))

# The device-to-host path of the checkpoint engine (src/ckpt/cuda.c) when
# the CUDA toolkit's headers are there (CUDA_HOME, else /usr/local/cuda):
# headers only, libcudart is loaded with dlopen at run time.
# FIREBREAK_NO_CUDA=1 leaves it out.
include_dirs = [os.path.join(ROOT, "include"), SRC]
libraries = ["pthread", "m", "rt"]
cuda_inc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
if (os.path.exists(os.path.join(cuda_inc, "cuda_runtime_api.h"))
        and os.environ.get("FIREBREAK_NO_CUDA") != "1"):
    macros.append(("FB_HAVE_CUDA", None))
    include_dirs.append(cuda_inc)
    libraries.append("dl")

ext = Extension(
    "firebreak._firebreak",
    sources=sources,
    include_dirs=include_dirs,
    define_macros=macros,
    extra_compile_args=["-std=gnu11", "-fvisibility=hidden", "-Wno-unused-parameter"],
    libraries=libraries,
)

setup(
    name="firebreak",
    version="0.1.0",
    description="firebreak: heartbeats, phases and verified checkpoints for "
                "training jobs (a CPython extension over libfirebreak)",
    packages=["firebreak"],
    package_data={"firebreak": ["_boot/sitecustomize.py", "_boot/fbwarm.py"]},
    ext_modules=[ext],
    python_requires=">=3.8",
)
