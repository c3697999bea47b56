/*
 * load.c -- read a run directory's journal.sqlite (and agent.sqlite when
 * it is there) into an fb__report_run.
 *
 * The journal belongs to the supervisor: we open it read-only, name only
 * the columns we know (newer minor versions add columns and tables, which
 * we ignore), refuse other major versions, and turn SQLite's BUSY, NOTADB
 * and CORRUPT into messages that name the file and say what to do.
 */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "firebreak/firebreak.h"

typedef struct loader {
    sqlite3 *db;
    const char *path;
    char *err;
    size_t errsz;
} loader;

/* Map an SQLite failure to our code and a message naming the file. */
/* SQLite would block forever opening a FIFO (and read a device): the
 * database and the side files SQLite opens next to it (-wal, -shm,
 * -journal), where present, must be regular files.  Checked with
 * fb__open_regular, which never blocks.  0, or FB_ENOTREG / -errno with
 * err naming the file. */
static int sqlite_files_regular(const char *path, char *err, size_t errsz)
{
    static const char *const side[] = {"", "-wal", "-shm", "-journal"};
    for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
        char p[4200];
        struct stat st;
        snprintf(p, sizeof p, "%s%s", path, side[i]);
        if (i > 0 && lstat(p, &st) != 0)
            continue; /* no side file: nothing to check */
        int fd = fb__open_regular(p, 0);
        if (fd < 0) {
            snprintf(err, errsz, "%s: %s", p, fb_strerror(fd));
            return fd;
        }
        close(fd);
    }
    return 0;
}

static int db_fail(loader *L, int rc, const char *what)
{
    int prim = rc & 0xff;
    if (prim == SQLITE_BUSY || prim == SQLITE_LOCKED) {
        snprintf(L->err, L->errsz, "%s is locked by another process (%s); "
                 "wait for it to finish or copy the file and report on the copy",
                 L->path, what);
        return -EBUSY;
    }
    if (prim == SQLITE_NOTADB || prim == SQLITE_CORRUPT) {
        snprintf(L->err, L->errsz, "%s is corrupted or not an SQLite database "
                 "(%s: %s); restore it from a backup or inspect it with "
                 "'sqlite3 %s \"PRAGMA integrity_check\"'", L->path, what,
                 sqlite3_errstr(rc), L->path);
        return FB_EFORMAT;
    }
    if (prim == SQLITE_NOMEM)
        return -ENOMEM;
    snprintf(L->err, L->errsz, "%s: %s: %s", L->path, what,
             L->db ? sqlite3_errmsg(L->db) : sqlite3_errstr(rc));
    return FB_EFORMAT;
}

static char *col_str(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? strdup((const char *)t) : NULL;
}

static double col_real(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN
                                                   : sqlite3_column_double(s, i);
}

static int64_t col_i64(sqlite3_stmt *s, int i, int64_t none)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? none
                                                   : sqlite3_column_int64(s, i);
}

static int prep(loader *L, const char *sql, sqlite3_stmt **s)
{
    int rc = sqlite3_prepare_v2(L->db, sql, -1, s, NULL);
    return rc == SQLITE_OK ? 0 : db_fail(L, rc, "reading the journal");
}

/* meta.schema_version: same major accepted, others refused. */
static int check_version(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(L->db, "SELECT value FROM meta WHERE "
                                "key='schema_version'", -1, &s, NULL);
    if (rc != SQLITE_OK) {
        if ((rc & 0xff) == SQLITE_ERROR) {
            snprintf(L->err, L->errsz, "%s is not a firebreak journal (no "
                     "meta table); was it written by 'firebreak run'?", L->path);
            return FB_EFORMAT;
        }
        return db_fail(L, rc, "reading meta");
    }
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        sqlite3_finalize(s);
        if (rc != SQLITE_DONE)
            return db_fail(L, rc, "reading meta");
        snprintf(L->err, L->errsz, "%s has no meta.schema_version: not a "
                 "firebreak journal", L->path);
        return FB_EFORMAT;
    }
    const char *v = (const char *)sqlite3_column_text(s, 0);
    snprintf(run->schema_version, sizeof run->schema_version, "%s", v ? v : "");
    sqlite3_finalize(s);
    char *end;
    long major = strtol(run->schema_version, &end, 10);
    if (end == run->schema_version || (*end && *end != '.')) {
        snprintf(L->err, L->errsz, "%s: meta.schema_version '%s' is not "
                 "MAJOR.MINOR", L->path, run->schema_version);
        return FB_EFORMAT;
    }
    if (major != FB__REPORT_SCHEMA_MAJOR) {
        snprintf(L->err, L->errsz, "%s: journal schema version %s is not "
                 "supported: this firebreak reads %d.x; %s",
                 L->path, run->schema_version, FB__REPORT_SCHEMA_MAJOR,
                 major < FB__REPORT_SCHEMA_MAJOR
                     ? "report on it with the firebreak release that wrote it"
                     : "use a newer firebreak");
        return FB_EVERSION;
    }
    return 0;
}

