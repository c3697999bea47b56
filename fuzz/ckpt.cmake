# libFuzzer target for the checkpoint shard reader (src/ckpt/safetensors.c).
add_executable(fuzz_ckpt_reader ${CMAKE_CURRENT_LIST_DIR}/ckpt_reader.c)
target_compile_options(fuzz_ckpt_reader PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_ckpt_reader PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_ckpt_reader PRIVATE fb_lib)
