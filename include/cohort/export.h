// What libcohort exports. The library compiles with -fvisibility=hidden, so only what a public header
// declares between COHORT_EXPORT_BEGIN and COHORT_EXPORT_END (every header in include/cohort but the
// umbrella cohort.h wraps its namespace this way) is visible to programs; everything in src/ stays
// internal to the library.
#pragma once

#define COHORT_EXPORT_BEGIN _Pragma("GCC visibility push(default)")
#define COHORT_EXPORT_END _Pragma("GCC visibility pop")
