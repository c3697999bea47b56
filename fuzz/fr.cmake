# Flight recorder: the pickle reader, and the dump loader + analysis.
foreach(t fr_pickle fr_dump)
  add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_${t} PRIVATE fb_fr_analyze fb_lib)
endforeach()
