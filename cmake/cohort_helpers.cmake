# cohort_executable(name sources...): an executable linked to cohort, reusing the torch PCH.
function(cohort_executable name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE cohort::cohort)
  # Same -fPIC as the precompiled header was made with (gcc rejects a PCH built with other PIC flags).
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE OFF)
  target_compile_options(${name} PRIVATE -fPIC)
  if(COHORT_USE_PCH)
    target_precompile_headers(${name} REUSE_FROM cohort_pch)
  endif()
endfunction()
