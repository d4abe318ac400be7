#!/usr/bin/env python3
"""The packaging recipes agree with the tree, without building anything (scripts/package-check.sh builds
and installs each: minutes, not CI). The version written in CMakeLists.txt (project(cohort VERSION x.y.z))
is CHANGELOG.md's top release, the easyconfig's file name and version, Spack's newest version, and what
the Conan recipe's set_version reads; config.h and CPack take it from CMake. The outside consumer that
every recipe builds exists. Prints each disagreement and exits 1."""
import pathlib
import re
import sys


def version_of_cmake(root):
    match = re.search(r"^project\(cohort VERSION (\d+\.\d+\.\d+)[ )]", (root / "CMakeLists.txt").read_text(), re.M)
    return match.group(1) if match else None


def problems(root):
    version = version_of_cmake(root)
    if not version:
        return ["CMakeLists.txt: no project(cohort VERSION x.y.z)"]
    found = []

    def expect(condition, message):
        if not condition:
            found.append(message)

    text = lambda path: (root / path).read_text(encoding="utf-8") if (root / path).is_file() else ""
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\]", text("CHANGELOG.md"), re.M)
    expect(releases[:1] == [version], f"CHANGELOG.md: the top release is {releases[:1]}, CMake says {version}")
    easyconfigs = sorted(p.name for p in (root / "packaging/easybuild").glob("cohort-*.eb"))
    expect(easyconfigs == [f"cohort-{version}.eb"],
           f"packaging/easybuild: easyconfigs {easyconfigs}, expected cohort-{version}.eb alone (git mv it)")
    eb = text(f"packaging/easybuild/cohort-{version}.eb")
    expect(f"version = '{version}'" in eb and "name = 'cohort'" in eb,
           f"packaging/easybuild/cohort-{version}.eb: no name = 'cohort' and version = '{version}'")
    conan = text("packaging/conan/conanfile.py")
    pattern = re.search(r're\.search\(r"([^"]+)"', conan)
    read = pattern and re.search(pattern.group(1), text("CMakeLists.txt"))
    expect(read and read.group(1) == version,
           "packaging/conan/conanfile.py: set_version does not read CMake's version from CMakeLists.txt")
    expect(not re.search(r"^\s+version\s*=", conan, re.M), "packaging/conan/conanfile.py: a version written in")
    spack = re.findall(r'^\s+version\("([^"]+)"', text("packaging/spack/package.py"), re.M)
    expect(spack[:1] == [version], f"packaging/spack/package.py: newest version {spack[:1]}, CMake says {version}")
    expect('"@PROJECT_VERSION@"' in text("cmake/config.h.in"), "cmake/config.h.in: COHORT_VERSION not from CMake")
    expect("CPACK_PACKAGE_VERSION ${PROJECT_VERSION}" in text("cmake/packaging.cmake"),
           "cmake/packaging.cmake: the package version is not CMake's")
    for path in ["packaging/consumer/CMakeLists.txt", "packaging/consumer/main.cpp", "packaging/consumer/run.sh",
                 "packaging/conan/test_package/conanfile.py", "packaging/conan/test_package/CMakeLists.txt"]:
        expect((root / path).is_file(), f"{path}: missing")
    expect("../../consumer/main.cpp" in text("packaging/conan/test_package/CMakeLists.txt"),
           "packaging/conan/test_package/CMakeLists.txt: does not build packaging/consumer/main.cpp")
    return found


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = problems(root)
    for message in found:
        print(f"FAIL: {message}")
    if found:
        return 1
    print(f"packaging: cohort {version_of_cmake(root)} in CHANGELOG.md, the easyconfig, the Conan and Spack "
          "recipes, config.h and CPack; the consumer's sources present")
    return 0


if __name__ == "__main__":
    sys.exit(main())
