// kiln::cuda (frontend/include/kiln/cuda.h) answers what the runtime's probe
// answers, through its public header.
#include <gtest/gtest.h>

#include "kiln/cuda.h"
#include "kiln/runtime/cuda/Availability.h"

TEST(KilnCuda, ForwardsTheRuntimesAnswer) {
  EXPECT_EQ(kiln::cuda::is_available(), kiln::runtime::cuda::is_available());
  EXPECT_EQ(kiln::cuda::device_count(), kiln::runtime::cuda::device_count());
  EXPECT_EQ(kiln::cuda::availability_reason(), kiln::runtime::cuda::availability_reason());
  if (!kiln::cuda::is_available()) {
    EXPECT_EQ(kiln::cuda::device_count(), 0);
    EXPECT_EQ(kiln::cuda::availability_reason().rfind("CUDA is not available: ", 0), 0u);
  }
}
