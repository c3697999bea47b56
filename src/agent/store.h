/*
 * store.h -- the agent's own SQLite database (one writer: the agent's
 * sampling thread).  Schema version 1.0, documented in docs/agent.md; the
 * report reads it beside the supervisor's journal.sqlite.
 */
#ifndef FB_AGENT_STORE_H
#define FB_AGENT_STORE_H

#include "agent/agent.h"

typedef struct fb__agent_db fb__agent_db;

/* Open or create; 0, or a negative code with a sentence in err. */
int fb__agent_db_open(fb__agent_db **out, const char *path, const char *host,
                      double interval_s, char *err, size_t err_size);
void fb__agent_db_close(fb__agent_db *db);

/* One transaction per sample. */
void fb__agent_db_begin(fb__agent_db *db);
void fb__agent_db_commit(fb__agent_db *db);

void fb__agent_db_gpu(fb__agent_db *db, double t, const fb__gpu_sample *g);
void fb__agent_db_host(fb__agent_db *db, double t, const char *sensor,
                       const char *kind, double value);
void fb__agent_db_rank(fb__agent_db *db, double t, const fb__rank_sample *r);
/* evidence: a JSON object's text. */
void fb__agent_db_event(fb__agent_db *db, double t, const char *kind,
                        const char *subject, const char *severity,
                        const char *detail, const char *evidence);

/* Statements that failed (the agent reports them once in a while). */
unsigned long fb__agent_db_errors(const fb__agent_db *db);

#endif