static int load_run(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = prep(L, "SELECT name, status, reason, hostname, nproc, nnodes,"
                     " started_at, ended_at FROM run ORDER BY id LIMIT 1", &s);
    if (rc)
        return rc;
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        run->name = col_str(s, 0);
        run->status = col_str(s, 1);
        run->reason = col_str(s, 2);
        run->hostname = col_str(s, 3);
        run->nproc = sqlite3_column_int(s, 4);
        run->nnodes = sqlite3_column_int(s, 5);
        run->started_at = col_real(s, 6);
        run->ended_at = col_real(s, 7);
        run->finished = !isnan(run->ended_at);
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        snprintf(L->err, L->errsz, "%s holds no run: the journal is empty "
                 "(did 'firebreak run' fail before it began?)", L->path);
        rc = FB_EFORMAT;
    } else {
        rc = db_fail(L, rc, "reading run");
    }
    sqlite3_finalize(s);
    if (!rc && isnan(run->started_at)) {
        snprintf(L->err, L->errsz, "%s: run.started_at is NULL", L->path);
        rc = FB_EFORMAT;
    }
    return rc;
}

/* Grow *arr (of elem bytes) so that index n fits. */
static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

/* Attempt index by id (attempts are loaded in id order). */
static int attempt_index(const fb__report_run *run, int64_t id)
{
    size_t lo = 0, hi = run->nattempts;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (run->attempts[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < run->nattempts && run->attempts[lo].id == id ? (int)lo : -1;
}

static int load_attempts(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = prep(L, "SELECT id, number, started_at, launched_at, ready_at,"
                     " ended_at, restored_step, restore_s, start_step, end_step,"
                     " outcome FROM attempt ORDER BY id", &s);
    if (rc)
        return rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (grow((void **)&run->attempts, &cap, run->nattempts,
                 sizeof *run->attempts)) {
            sqlite3_finalize(s);
            return -ENOMEM;
        }
        fb__report_attempt *a = &run->attempts[run->nattempts++];
        memset(a, 0, sizeof *a);
        a->id = sqlite3_column_int64(s, 0);
        a->number = sqlite3_column_int(s, 1);
        a->started_at = col_real(s, 2);
        a->launched_at = col_real(s, 3);
        a->ready_at = col_real(s, 4);
        a->ended_at = col_real(s, 5);
        a->restored_step = col_i64(s, 6, -1);
        a->restore_s = col_real(s, 7);
        a->start_step = col_i64(s, 8, -1);
        a->end_step = col_i64(s, 9, -1);
        const unsigned char *o = sqlite3_column_text(s, 10);
        snprintf(a->outcome, sizeof a->outcome, "%s", o ? (const char *)o : "");
        a->failure = -1;
        a->lost_from = "none";
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE)
        return db_fail(L, rc, "reading attempt");
    if (run->nattempts == 0) {
        snprintf(L->err, L->errsz, "%s: the run never started (no attempt "
                 "was launched)%s%s", L->path, run->reason ? ": " : "",
                 run->reason ? run->reason : "");
        return FB_EFORMAT;
    }
    return 0;
}

static int load_incidents(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = prep(L, "SELECT id, attempt_id, kind, occurred_at, detected_at,"
                     " detect_ms, rank, node, signal, exit_code, phase, step,"
                     " lost_s, injected, detail, last_lines, fr_verdict, health,"
                     " category, component, evidence FROM incident ORDER BY id",
                  &s);
    if (rc)
        return rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (grow((void **)&run->incidents, &cap, run->nincidents,
                 sizeof *run->incidents)) {
            sqlite3_finalize(s);
            return -ENOMEM;
        }
        fb__report_incident *in = &run->incidents[run->nincidents++];
        memset(in, 0, sizeof *in);
        in->id = sqlite3_column_int64(s, 0);
        in->attempt_id = sqlite3_column_int64(s, 1);
        in->attempt = attempt_index(run, in->attempt_id);
        in->kind = col_str(s, 2);
        in->occurred_at = col_real(s, 3);
        in->detected_at = col_real(s, 4);
        in->detect_ms = col_real(s, 5);
        in->rank = (int)col_i64(s, 6, -1);
        in->node = col_str(s, 7);
        in->signal = (int)col_i64(s, 8, 0);
        in->has_exit_code = sqlite3_column_type(s, 9) != SQLITE_NULL;
        in->exit_code = sqlite3_column_int(s, 9);
        in->phase = col_str(s, 10);
        in->step = col_i64(s, 11, -1);
        double lost = col_real(s, 12);
        in->lost_s = isnan(lost) ? -1 : lost;
        in->lost_acc_s = -1;
        in->injected = col_str(s, 13);
        in->detail = col_str(s, 14);
        in->last_lines = col_str(s, 15);
        in->fr_verdict = col_str(s, 16);
        in->health = col_str(s, 17);
        in->sup_category = col_str(s, 18);
        in->sup_component = col_str(s, 19);
        in->sup_evidence = col_str(s, 20);
        if (!in->kind) {
            sqlite3_finalize(s);
            snprintf(L->err, L->errsz, "%s: incident %lld has no kind",
                     L->path, (long long)in->id);
            return FB_EFORMAT;
        }
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : db_fail(L, rc, "reading incident");
}

static int load_ckpts(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = prep(L, "SELECT attempt_id, step, committed_at, stall_ms, status"
                     " FROM checkpoint ORDER BY id", &s);
    if (rc)
        return rc;
    size_t cap = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (grow((void **)&run->ckpts, &cap, run->nckpts, sizeof *run->ckpts)) {
            sqlite3_finalize(s);
            return -ENOMEM;
        }
        fb__report_ckpt *c = &run->ckpts[run->nckpts++];
        c->attempt = attempt_index(run, sqlite3_column_int64(s, 0));
        c->step = sqlite3_column_int64(s, 1);
        c->committed_at = col_real(s, 2);
        c->stall_ms = col_real(s, 3);
        if (isnan(c->stall_ms) || c->stall_ms < 0)
            c->stall_ms = 0;
        const unsigned char *st = sqlite3_column_text(s, 4);
        snprintf(c->status, sizeof c->status, "%s", st ? (const char *)st : "");
    }
    sqlite3_finalize(s);
    return rc == SQLITE_DONE ? 0 : db_fail(L, rc, "reading checkpoint");
}

