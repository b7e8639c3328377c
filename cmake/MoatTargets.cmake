include(GoogleTest)

# moat_add_tests(<library> <dir> [PREFIX <p>] [SERIAL <name>...]): one test binary per
# `<dir>/*_test.cc` (named <p><file name>: PREFIX keeps two folders' config_test apart),
# linked with <library>. Tests sit beside the code they test; adding a file is enough to add a
# test binary. The binaries named after SERIAL run with no other test beside them (ctest
# RUN_SERIAL), for tests of host-wide state that any concurrent sandbox would disturb.
function(moat_add_tests library dir)
  cmake_parse_arguments(PARSE_ARGV 2 arg "" "PREFIX" "SERIAL")
  file(GLOB test_sources CONFIGURE_DEPENDS ${dir}/*_test.cc)
  foreach(src ${test_sources})
    get_filename_component(name ${src} NAME_WE)
    set(name "${arg_PREFIX}${name}")
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE ${library} GTest::gmock GTest::gtest_main)
    set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    # One variable only: gtest_discover_tests splits a list-valued ENVIRONMENT into separate
    # property arguments, garbling the properties after it.
    set(serial FALSE)
    if(name IN_LIST arg_SERIAL)
      set(serial TRUE)
    endif()
    gtest_discover_tests(${name}
      PROPERTIES ENVIRONMENT "MOAT_BIN=$<TARGET_FILE:moat>" RUN_SERIAL ${serial}
      DISCOVERY_TIMEOUT 30)
  endforeach()
endfunction()

# moat_add_library(<name> [DEPS <target>...] [EXCLUDE <file name>...]): one folder, one layer: a
# static library of the folder's *.cc (tests, main.cc and the EXCLUDEd files left out), with the
# repository root as its include path. DEPS are the layers below it; scripts/check_layers.py
# (ctest "layering") refuses an #include that points up.
function(moat_add_library name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "DEPS;EXCLUDE")
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER sources EXCLUDE REGEX "(_test|/main)\\.cc$")
  foreach(excluded ${arg_EXCLUDE})
    list(REMOVE_ITEM sources ${CMAKE_CURRENT_SOURCE_DIR}/${excluded})
  endforeach()
  add_library(${name} STATIC ${sources})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${arg_DEPS})
endfunction()
