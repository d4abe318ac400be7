# cohort_executable(name sources...): a program on cohort's public API (libcohort, as a user's program),
# reusing the torch PCH.
function(cohort_executable name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE cohort::cohort)
  cohort_reuse_pch(${name})
endfunction()

# cohort_internal_executable(name sources...): a program of cohort's own (a test, tool or benchmark)
# that reaches internals in src/: it links the same objects statically (every symbol, not only the
# exported API) and never libcohort as well, so the process has one copy of cohort's state.
function(cohort_internal_executable name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE cohort_internal)
  cohort_reuse_pch(${name})
endfunction()

function(cohort_reuse_pch name)
  # Same -fPIC as the precompiled header was made with (gcc rejects a PCH built with other PIC flags).
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(${name} PRIVATE -fPIC)
  if(COHORT_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM cohort_pch)
  endif()
endfunction()
