# Health / agent parsers: kernel log records and XID lines, sysfs values.
# parse.c is compiled into each target so libFuzzer's coverage sees it.
foreach(t health_kmsg health_sysfs)
  add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c
                 ${PROJECT_SOURCE_DIR}/src/health/parse.c)
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_${t} PRIVATE fb_lib)
endforeach()
