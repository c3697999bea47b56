/*
 * sdc.h -- the supervisor's silent-data-corruption comparison (sdc.c,
 * docs/sdc.md).
 */
#ifndef FB_SUPERVISOR_SDC_H
#define FB_SUPERVISOR_SDC_H

struct fb__sup;
typedef struct fb__sup_sdc fb__sup_sdc;

/* One watch pass: read the ranks' new SDC records, compare the pieces
 * every rank has sent; a disagreement fails the attempt (kind `sdc`). */
void fb__sup_sdc_pass(struct fb__sup *s);
/* The attempt failed with kind `sdc`: set aside the checkpoints taken
 * after the corrupted piece last agreed, so the restart restores one
 * before the corruption. */
void fb__sup_sdc_on_failure(struct fb__sup *s);
/* The attempt ended: log how many pieces were compared. */
void fb__sup_sdc_attempt_end(struct fb__sup *s);
void fb__sup_sdc_free(struct fb__sup *s);

#endif
