# The root-cause classifier's kernel-log side (src/diag): line rules, the
# bounded scan, classification of what it keeps.
add_executable(fuzz_diag ${CMAKE_CURRENT_LIST_DIR}/diag.c)
target_compile_options(fuzz_diag PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_diag PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_diag PRIVATE fb_diag fb_lib)
