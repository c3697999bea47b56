# Parsers of outside input in src/common and src/lib.
foreach(t common_json lib_inject)
  add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_${t} PRIVATE fb_lib)
endforeach()
