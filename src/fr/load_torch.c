/*
 * load_torch.c -- PyTorch flight-recorder dumps (REFERENCE §4) into the
 * analyzer's model.  (JSON and pickle readers: in progress.)
 */
#include <errno.h>
#include <stdio.h>

#include "firebreak/firebreak.h"
#include "fr/model.h"

int fr_load_torch(fr_model *m, const char *path, const void *data, size_t len,
                  int rank_hint, char *err, size_t errsz)
{
    (void)m; (void)data; (void)len; (void)rank_hint;
    snprintf(err, errsz, "%s: not a firebreak ring or a PyTorch dump", path);
    return FB_EFORMAT;
}
