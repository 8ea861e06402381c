# CAPUCHIN_PRELOAD_PREFIX: what must come before libcapuchin.so in LD_PRELOAD for a test that
# preloads it into a program not built with the same sanitizer. An ASan-built shared object
# needs the ASan runtime first in the initial library list, so the asan preset preloads it
# ahead of libcapuchin.so; other presets need nothing. GCC's runtimes are libasan, libtsan and
# libubsan; clang's (built with -shared-libasan) are libclang_rt.<name>-<arch>.so, its ASan
# runtime holding UBSan's too.
set(CAPUCHIN_PRELOAD_PREFIX "")
set(_asan OFF)
if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*address")
  set(_asan ON)
endif()
foreach(_rt asan tsan ubsan)
  if(_rt STREQUAL "asan" AND _asan
     OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(thread)" AND _rt STREQUAL "tsan"
     OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(undefined)" AND _rt STREQUAL "ubsan")
    if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      if(_rt STREQUAL "ubsan" AND _asan)
        continue()  # in clang's ASan runtime
      endif()
      set(_name "libclang_rt.${_rt}-${CMAKE_SYSTEM_PROCESSOR}.so")
      if(_rt STREQUAL "ubsan")
        set(_name "libclang_rt.ubsan_standalone-${CMAKE_SYSTEM_PROCESSOR}.so")
      endif()
    else()
      set(_name "lib${_rt}.so")
    endif()
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_name}
                    OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(NOT EXISTS "${_path}" AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
      # Newer LLVMs keep runtimes per target triple, without the architecture in the name.
      string(REPLACE "-${CMAKE_SYSTEM_PROCESSOR}.so" ".so" _name "${_name}")
      execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${_name}
                      OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE)
    endif()
    if(EXISTS "${_path}")
      list(APPEND CAPUCHIN_PRELOAD_PREFIX "${_path}")
      if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
        # -shared-libasan links the runtime by name only; the build's programs find it here.
        get_filename_component(_dir "${_path}" DIRECTORY)
        list(APPEND CMAKE_BUILD_RPATH "${_dir}")
      endif()
    else()
      message(FATAL_ERROR "sanitizer runtime ${_name} not found (${CMAKE_CXX_COMPILER} -print-file-name): "
                          "tests preloading libcapuchin.so need it")
    endif()
  endif()
endforeach()
string(REPLACE ";" ":" CAPUCHIN_PRELOAD_PREFIX "${CAPUCHIN_PRELOAD_PREFIX}")
if(CAPUCHIN_PRELOAD_PREFIX)
  string(APPEND CAPUCHIN_PRELOAD_PREFIX ":")
endif()
