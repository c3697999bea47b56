# The supervisor's segment reader against hostile segment images, changed
# again after attach (src/lib/segment.c, src/fr/load_ring.c).
add_executable(fuzz_lib_segment ${CMAKE_CURRENT_LIST_DIR}/lib_segment.c)
target_compile_options(fuzz_lib_segment PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_lib_segment PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_lib_segment PRIVATE fb_fr_analyze fb_lib)
