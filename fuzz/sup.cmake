# The supervisor's readers of outside input:
#   sup_error_file  PyTorch's TORCHELASTIC_ERROR_FILE (errorfile.c)
#   slurm_text      what Slurm's commands print: srun's log, `scontrol -o
#                   show node` (slurmtext.c)
#   sup_rank_log    the last lines of a rank's log, quoted in its incident
#                   (ranklog.c)
#   sup_tee         a console rank's output on its way to the terminal
#                   (tee.c, --console-ranks)
#   sup_shim_req    a request to the shim server's helper (proc.c): the
#                   supervisor's own, on a private socket, bounded all the same
#   sup_shim_args   the arguments of the shim server program (proc.c): the
#                   supervisor's own, but anyone can run fb-shim-server
foreach(t sup_error_file slurm_text sup_rank_log sup_tee sup_shim_req sup_shim_args)
  add_executable(fuzz_${t} ${CMAKE_CURRENT_LIST_DIR}/${t}.c)
  target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(fuzz_${t} PRIVATE fb_supervisor fb_lib)
endforeach()
