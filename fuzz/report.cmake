# The report's root-cause classifier (health / flight-recorder JSON, logs).
add_executable(fuzz_report ${CMAKE_CURRENT_LIST_DIR}/report.c)
target_compile_options(fuzz_report PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_report PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_report PRIVATE fb_report fb_lib)
