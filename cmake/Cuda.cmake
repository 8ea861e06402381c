# Cuda.cmake: the CUDA language, for the programs that need a real GPU (tests/gpu, bench/gpu).
# Enabled only where nvcc is found (check_language); elsewhere those programs are not built
# and everything else builds as before. Sets CAPUCHIN_HAVE_NVCC.
#
# Architectures: sm_90 code (H100/H200) plus compute_90 PTX, which the driver JIT-compiles for
# any newer GPU; override with -DCMAKE_CUDA_ARCHITECTURES=... (nvcc 13 supports 75 and up).
option(CAPUCHIN_GPU_PROGRAMS "Build the real-GPU programs (tests/gpu, bench/gpu) when nvcc is found" ON)
set(CAPUCHIN_HAVE_NVCC OFF)
if(CAPUCHIN_GPU_PROGRAMS)
  include(CheckLanguage)
  # nvcc is rarely on PATH: point check_language at the toolkit find_package(CUDAToolkit) found.
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND CUDAToolkit_NVCC_EXECUTABLE
     AND EXISTS "${CUDAToolkit_NVCC_EXECUTABLE}")
    set(ENV{CUDACXX} "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
    endif()
    enable_language(CUDA)
    set(CAPUCHIN_HAVE_NVCC ON)
  else()
    message(STATUS "nvcc not found: the real-GPU programs (tests/gpu, bench/gpu) are not built")
  endif()
endif()
