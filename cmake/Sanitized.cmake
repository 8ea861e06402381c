# What a sanitized build (asan, tsan presets) compiles differently, in one place.
#
# capuchin_cold_under_sanitizer(targets...): under a sanitizer, the named targets compile at -O0.
#   For code whose speed no test waits on (argument parsing, JSON output, test bodies): the
#   sanitizer checks it as fully as at -O1, and clang's optimiser and code generator, which were
#   80% of an instrumented -O1 compile (the CLI: 53 of 66 s, -ftime-trace), no longer run. The
#   code tests do wait on (the core's planner and simulator, the interposer, simcuda, the
#   workloads) stays at the preset's -O1.
# capuchin_vendor_under_sanitizer(target): the target is built uninstrumented at -O2, as a
#   vendor library (cuBLAS) is never built with the job's sanitizer.
# CAPUCHIN_SANITIZED: TRUE in such a build.
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize")
  set(CAPUCHIN_SANITIZED TRUE)
else()
  set(CAPUCHIN_SANITIZED FALSE)
endif()

function(capuchin_cold_under_sanitizer)
  if(CAPUCHIN_SANITIZED)
    foreach(_t IN LISTS ARGN)
      target_compile_options(${_t} PRIVATE -O0)
    endforeach()
  endif()
endfunction()

function(capuchin_vendor_under_sanitizer target)
  if(CAPUCHIN_SANITIZED)
    target_compile_options(${target} PRIVATE -fno-sanitize=all -O2)
  endif()
endfunction()
