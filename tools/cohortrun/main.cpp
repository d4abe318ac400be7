// cohortrun: a torchrun-compatible launcher for C++ programs (docs/cohortrun.md).
#include "cohortrun/launcher.h"

int main(int argc, char** argv) { return cohort::detail::launch::cohortrun_main(argc, argv); }
