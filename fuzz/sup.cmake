# The reader of PyTorch's TORCHELASTIC_ERROR_FILE (src/supervisor/errorfile.c).
add_executable(fuzz_sup_error_file ${CMAKE_CURRENT_LIST_DIR}/sup_error_file.c)
target_compile_options(fuzz_sup_error_file PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_sup_error_file PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_sup_error_file PRIVATE fb_supervisor fb_lib)
# What Slurm's commands print: srun's log, `scontrol -o show node`
# (src/supervisor/slurmtext.c).
add_executable(fuzz_slurm_text ${CMAKE_CURRENT_LIST_DIR}/slurm_text.c)
target_compile_options(fuzz_slurm_text PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_slurm_text PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_slurm_text PRIVATE fb_supervisor fb_lib)
# The last lines of a rank's log, quoted in its incident
# (src/supervisor/ranklog.c).
add_executable(fuzz_sup_rank_log ${CMAKE_CURRENT_LIST_DIR}/sup_rank_log.c)
target_compile_options(fuzz_sup_rank_log PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_sup_rank_log PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_sup_rank_log PRIVATE fb_supervisor fb_lib)
