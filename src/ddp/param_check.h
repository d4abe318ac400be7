// DDP's construction-time check that every rank holds the same parameters (count, shapes, dtypes),
// with an error naming the first parameter that differs and each rank's shape.
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "cohort/comm.h"

namespace cohort::detail {

void check_same_parameters(Comm& comm, const std::vector<std::string>& names, const std::vector<torch::Tensor>& params);

}  // namespace cohort::detail
