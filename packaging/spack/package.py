# Spack recipe for cohort. UNTESTED: Spack is on neither PyPI nor Debian 12, the only registries the
# machines that build cohort reach, so no `spack install` has ever run it (docs/install.md says so).
# LibTorch is not built by Spack here: declare the system's as an external (py-torch in packages.yaml,
# or CMAKE_PREFIX_PATH), since cohort finds it with find_package(Torch). The version follows
# CMakeLists.txt (packaging_check_test). Put this file at <repo>/packages/cohort/package.py.
from spack.package import *


class Cohort(CMakePackage):
    """Distributed training for the PyTorch C++ API (LibTorch): DistributedDataParallel, ZeRO stages
    1-3, sharding units, pipeline parallelism, Horovod's API, a Trainer and cohortrun, a
    torchrun-compatible launcher."""

    homepage = "https://github.com/cohort/cohort"
    git = "https://github.com/cohort/cohort.git"

    version("0.1.0", tag="v0.1.0")

    variant("cuda", default=False, description="Build CUDA/NCCL support (needs a CUDA LibTorch)")

    depends_on("cxx", type="build")
    depends_on("cmake@3.18:", type="build")
    depends_on("ninja", type="build")
    depends_on("py-torch@1.13:")  # an external: its site-packages/torch is the LibTorch cohort builds on
    depends_on("py-torch+cuda", when="+cuda")
    depends_on("gloo")  # ProcessGroupGloo.hpp includes <gloo/...>; pip-style torch ships no gloo headers
    depends_on("nlohmann-json@3:")
    depends_on("cli11")
    depends_on("openssl")
    depends_on("zlib-api")
    depends_on("cuda", when="+cuda")

    generator("ninja")

    # py-torch's cmake_prefix_paths (site-packages/torch/share/cmake) reach CMAKE_PREFIX_PATH through
    # Spack's build environment: find_package(Torch) needs nothing more.
    def cmake_args(self):
        return [
            self.define("COHORT_BUILD_TESTS", False),
            self.define("COHORT_BUILD_EXAMPLES", False),
            self.define("COHORT_BUILD_BENCH", False),
            self.define("COHORT_CUDA", "ON" if self.spec.satisfies("+cuda") else "OFF"),
        ]
