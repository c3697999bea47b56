/*
 * fbw1_peers.c -- libFuzzer target for `firebreak watch --peers`
 * (fb__fbw1_peers_entry, fb__fbw1_peers_split in src/supervisor/fbw1.c):
 * any byte string is refused or yields one entry of node names within
 * bounds, and the entry splits into 1..FB__PEER_COPIES_MAX valid names.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/fbw1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size || size > 1 << 16)
        return 0;
    long long node_id = data[0] % 8;
    char *list = malloc(size);
    if (!list)
        return 0;
    memcpy(list, data + 1, size - 1);
    list[size - 1] = '\0';
    char to[FB__PEERS_ENTRY_MAX], addr[FB__PEER_COPIES_MAX][FB__FBW1_NODE_MAX];
    memset(to, 'x', sizeof to);
    if (fb__fbw1_peers_entry(list, node_id, to, sizeof to) == 0) {
        if (!memchr(to, '\0', sizeof to))
            __builtin_trap();
        if (to[0]) {
            int n = fb__fbw1_peers_split(to, addr);
            if (n < 1 || n > FB__PEER_COPIES_MAX)
                __builtin_trap();
            for (int i = 0; i < n; i++)
                if (!fb__fbw1_node_name_ok(addr[i]))
                    __builtin_trap();
        }
    }
    free(list);
    return 0;
}
