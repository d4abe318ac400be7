# CPack: Debian packages of cohort, `cpack -G DEB` in a build folder configured with
# -DCMAKE_INSTALL_PREFIX=/usr against Debian's LibTorch (scripts/package-check.sh deb installs them on a
# fresh Debian 12 and builds packaging/consumer there). Two packages, as Debian splits a library:
#   cohort      libcohort.so.X.Y and the tools; its Depends read from the binaries by dpkg-shlibdeps
#   cohort-dev  headers and the CMake package; find_package(cohort) needs LibTorch's, OpenSSL's and
#               zlib's development packages (cmake/cohortConfig.cmake.in)
# The version is the project's (CMakeLists.txt), the one place it is written.
set(CPACK_PACKAGE_NAME cohort)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "cohort")
set(CPACK_PACKAGE_CONTACT "cohort developers <cohort@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "distributed training for the PyTorch C++ API (LibTorch)")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/cohort/cohort")
set(CPACK_PACKAGE_FILE_NAME ${CPACK_PACKAGE_NAME}-${CPACK_PACKAGE_VERSION})
set(CPACK_COMPONENTS_ALL runtime dev)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # cohort_0.1.0_amd64.deb, cohort-dev_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME cohort)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION science)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME cohort-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# cohortConfig.cmake refuses any other LibTorch than the one built against: its minor version, pinned.
math(EXPR _torch_next "${Torch_VERSION_MINOR} + 1")
set(COHORT_DEB_DEV_DEPENDS "libtorch-dev (>= ${Torch_VERSION_MAJOR}.${Torch_VERSION_MINOR}), \
libtorch-dev (<< ${Torch_VERSION_MAJOR}.${_torch_next}), libssl-dev, zlib1g-dev" CACHE STRING
    "cohort-dev's Depends besides cohort itself (find_package(cohort)'s find_dependency calls)")
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS ${COHORT_DEB_DEV_DEPENDS})
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION "distributed training for the PyTorch C++ API (LibTorch)
 DistributedDataParallel, ZeRO stages 1-3, sharding units, pipeline parallelism, Horovod's API and a
 Trainer for LibTorch programs, with cohortrun, a torchrun-compatible launcher.")
set(CPACK_DEBIAN_DEV_DESCRIPTION "distributed training for LibTorch: development files
 The headers of cohort and its CMake package: find_package(cohort) and cohort::cohort.")
include(CPack)
