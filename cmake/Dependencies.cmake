# Every dependency comes from a Debian package; scripts/install-deps.sh installs them.
find_package(PkgConfig REQUIRED)
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)
find_package(absl CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(Threads REQUIRED)
find_package(GTest CONFIG REQUIRED)
# OpenSSL's libcrypto (libssl-dev, which libcpp-httplib-dev depends on): SHA-256 for the egress
# audit log, and TLS for the daemons.
find_package(OpenSSL REQUIRED)
# The daemons' HTTP and metrics. Debian's cpp-httplib is a shared library built with these
# defines; the header must see the same ones or the ABI differs (its pkg-config Cflags carry
# them). GLOBAL: every folder that serves or calls HTTP links the same target.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
find_package(prometheus-cpp CONFIG REQUIRED GLOBAL)

# Link Abseil, yaml-cpp, libseccomp and libcrypto statically (libstdc++ too, for the moat binary:
# see sandbox/CMakeLists.txt; not for moat-agent, whose Debian httplib and prometheus-cpp bring the
# shared libstdc++, and one process must not carry two). Debian ships them as ~30 shared
# objects, and loading those costs `moat run` about 3 ms at every start, more than a third of a
# sandbox's whole setup. The static archives come in the same -dev packages.
option(MOAT_STATIC_DEPS "Link Abseil, yaml-cpp, libseccomp and libcrypto statically" ON)
add_library(moat_deps INTERFACE)
if(MOAT_STATIC_DEPS)
  get_target_property(absl_base_so absl::base IMPORTED_LOCATION_NONE)
  if(NOT absl_base_so)
    get_target_property(absl_base_so absl::base LOCATION)
  endif()
  get_filename_component(absl_libdir "${absl_base_so}" DIRECTORY)
  file(GLOB absl_archives "${absl_libdir}/libabsl_*.a")
  find_library(YAML_CPP_ARCHIVE NAMES libyaml-cpp.a REQUIRED)
  find_library(SECCOMP_ARCHIVE NAMES libseccomp.a REQUIRED)
  find_library(CRYPTO_ARCHIVE NAMES libcrypto.a REQUIRED)
  # A group: the archives depend on each other in no simple order.
  target_link_libraries(moat_deps INTERFACE
    -Wl,--start-group ${absl_archives} -Wl,--end-group ${YAML_CPP_ARCHIVE} ${SECCOMP_ARCHIVE}
    ${CRYPTO_ARCHIVE})
  target_include_directories(moat_deps INTERFACE ${SECCOMP_INCLUDE_DIRS})
  get_target_property(yaml_includes yaml-cpp INTERFACE_INCLUDE_DIRECTORIES)
  if(yaml_includes)
    target_include_directories(moat_deps INTERFACE ${yaml_includes})
  endif()
else()
  target_link_libraries(moat_deps INTERFACE
    PkgConfig::SECCOMP absl::status absl::statusor absl::strings absl::str_format absl::time
    absl::synchronization absl::flat_hash_map absl::cleanup yaml-cpp OpenSSL::Crypto)
endif()
target_link_libraries(moat_deps INTERFACE nlohmann_json::nlohmann_json Threads::Threads)
