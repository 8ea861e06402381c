# CAPUCHIN_PRELOAD_PREFIX: what must come before libcapuchin.so in LD_PRELOAD for a test that
# preloads it into a program not built with the same sanitizer. An ASan-built shared object
# needs the ASan runtime first in the initial library list, so the asan preset preloads
# libasan (and libubsan) ahead of it; other presets need nothing.
set(CAPUCHIN_PRELOAD_PREFIX "")
foreach(_rt asan tsan ubsan)
  if(CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(address)" AND _rt STREQUAL "asan"
     OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(thread)" AND _rt STREQUAL "tsan"
     OR CMAKE_CXX_FLAGS MATCHES "-fsanitize=[^ ]*(undefined)" AND _rt STREQUAL "ubsan")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=lib${_rt}.so
                    OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(EXISTS "${_path}")
      list(APPEND CAPUCHIN_PRELOAD_PREFIX "${_path}")
    endif()
  endif()
endforeach()
string(REPLACE ";" ":" CAPUCHIN_PRELOAD_PREFIX "${CAPUCHIN_PRELOAD_PREFIX}")
if(CAPUCHIN_PRELOAD_PREFIX)
  string(APPEND CAPUCHIN_PRELOAD_PREFIX ":")
endif()