/* Stable counting sort of the samples by attempt, so each attempt's
 * samples are one slice (unknown attempts last, in no slice). */
static int group_samples(fb__report_run *run)
{
    size_t na = run->nattempts, n = run->nsamples;
    size_t *start = calloc(na + 2, sizeof *start);
    fb__report_sample *out = malloc((n ? n : 1) * sizeof *out);
    if (!start || !out) {
        free(start);
        free(out);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        int a = run->samples[i].attempt;
        start[(a < 0 ? na : (size_t)a) + 1]++;
    }
    for (size_t a = 1; a <= na + 1; a++)
        start[a] += start[a - 1];
    for (size_t a = 0; a < na; a++) {
        run->attempts[a].sample_lo = start[a];
        run->attempts[a].sample_hi = start[a + 1];
    }
    for (size_t i = 0; i < n; i++) {
        int a = run->samples[i].attempt;
        out[start[a < 0 ? na : (size_t)a]++] = run->samples[i];
    }
    free(start);
    free(run->samples);
    run->samples = out;
    return 0;
}

static int load_samples(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s;
    int rc = prep(L, "SELECT count(*) FROM step_sample", &s);
    if (rc)
        return rc;
    rc = sqlite3_step(s);
    int64_t n = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW)
        return db_fail(L, rc, "reading step_sample");
    if (n <= 0)
        return 0;
    run->samples = malloc((size_t)n * sizeof *run->samples);
    if (!run->samples)
        return -ENOMEM;
    rc = prep(L, "SELECT attempt_id, rank, time, step, step_time_ms"
                 " FROM step_sample", &s);
    if (rc)
        return rc;
    int64_t last_id = INT64_MIN;
    int last_idx = -1;
    while (run->nsamples < (size_t)n && (rc = sqlite3_step(s)) == SQLITE_ROW) {
        fb__report_sample *x = &run->samples[run->nsamples++];
        int64_t aid = sqlite3_column_int64(s, 0);
        if (aid != last_id) { /* samples come in runs of one attempt */
            last_id = aid;
            last_idx = attempt_index(run, aid);
        }
        x->attempt = last_idx;
        x->rank = sqlite3_column_int(s, 1);
        x->time = sqlite3_column_double(s, 2);
        x->step = sqlite3_column_int64(s, 3);
        x->step_time_ms = sqlite3_column_type(s, 4) == SQLITE_NULL
                              ? NAN : (float)sqlite3_column_double(s, 4);
    }
    sqlite3_finalize(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        return db_fail(L, rc, "reading step_sample");
    return group_samples(run);
}

