# cmake -DBINARY=<test binary> -DFILTERS=<filter>|<filter>|... -P check_test_filters.cmake
# The ctest entries that share a binary (hf3fs_meta_add_test ... IN) run it with one --gtest_filter
# each. This fails unless those filters together select every test of the binary, each exactly once:
# a test that no filter selects would never run, and one that two select would run twice.
function(count_tests out)
  execute_process(COMMAND ${BINARY} ${ARGN} --gtest_list_tests OUTPUT_VARIABLE listing RESULT_VARIABLE status)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${BINARY} ${ARGN} --gtest_list_tests exited with ${status}")
  endif()
  # Test names are the indented lines; suite names are not.
  string(REGEX MATCHALL "\n  [^\n]+" tests "\n${listing}")
  list(LENGTH tests count)
  set(${out} ${count} PARENT_SCOPE)
endfunction()

count_tests(total)
string(REPLACE "|" ";" filters "${FILTERS}")
set(selected 0)
set(patterns "")
foreach(filter ${filters})
  count_tests(count "--gtest_filter=${filter}")
  math(EXPR selected "${selected} + ${count}")
  list(APPEND patterns ${filter})
endforeach()
list(JOIN patterns ":" all_patterns)
count_tests(unselected "--gtest_filter=-${all_patterns}")
if(NOT unselected EQUAL 0 OR NOT selected EQUAL total)
  message(FATAL_ERROR "${BINARY}: ${total} tests; its ctest entries select ${selected} (counting repeats), and "
                      "${unselected} are selected by none (a TEST/TEST_F/TEST_P suite tests/CMakeLists.txt "
                      "does not see, or a suite in two entries)")
endif()
message(STATUS "${BINARY}: its ctest entries select each of its ${total} tests once")
