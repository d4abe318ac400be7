// cohort: distributed training for the PyTorch C++ API. One include for the whole public API.
#pragma once

#include "cohort/autocast.h"
#include "cohort/checkpoint.h"
#include "cohort/cifar.h"
#include "cohort/comm.h"
#include "cohort/data.h"
#include "cohort/ddp.h"
#include "cohort/error.h"
#include "cohort/mesh.h"
#include "cohort/number.h"
#include "cohort/sampler.h"
#include "cohort/world.h"
#include "cohort/zero.h"
#include "cohort/zero_config.h"