/* ---- agent.sqlite ------------------------------------------------------ */

/* agent.sqlite (docs/agent.md, schema 1.x): gpu_samples(t, gpu, temp_c,
 * power_w, ...), averaged over the GPUs of each sample time.  A file
 * from another major version, or without that table, is left out with a
 * note; the report never fails because of it. */
static int agent_version_ok(sqlite3 *db, fb__report_run *run, const char *path)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key="
                           "'schema_version'", -1, &s, NULL) != SQLITE_OK)
        return 1; /* no meta table: take the tables for what they are */
    int ok = 1;
    if (sqlite3_step(s) == SQLITE_ROW) {
        const char *v = (const char *)sqlite3_column_text(s, 0);
        if (v && atoi(v) != 1) {
            snprintf(run->agent_note, sizeof run->agent_note, "%s: schema "
                     "version %.20s is not supported (this firebreak reads 1.x)",
                     path, v);
            ok = 0;
        }
    }
    sqlite3_finalize(s);
    return ok;
}

static void load_agent(fb__report_run *run, const char *dir)
{
    char path[4096];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/agent.sqlite", dir) >= (int)sizeof path ||
        stat(path, &st) != 0) {
        snprintf(run->agent_note, sizeof run->agent_note,
                 "no agent.sqlite in the run directory");
        return;
    }
    sqlite3 *db = NULL;
    sqlite3_stmt *s = NULL;
    char why[512];
    if (sqlite_files_regular(path, why, sizeof why)) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s", why);
        return;
    }
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s: cannot open: %s",
                 path, db ? sqlite3_errmsg(db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(db, 1000);
    if (!agent_version_ok(db, run, path))
        goto out;
    if (sqlite3_prepare_v2(db, "SELECT t, avg(temp_c), avg(power_w) FROM "
                           "gpu_samples GROUP BY t ORDER BY t", -1, &s,
                           NULL) != SQLITE_OK) {
        snprintf(run->agent_note, sizeof run->agent_note, "%s: no GPU samples "
                 "(%s)", path, sqlite3_errmsg(db));
        goto out;
    }
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        if (grow((void **)&run->env, &cap, run->nenv, sizeof *run->env))
            break;
        fb__report_env *e = &run->env[run->nenv];
        e->time = col_real(s, 0);
        e->temp_c = col_real(s, 1);
        e->power_w = col_real(s, 2);
        if (!isnan(e->time))
            run->nenv++;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        snprintf(run->agent_note, sizeof run->agent_note, "%s: %s (agent data "
                 "left out)", path, sqlite3_errmsg(db));
    else if (run->nenv == 0)
        snprintf(run->agent_note, sizeof run->agent_note, "%s has no GPU "
                 "samples (no GPU on this node?)", path);
out:
    sqlite3_finalize(s);
    sqlite3_close(db);
}

/* ---- entry points ------------------------------------------------------ */

void fb__report_free(fb__report_run *run)
{
    if (!run)
        return;
    for (size_t i = 0; i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        free(in->kind);
        free(in->node);
        free(in->phase);
        free(in->injected);
        free(in->detail);
        free(in->last_lines);
        free(in->fr_verdict);
        free(in->health);
        free(in->sup_category);
        free(in->sup_component);
        free(in->sup_evidence);
    }
    free(run->incidents);
    free(run->attempts);
    free(run->samples);
    free(run->ckpts);
    free(run->env);
    free(run->dir);
    free(run->name);
    free(run->status);
    free(run->reason);
    free(run->hostname);
    free(run);
}

/* A checkpoint that failed its hash check after `--inject corrupt:...`:
 * the supervisor records the injection as an `inject` event of the rank
 * (the incident that follows, a restore fallback in a later attempt, has
 * no injected column), so the latest such event before the fallback on
 * the same rank is its injected cause. */
