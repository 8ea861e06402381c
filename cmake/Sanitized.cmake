# What the test programs, and a sanitized build (asan, tsan presets), compile differently, in
# one place. Product code (the core, the interposer, the daemon, the CLI), simcuda and the
# benchmarks compile at their preset's level (the CLI at -O2 in release and capuchin_args at -O1,
# -O0 sanitized: their CMakeLists say why; simblas and the job, below, excepted).
#
# capuchin_test_code(targets...): programs made of test code only (unit-test bodies, fuzz
#   drivers): in release they compile at -O1, not -O3. GCC's optimiser was 77% of a release
#   compile (-ftime-report), and -O1 compiles a batch in 60% of -O3's time (30 against 51 s
#   for a CLI batch); these programs' time goes to the library code they call, which keeps
#   -O3 (sim_tests ran 57 s against 54, learn_tests 25 against 28, 2026-12-07). The linker
#   may take their -O1 copies of inline code they share with a static library (as below).
#   Under a sanitizer they keep the preset's -O1.
# capuchin_cold_test_code(targets...): the same, and under a sanitizer -O0: for test programs
#   whose own code no test waits on (unit-test bodies, the capture checker). The sanitizer
#   checks it as fully as at -O1, and clang's optimiser and code generator, which were 80% of an
#   instrumented -O1 compile (53 of 66 s for a CLI batch, -ftime-trace), no longer run.
#   Header-only code they compile in runs at -O0 too (DistinctWords' randomized check: 8 s
#   instead of 0.2). Code tests wait on stays at the preset's -O1 (the core, the interposer,
#   simcuda, the daemon, the CLI, learn_tests, sim_tests): a target at -O0 may
#   also give the linker -O0 copies of the inline code it shares with a library (Asio's, the
#   core's templates). At -O0 the CLI's tests took twice as long (cli.sim 41 -> 84 s) and the
#   daemon's flood test five times, for 15-85 s less compile.
# capuchin_vendor_under_sanitizer(target): the target is built uninstrumented at -O2, as a
#   vendor library (cuBLAS) is never built with the job's sanitizer.
# capuchin_job_code(targets...): the job (the workloads, the executor tests' CUDA programs, their
#   kernels). Under ASan + UBSan they build uninstrumented at -O2, as a real training job is never
#   built with the sanitizer capuchin is tested under: the time a sanitized test takes is then
#   capuchin's, not the job's arithmetic. What is lost: the job's own bugs, and redzones around
#   its stack and globals (a capuchin overrun of a job's stack variable, e.g. a loss read back
#   into a local float, is no longer reported; its heap buffers still come from ASan's malloc,
#   with redzones). With clang they keep UBSan's function-type check (-fsanitize=function). The
#   driver they run on, simcuda, stays instrumented: it is the test bed every end-to-end test
#   relies on, and no other CI build sanitizes it. Under TSan they stay instrumented too: TSan
#   sees a happens-before only in code it instruments, and a kernel body's writes only there.
# CAPUCHIN_SANITIZED: TRUE in such a build; the CMake files ask it (Preload.cmake and the
#   ASan-only tests ask which sanitizer).
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  set(CAPUCHIN_SANITIZED TRUE)
else()
  set(CAPUCHIN_SANITIZED FALSE)
endif()

function(capuchin_test_code)
  if(NOT CAPUCHIN_SANITIZED)
    foreach(_t IN LISTS ARGN)
      target_compile_options(${_t} PRIVATE $<$<CONFIG:Release>:-O1>)
    endforeach()
  endif()
endfunction()

function(capuchin_cold_test_code)
  foreach(_t IN LISTS ARGN)
    if(CAPUCHIN_SANITIZED)
      target_compile_options(${_t} PRIVATE -O0)
    else()
      capuchin_test_code(${_t})
    endif()
  endforeach()
endfunction()

function(capuchin_vendor_under_sanitizer target)
  if(CAPUCHIN_SANITIZED)
    target_compile_options(${target} PRIVATE -fno-sanitize=all -O2)
  endif()
endfunction()

function(capuchin_job_code)
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
    foreach(_t IN LISTS ARGN)
      target_compile_options(${_t} PRIVATE -fno-sanitize=all -O2
                             "$<$<CXX_COMPILER_ID:Clang>:-fsanitize=function;-fno-sanitize-recover=function>")
    endforeach()
  endif()
endfunction()
