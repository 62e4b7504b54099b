// kiln/kiln.h - everything a Kiln user includes.
#pragma once

#include "kiln/amp.h"
#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/data.h"
#include "kiln/distributed.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/init.h"
#include "kiln/lr_scheduler.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "kiln/random.h"
#include "kiln/serialize.h"
#include "kiln/tensor.h"
