# The fbw1 watcher-line parser and formatter (src/supervisor/fbw1.c).
add_executable(fuzz_fbw1_line ${CMAKE_CURRENT_LIST_DIR}/fbw1_line.c)
target_compile_options(fuzz_fbw1_line PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_fbw1_line PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_fbw1_line PRIVATE fb_supervisor fb_lib)
# `firebreak watch --peers` (the peer tier's addresses, fbw1.c).
add_executable(fuzz_fbw1_peers ${CMAKE_CURRENT_LIST_DIR}/fbw1_peers.c)
target_compile_options(fuzz_fbw1_peers PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_fbw1_peers PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_fbw1_peers PRIVATE fb_supervisor fb_lib)