static int attribute_corruption(loader *L, fb__report_run *run)
{
    sqlite3_stmt *s = NULL;
    for (size_t i = 0; i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        if (strcmp(in->kind, "restore_fallback") || in->injected ||
            (in->detail && strstr(in->detail, "incomplete")))
            continue;
        int rc;
        if (!s && (rc = prep(L, "SELECT detail FROM event WHERE kind='inject'"
                                " AND detail LIKE 'corrupt:%' AND time <= ?"
                                " AND (?2 < 0 OR rank IS NULL OR rank = ?2)"
                                " ORDER BY time DESC LIMIT 1", &s)))
            return rc;
        sqlite3_bind_double(s, 1, in->detected_at);
        sqlite3_bind_int(s, 2, in->rank);
        rc = sqlite3_step(s);
        if (rc == SQLITE_ROW) {
            in->injected = col_str(s, 0);
            in->injected_from_event = in->injected != NULL;
        } else if (rc != SQLITE_DONE) {
            sqlite3_finalize(s);
            return db_fail(L, rc, "reading event");
        }
        sqlite3_reset(s);
    }
    sqlite3_finalize(s);
    return 0;
}

static void classify_all(fb__report_run *run)
{
    for (size_t i = 0; i < run->nincidents; i++) {
        fb__report_incident *in = &run->incidents[i];
        fb__report_evidence ev = {
            .kind = in->kind, .injected = in->injected, .detail = in->detail,
            .last_lines = in->last_lines, .fr_verdict = in->fr_verdict,
            .health = in->health, .category = in->sup_category,
            .component = in->sup_component, .evidence = in->sup_evidence,
            .signal = in->signal, .has_exit_code = in->has_exit_code,
            .exit_code = in->exit_code,
        };
        fb__report_classify(&ev, &in->cls);
        if (in->injected_from_event && !strcmp(in->cls.decided_by, "injected")) {
            size_t n = strlen(in->cls.evidence);
            snprintf(in->cls.evidence + n, sizeof in->cls.evidence - n,
                     " (the rank's inject event before this restore)");
        }
    }
}

int fb__report_load(const char *run_dir, fb__report_run **out, char *err,
                    size_t errsz)
{
    char path[4096], dir[4096];
    struct stat st;
    *out = NULL;
    if (stat(run_dir, &st) != 0) {
        snprintf(err, errsz, "%s: %s", run_dir, strerror(errno));
        return -ENOENT;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", run_dir);
        if (snprintf(path, sizeof path, "%s/journal.sqlite", run_dir) >=
            (int)sizeof path) {
            snprintf(err, errsz, "%s: path too long", run_dir);
            return -ENAMETOOLONG;
        }
        if (stat(path, &st) != 0) {
            snprintf(err, errsz, "%s: no journal.sqlite here; give the run "
                     "directory that 'firebreak run' wrote", run_dir);
            return -ENOENT;
        }
    } else {
        snprintf(path, sizeof path, "%s", run_dir);
        snprintf(dir, sizeof dir, "%s", run_dir);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
    }
    int rc = sqlite_files_regular(path, err, errsz);
    if (rc)
        return rc;
    fb__report_run *run = calloc(1, sizeof *run);
    if (!run)
        return -ENOMEM;
    run->dir = strdup(run_dir);
    loader L = {.path = path, .err = err, .errsz = errsz};
    rc = sqlite3_open_v2(path, &L.db, SQLITE_OPEN_READONLY, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(&L, rc, "opening");
        goto out;
    }
    sqlite3_busy_timeout(L.db, 1000);
    /* One read transaction so the picture is consistent with a live run. */
    rc = sqlite3_exec(L.db, "BEGIN", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        rc = db_fail(&L, rc, "starting a read");
        goto out;
    }
    if ((rc = check_version(&L, run)) || (rc = load_run(&L, run)) ||
        (rc = load_attempts(&L, run)) || (rc = load_incidents(&L, run)) ||
        (rc = load_ckpts(&L, run)) || (rc = load_samples(&L, run)) ||
        (rc = attribute_corruption(&L, run)))
        goto out;
    sqlite3_exec(L.db, "COMMIT", NULL, NULL, NULL);
    load_agent(run, dir);
    classify_all(run);
    rc = fb__report_account(run, err, errsz);
out:
    sqlite3_close(L.db);
    if (rc) {
        fb__report_free(run);
        return rc;
    }
    *out = run;
    return 0;
}
