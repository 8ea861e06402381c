// checksum_kernels.cu: compiled with `nvcc -ptx` at build time into the PTX that
// libcapuchin.so embeds (interpose/CMakeLists.txt, device_checksum.cpp). The kernels are in
// checksum_kernels.cuh.
#include "checksum_kernels.cuh"
