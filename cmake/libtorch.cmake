# What the LibTorch found by find_package(Torch) asks of us; the one CMake file that knows versions.
# - C++ standard: LibTorch >= 2.12 headers require C++20, older ones C++17.
# - CUDA/NCCL: on when LibTorch has CUDA (COHORT_CUDA=AUTO), required with ON, never with OFF. NCCL's
#   header must be the one LibTorch was built with (ProcessGroupNCCL::Options' layout depends on it):
#   pip's torch ships it in site-packages/nvidia/nccl/include, which goes first.
# - Gloo: ProcessGroupGloo.hpp includes <gloo/...>; pip wheels ship no gloo headers, so Debian's
#   libgloo-dev provides them (cohort touches only the device factory and Options, stable since 1.13).

if(Torch_VERSION VERSION_GREATER_EQUAL 2.12)
  set(COHORT_CXX_STANDARD 20)
else()
  set(COHORT_CXX_STANDARD 17)
endif()
set(CMAKE_CXX_STANDARD ${COHORT_CXX_STANDARD})
set(CMAKE_CXX_STANDARD_REQUIRED ON)

get_filename_component(COHORT_TORCH_ROOT "${TORCH_INSTALL_PREFIX}" ABSOLUTE)
set(COHORT_TORCH_HAS_CUDA 0)
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda OR EXISTS "${COHORT_TORCH_ROOT}/lib/libtorch_cuda.so")
  set(COHORT_TORCH_HAS_CUDA 1)
endif()
if(COHORT_CUDA STREQUAL "OFF")
  set(COHORT_WITH_CUDA 0)
elseif(COHORT_CUDA STREQUAL "ON" AND NOT COHORT_TORCH_HAS_CUDA)
  message(FATAL_ERROR "COHORT_CUDA=ON, but the LibTorch at ${COHORT_TORCH_ROOT} has no CUDA "
                      "(no libtorch_cuda.so): point CMAKE_PREFIX_PATH at a CUDA build of LibTorch")
elseif(COHORT_CUDA MATCHES "^(ON|AUTO)$")
  set(COHORT_WITH_CUDA ${COHORT_TORCH_HAS_CUDA})
else()
  message(FATAL_ERROR "COHORT_CUDA=${COHORT_CUDA}: accepted values are AUTO, ON and OFF")
endif()

set(COHORT_TORCH_INCLUDES "")
if(COHORT_WITH_CUDA)
  # pip's torch: site-packages/torch -> site-packages/nvidia/nccl/include
  get_filename_component(_site "${COHORT_TORCH_ROOT}/.." ABSOLUTE)
  if(EXISTS "${_site}/nvidia/nccl/include/nccl.h")
    list(APPEND COHORT_TORCH_INCLUDES "${_site}/nvidia/nccl/include")
  endif()
endif()
if(NOT EXISTS "${COHORT_TORCH_ROOT}/include/gloo/context.h")
  find_path(COHORT_GLOO_INCLUDE gloo/context.h)
  if(NOT COHORT_GLOO_INCLUDE)
    message(FATAL_ERROR "LibTorch at ${COHORT_TORCH_ROOT} ships no gloo headers, and none were found: "
                        "apt-get install libgloo-dev (ProcessGroupGloo.hpp includes <gloo/...>)")
  endif()
endif()
message(STATUS "cohort: LibTorch ${Torch_VERSION} at ${COHORT_TORCH_ROOT}, C++${COHORT_CXX_STANDARD}, "
               "CUDA/NCCL: ${COHORT_WITH_CUDA}")
if(COHORT_TORCH_INCLUDES)
  include_directories(BEFORE SYSTEM ${COHORT_TORCH_INCLUDES})
endif()

# pip's libtorch.so exports its own, older copy of std::filesystem (remove_all, ...). A program that
# loads libtorch before libstdc++ binds to that copy, and remove_all() then calls a null pointer
# (seen with torch 2.11.0 from PyPI, any program, CPU or GPU). libstdc++ first, as in Python, where the
# interpreter has loaded it before torch: every std:: symbol comes from the system's libstdc++.
set(COHORT_STDCXX_FIRST -Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state)
