# Conan 2 recipe for cohort, built with CMake from this source tree (`conan create packaging/conan`;
# scripts/package-check.sh conan runs it with a fresh CONAN_HOME). LibTorch is not a Conan package: the
# system's is used (Debian's libtorch-dev, or any LibTorch on CMAKE_PREFIX_PATH), found by cohort's own
# find_package(Torch), as are nlohmann-json, CLI11, OpenSSL and zlib. Consumers use cohort's own CMake
# package (lib/cmake/cohort), which pins the LibTorch it was built against.
import os
import re

from conan import ConanFile
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load


class CohortConan(ConanFile):
    name = "cohort"
    description = "Distributed training for the PyTorch C++ API (LibTorch)"
    license = "proprietary"
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    # What the build reads; the examples, tests, benchmarks and docs are not built.
    _sources = ["CMakeLists.txt", "cmake/*", "src/*", "include/*", "tools/*", "models/*"]

    def _tree(self):
        return os.path.join(self.recipe_folder, "..", "..")

    def set_version(self):  # the one version: project(cohort VERSION x.y.z) in CMakeLists.txt
        text = load(self, os.path.join(self._tree(), "CMakeLists.txt"))
        self.version = re.search(r"project\(cohort VERSION ([0-9.]+)", text).group(1)

    def export_sources(self):
        for pattern in self._sources:
            copy(self, pattern, self._tree(), self.export_sources_folder)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        toolchain = CMakeToolchain(self)
        for option in ("TESTS", "EXAMPLES", "BENCH"):
            toolchain.cache_variables[f"COHORT_BUILD_{option}"] = False
        toolchain.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()

    def package_info(self):
        # cohort's own cohortConfig.cmake, not one CMakeDeps writes: it finds the LibTorch cohort was
        # built against and refuses another.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.builddirs = [os.path.join("lib", "cmake", "cohort")]
        self.cpp_info.libs = ["cohort"]
