# Simulator: the rates-file parser of `firebreak sim --rates`.
add_executable(fuzz_sim_rates ${CMAKE_CURRENT_LIST_DIR}/sim_rates.c)
target_compile_options(fuzz_sim_rates PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_sim_rates PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_sim_rates PRIVATE fb_sim)
