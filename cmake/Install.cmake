# Install.cmake: what `cmake --install`, the .deb (CPack) and the Python wheel
# (scikit-build-core, pyproject.toml) put where. Only what a user runs: the two programs, the
# interposer, the public headers and the docs; no test, simcuda, benchmark or GPU program has an
# install rule.
#
# Layout (PREFIX/...):
#   bin/capuchin, bin/capuchind
#   lib/capuchin/libcapuchin.so    a private directory: the library is an LD_PRELOAD plug-in,
#                                  not one to link against (no SONAME, no headers of its own),
#                                  so it stays off the linker's search path and out of
#                                  /usr/lib's shared namespace (Debian policy for private
#                                  libraries: /usr/lib/<package>/)
#   include/capuchin/*.hpp, share/doc/capuchin/{README.md,TRACE_FORMAT.md}
# bin/ and lib/capuchin/ are fixed (not CMAKE_INSTALL_BINDIR/LIBDIR): `capuchin run` finds the
# library at CAPUCHIN_LIBDIR_FROM_BINDIR from its own executable (cli/install_paths.cpp), so a
# moved or copied prefix keeps working. Nothing installed needs an RPATH (the project's own
# libraries are static; the rest are the system's), so CMake's default of clearing the build
# RPATH at install leaves none: relocatable by construction (tests/install checks it).
include(GNUInstallDirs)

if(SKBUILD)
  # The wheel: the programs go to the environment's scripts directory (venv/bin, ~/.local/bin,
  # /usr/local/bin: on PATH) and the library to its data directory's lib/capuchin (venv/,
  # ~/.local, /usr/local): the same bin/ -> ../lib/capuchin/ the CLI looks for, whatever the
  # scheme pip installs to. Headers and docs are not for a wheel's user.
  install(TARGETS capuchin_cli capuchind RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
  install(TARGETS capuchin_interpose LIBRARY DESTINATION ${SKBUILD_DATA_DIR}/${CAPUCHIN_INSTALL_PRIVATE_LIBDIR})
  return()
endif()

install(TARGETS capuchin_cli capuchind RUNTIME DESTINATION ${CAPUCHIN_INSTALL_BINDIR})
install(TARGETS capuchin_interpose LIBRARY DESTINATION ${CAPUCHIN_INSTALL_PRIVATE_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/capuchin DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/TRACE_FORMAT.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
if(EXISTS ${PROJECT_SOURCE_DIR}/LICENSE)
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()

# ---- CPack: a .deb (cpack -G DEB in the build tree) ---------------------------------------
set(CPACK_PACKAGE_NAME capuchin)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "train CUDA jobs in less GPU memory: swap, prefetch and recompute tensors")
set(CPACK_PACKAGE_DESCRIPTION
  "capuchin watches an unmodified CUDA training job's device memory through an LD_PRELOAD\n\
interposer (libcapuchin.so), learns its per-iteration access pattern and keeps it within a\n\
memory budget by swapping tensors to host memory, prefetching and recomputing them\n\
(Capuchin, ASPLOS 2020). capuchind plans for every job of a user; the capuchin command runs\n\
jobs, queries them, simulates traces and writes reports.")
set(CAPUCHIN_PACKAGE_CONTACT "capuchin maintainers <maintainers@users.noreply.a-seed-e48cfafd.example>"
    CACHE STRING "the .deb's Maintainer field")
set(CPACK_PACKAGE_CONTACT "${CAPUCHIN_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # capuchin_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_STRIP_FILES ON)
if(EXISTS ${PROJECT_SOURCE_DIR}/LICENSE)
  set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
endif()
# Depends: from the binaries themselves (dpkg-shlibdeps: libc6, zlib1g, libsimdjson, libspdlog, ...
# at the versions this build linked), else the packages this Debian 12 build links against.
# (CPack's shlibdeps step also needs `file`, which scripts/install-deps.sh installs.)
find_program(CAPUCHIN_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(CAPUCHIN_FILE_PROGRAM file)
if(CAPUCHIN_DPKG_SHLIBDEPS AND CAPUCHIN_FILE_PROGRAM)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libstdc++6, libgcc-s1, zlib1g, libsimdjson14, libspdlog1.10, libfmt9")
endif()
set(CPACK_GENERATOR DEB)
include(CPack)
