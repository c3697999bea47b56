# libFuzzer target for the checkpoint shard reader (src/ckpt/safetensors.c).
add_executable(fuzz_ckpt_reader ${CMAKE_CURRENT_LIST_DIR}/ckpt_reader.c)
target_compile_options(fuzz_ckpt_reader PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_ckpt_reader PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_ckpt_reader PRIVATE fb_lib)

# libFuzzer target for the fbr1 header of replication (src/ckpt/replicate.c).
add_executable(fuzz_ckpt_repl ${CMAKE_CURRENT_LIST_DIR}/ckpt_repl.c)
target_compile_options(fuzz_ckpt_repl PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_ckpt_repl PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_ckpt_repl PRIVATE fb_ckpt_tool fb_lib)
