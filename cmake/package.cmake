# `make deb`: three Debian packages from the install components
# (cmake/install.cmake), built with cpack under the prefix /usr:
#   dueq           the programs, the systemd units, /etc/dueq/broker.toml
#                  (the embedded store in /var/lib/dueq), and the system
#                  user `dueq` the units run as (created at install)
#   libdueq0.1     libdueq.so.0.1, the C++ client and worker libraries
#   libdueq-dev    headers, the CMake package and dueq.pc
# Split as Debian's policy has it: a program using the library needs only
# libdueq0.1, and the soname's package can sit beside the next one's.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME dueq)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "dueq")
set(CPACK_PACKAGE_CONTACT "dueq maintainers <dueq@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL server library development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/dueq/dueq")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_STRIP_FILES ON)
# The install runs with the prefix /usr and DESTDIR at the staging
# directory, so that cmake/install.cmake's units and config see /usr.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)

set(CPACK_DEBIAN_SERVER_PACKAGE_NAME dueq)
set(CPACK_COMPONENT_SERVER_DESCRIPTION "durable delayed-job queue: broker, worker and CLI
dueq runs every accepted job at its due time and loses none: a broker
(dueq-broker) keeps jobs in Redis or its embedded store and sends them to
workers (dueq-worker runs a command or calls a URL per job) over ZeroMQ.")
# The embedded store is a redis-server the broker starts.
set(CPACK_DEBIAN_SERVER_PACKAGE_DEPENDS "redis-server, adduser")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/postinst;${PROJECT_SOURCE_DIR}/deploy/debian/postrm;${PROJECT_SOURCE_DIR}/deploy/debian/conffiles")
set(CPACK_DEBIAN_SERVER_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_LIBRARY_PACKAGE_NAME libdueq${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
set(CPACK_DEBIAN_LIBRARY_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_LIBRARY_DESCRIPTION "dueq client and worker libraries
The C++ libraries programs use to enqueue jobs to a dueq broker and to
run them as a worker.")
# ldconfig by trigger (the library is in the multiarch directory, where
# CPack adds no ldconfig calls of its own).
set(CPACK_DEBIAN_LIBRARY_PACKAGE_CONTROL_EXTRA
    "${PROJECT_SOURCE_DIR}/deploy/debian/triggers;${PROJECT_SOURCE_DIR}/deploy/debian/library/postinst;${PROJECT_SOURCE_DIR}/deploy/debian/library/postrm")
set(CPACK_DEBIAN_LIBRARY_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libdueq-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS "libdueq${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR} (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION "dueq client and worker libraries: development files
Headers, a CMake package (find_package(dueq): dueq::client, dueq::worker)
and a pkg-config file (dueq) for building against libdueq.")

# Each package's copyright file.
foreach(component server library development)
  string(TOUPPER ${component} upper)
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${CPACK_DEBIAN_${upper}_PACKAGE_NAME} COMPONENT ${component})
endforeach()

include(CPack)
