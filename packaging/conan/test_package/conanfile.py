# The test package of `conan create`: packaging/consumer built against the cohort package with
# find_package(cohort), then run on 2 ranks by the package's cohortrun, checking the allreduce's sum.
import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class CohortTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeToolchain", "VirtualRunEnv"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            consumer = os.path.join(self.cpp.build.bindir, "consumer")
            self.run(f"cohortrun --standalone --nproc-per-node 2 {consumer} 2", env="conanrun")
