/*
 * shim_server_main.c -- fb-shim-server, the program of `firebreak run`'s
 * shim server (proc.h, fb__shim_server_start): linked with proc.c alone,
 * and statically where the build allows, so that the shims it forks are
 * copies of a process of a few mappings.  Not a command: started by the
 * supervisor with its socket's descriptor.
 */
#include "supervisor/proc.h"

int main(int argc, char **argv)
{
    return fb__shim_server_main(argc, argv);
}
