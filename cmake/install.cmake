# What `cmake --install` (and `make install PREFIX=...`) puts under the
# prefix: the programs, the public headers (include/dueq: only the standard
# library behind them), one shared library libdueq.so with the C++ client
# and worker libraries, a CMake package (find_package(dueq): dueq::client,
# dueq::worker) and a pkg-config file (dueq.pc).
#
# One library rather than a client and a worker library: both are built on
# dueq_common, which two shared libraries would each carry a copy of.
# Made of the static libraries' objects (PIC), so nothing compiles twice.
# Libraries in the multiarch directory under any prefix, as Debian has them
# (GNUInstallDirs picks it for /usr alone): the package's and an install's
# pkg-config file are then where pkg-config looks on this system.
if(CMAKE_LIBRARY_ARCHITECTURE AND NOT DEFINED CMAKE_INSTALL_LIBDIR)
  set(CMAKE_INSTALL_LIBDIR lib/${CMAKE_LIBRARY_ARCHITECTURE})
endif()
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# -fno-semantic-interposition: PIC code whose calls within the library may
# still be inlined and bound locally, as in the programs that link it
# statically (the broker, the workers), which pay nothing for it then.
foreach(lib dueq_common dueq_client dueq_worker)
  set_target_properties(${lib} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_compile_options(${lib} PRIVATE -fno-semantic-interposition)
endforeach()

add_library(dueq_shared SHARED $<TARGET_OBJECTS:dueq_common> $<TARGET_OBJECTS:dueq_client> $<TARGET_OBJECTS:dueq_worker>)
# 0.x: every minor release may break the ABI, so the soname names it (libdueq.so.0.1).
set_target_properties(dueq_shared PROPERTIES OUTPUT_NAME dueq VERSION ${PROJECT_VERSION}
                                             SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
                                             LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
# The libraries' own dependencies (their objects are this library's; the
# archives themselves add nothing: every symbol is already defined).
target_link_libraries(dueq_shared PRIVATE dueq_client dueq_worker)
target_link_options(dueq_shared PRIVATE -Wl,--no-undefined)
target_include_directories(dueq_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(dueq_shared INTERFACE cxx_std_23)
# A sanitized build's library needs the sanitizer runtimes in the program too.
if(DUEQ_SANITIZE)
  set(DUEQ_CONSUMER_FLAGS -fsanitize=address,undefined)
  target_link_options(dueq_shared INTERFACE $<INSTALL_INTERFACE:${DUEQ_CONSUMER_FLAGS}>)
endif()

# Three components, which `make deb` makes three Debian packages of
# (cmake/package.cmake): the server (programs, units, config), the
# library, and what building against it needs.
install(TARGETS dueq-broker dueq-worker dueq dueq-example-worker RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)
install(TARGETS dueq_shared EXPORT dueqTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library NAMELINK_COMPONENT development
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/dueq DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT development)

# The systemd units, naming the programs where this install puts them, and
# the default broker config. Both go where the prefix is known only when
# installing (cmake --install --prefix, cpack): under /usr (the Debian
# package) to /lib/systemd/system and /etc/dueq, under any other prefix
# below it.
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL /usr)
    set(units /lib/systemd/system)
    set(etc /etc/dueq)
  else()
    set(units \${CMAKE_INSTALL_PREFIX}/lib/systemd/system)
    set(etc \${CMAKE_INSTALL_PREFIX}/etc/dueq)
  endif()
  foreach(unit dueq-broker.service dueq-worker@.service)
    file(READ \"${PROJECT_SOURCE_DIR}/deploy/\${unit}\" text)
    string(REPLACE /usr/local/bin \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\" text \"\${text}\")
    file(WRITE \"\$ENV{DESTDIR}\${units}/\${unit}\" \"\${text}\")
  endforeach()
  file(INSTALL \"${PROJECT_SOURCE_DIR}/deploy/debian/broker.toml\" DESTINATION \"\${etc}\")  # DESTDIR: file(INSTALL) adds it
  " COMPONENT server)

set(DUEQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dueq)
install(EXPORT dueqTargets NAMESPACE dueq:: FILE dueqTargets.cmake DESTINATION ${DUEQ_CMAKE_DIR} COMPONENT development)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/dueqConfig.cmake.in ${CMAKE_BINARY_DIR}/dueqConfig.cmake
                              INSTALL_DESTINATION ${DUEQ_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/dueqConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/dueqConfig.cmake ${CMAKE_BINARY_DIR}/dueqConfigVersion.cmake DESTINATION ${DUEQ_CMAKE_DIR}
        COMPONENT development)

string(JOIN " " DUEQ_PC_LINK_FLAGS ${DUEQ_CONSUMER_FLAGS})
# The prefix as seen from the .pc file's own folder, so that an install
# under another prefix (cmake --install --prefix) still finds itself.
file(RELATIVE_PATH DUEQ_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/dueq.pc.in ${CMAKE_BINARY_DIR}/dueq.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/dueq.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)

include(${PROJECT_SOURCE_DIR}/cmake/package.cmake)
