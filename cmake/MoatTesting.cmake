include(GoogleTest)

# moat_add_tests(<library> <dir>): one test binary per `<dir>/*_test.cc`, linked with <library>.
# Tests sit beside the code they test; adding a file is enough to add a test binary.
function(moat_add_tests library dir)
  file(GLOB test_sources CONFIGURE_DEPENDS ${dir}/*_test.cc)
  foreach(src ${test_sources})
    get_filename_component(name ${src} NAME_WE)
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE ${library} GTest::gmock GTest::gtest_main)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    # Tests find the moat binary and test data through these variables.
    gtest_discover_tests(${name}
      PROPERTIES ENVIRONMENT "MOAT_BIN=$<TARGET_FILE:moat>;MOAT_SOURCE_DIR=${PROJECT_SOURCE_DIR}"
      DISCOVERY_TIMEOUT 30)
  endforeach()
endfunction()
