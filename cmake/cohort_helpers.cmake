# cohort_executable(name sources...): an executable linked to cohort, reusing the torch PCH.
function(cohort_executable name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE cohort::cohort)
  if(COHORT_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM cohort_pch)
  endif()
endfunction()
