# All third-party dependencies, found from Debian packages (scripts/install-deps.sh installs
# them). Nothing is downloaded or vendored.
find_package(Boost 1.74 REQUIRED)            # Asio is header-only
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
find_package(simdjson REQUIRED)
find_package(Threads REQUIRED)

# The CUDA toolkit: headers (and later cupti/cudart) from /usr/local/cuda. No GPU is needed.
if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit REQUIRED)

if(CAPUCHIN_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(CAPUCHIN_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
