// test_main.cpp: gtest main for simcuda's tests: a 64 MiB device and jittered stream workers
// (unless the environment says otherwise), set before anything touches the driver.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("SIMCUDA_DEVICE_BYTES", "67108864", 0);  // support.hpp's kCapacity
  setenv("SIMCUDA_JITTER_US", "50", 0);           // results must not depend on worker timing
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
