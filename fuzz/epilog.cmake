# The marker naming a node-memory directory's Slurm job, read by Slurm's
# Epilog (src/supervisor/epilog.c).
add_executable(fuzz_epilog_marker ${CMAKE_CURRENT_LIST_DIR}/epilog_marker.c)
target_compile_options(fuzz_epilog_marker PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_epilog_marker PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_epilog_marker PRIVATE fb_supervisor fb_lib)
