"""Build the Cython core in src/_accel/ into extension modules of the kipproducer package.

The native modules live in the package namespace (``kipproducer._crc32c`` and so on); the
Python layer in src/kipproducer/ is the public API.
"""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# The modules are independent: C-compile (and cythonize) them side by side, one per core.
JOBS = os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = JOBS

ACCEL = os.path.join("src", "_accel")

compile_args = []
if sys.platform != "win32":
    # -O3 lets gcc/clang unroll the varint and copy loops of the record writer.
    compile_args = ["-O3", "-std=c99", "-Wno-unused-function"]


def accel(name, *extra_c):
    sources = [os.path.join(ACCEL, f"{name}.pyx")]
    sources += [os.path.join(ACCEL, c) for c in extra_c]
    return Extension(
        f"kipproducer._{name}",
        sources=sources,
        include_dirs=[ACCEL],
        extra_compile_args=compile_args,
    )


def openssl_headers() -> bool:
    """Whether OpenSSL's headers are here to build kip broker's TLS layer against (the
    libssl Python's own ssl module uses). Without them the broker keeps asyncio's TLS."""
    candidates = [os.environ.get("OPENSSL_DIR", ""), sys.prefix, "/usr", "/usr/local",
                  "/opt/homebrew/opt/openssl@3"]
    return any(os.path.exists(os.path.join(base, "include", "openssl", "ssl.h"))
               for base in candidates if base)


extensions = [
    accel("crc32c", "crc32c_impl.c"),
    accel("records", "crc32c_impl.c"),
    accel("accumulator", "crc32c_impl.c"),
    accel("produce_wire"),
    accel("held_io"),
    accel("sender_lock"),
    # the Spark source: fetched record batches decoded into Arrow buffers
    accel("arrow_rows"),
]
if openssl_headers():
    # kip broker's TLS listeners without client certificates (broker/tls_transport.py)
    tls = accel("tls_server")
    tls.libraries = ["ssl", "crypto"]
    base = os.environ.get("OPENSSL_DIR")
    if base:
        tls.include_dirs.append(os.path.join(base, "include"))
        tls.library_dirs = [os.path.join(base, "lib")]
    extensions.append(tls)
else:
    print("OpenSSL headers not found: kip broker's TLS listeners will use asyncio's TLS "
          "transport (set OPENSSL_DIR to build its own)", file=sys.stderr)

setup(
    cmdclass={"build_ext": ParallelBuildExt},
    ext_modules=cythonize(
        extensions,
        nthreads=JOBS,
        include_path=[ACCEL],
        compiler_directives={
            "language_level": "3",
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
        },
    ),
)
