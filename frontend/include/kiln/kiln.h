// kiln/kiln.h - everything a Kiln user includes.
#pragma once

#include "kiln/autograd.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/error.h"
#include "kiln/nn.h"
#include "kiln/ops.h"
#include "kiln/optim.h"
#include "kiln/random.h"
#include "kiln/tensor.h"
