# Run by CTest after the discovered-test list is loaded: labels the Gpu* tests `gpu`, so that
# `ctest -L gpu` selects them and `ctest -LE gpu` leaves them out; and the stream server's
# Serve* tests `serve`.
foreach(_test IN LISTS lingbot_tests_TESTS)
  if(_test MATCHES "^Gpu")
    set_tests_properties("${_test}" PROPERTIES LABELS gpu)
  elseif(_test MATCHES "^Serve")
    set_tests_properties("${_test}" PROPERTIES LABELS serve)
  endif()
endforeach()
