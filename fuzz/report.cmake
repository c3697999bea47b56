# The report's root-cause classifier (health / flight-recorder JSON, logs).
add_executable(fuzz_report ${CMAKE_CURRENT_LIST_DIR}/report.c)
target_compile_options(fuzz_report PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_report PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_report PRIVATE fb_report fb_lib)
# The report's outputs (text, JSON, HTML) over a journal's text.
add_executable(fuzz_report_out ${CMAKE_CURRENT_LIST_DIR}/report_out.c)
target_compile_options(fuzz_report_out PRIVATE -fsanitize=fuzzer)
target_link_options(fuzz_report_out PRIVATE -fsanitize=fuzzer)
target_link_libraries(fuzz_report_out PRIVATE fb_report fb_lib)
