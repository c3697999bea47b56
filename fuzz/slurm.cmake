# The slurm launcher's watcher-line parser (src/supervisor/slurm.c).
add_executable(fuzz_slurm_line ${CMAKE_CURRENT_LIST_DIR}/slurm_line.c)
target_compile_options(fuzz_slurm_line PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_slurm_line PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_slurm_line PRIVATE fb_supervisor fb_lib)
