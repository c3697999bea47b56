/*
 * test_policy.c -- the supervisor's decisions (src/supervisor/policy.c),
 * one table per rule: failure kinds and their names, how a rank ended,
 * which rank is to blame, when the failure occurred, back-off, restart or
 * stop.  No process is started: each case is the facts the I/O loops
 * would gather, and the answer docs/supervisor.md promises.
 *
 * To test a new rule: add a row to its table (or a table), run
 * `ctest -R supervisor_policy`.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "supervisor/policy.h"

/* Wait statuses as waitpid() reports them. */
#define EXITED(code) (((code) & 0xff) << 8)
#define KILLED(sig) ((sig) & 0x7f)

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- failure kinds: the journal's names, never renamed ---- */

static void test_kind_names(void)
{
    static const struct {
        fb__sup_fail_kind kind;
        const char *name;
    } cases[] = {
        {FB__SUP_FAIL_NONE, "none"},
        {FB__SUP_FAIL_HANG, "hang"},
        {FB__SUP_FAIL_CRASH, "crash"},
        {FB__SUP_FAIL_ERROR_EXIT, "error_exit"},
        {FB__SUP_FAIL_LAUNCH_FAILURE, "launch_failure"},
        {FB__SUP_FAIL_SEGMENT_CORRUPT, "segment_corrupt"},
        {FB__SUP_FAIL_SEGMENT_NOT_OURS, "segment_not_ours"},
        {FB__SUP_FAIL_SAVE_FAILED, "save_failed"},
        {FB__SUP_FAIL_RESTORE_FALLBACK, "restore_fallback"},
        {FB__SUP_FAIL_KIND_COUNT, "unknown"},
        {(fb__sup_fail_kind)-1, "unknown"},
    };
    for (size_t i = 0; i < N(cases); i++) {
        const char *got = fb__sup_fail_kind_name(cases[i].kind);
        CHECKF(!strcmp(got, cases[i].name), "kind %d: got \"%s\", want \"%s\"",
               (int)cases[i].kind, got, cases[i].name);
    }
    /* Every kind has a name of its own. */
    for (int a = 0; a < FB__SUP_FAIL_KIND_COUNT; a++)
        for (int b = a + 1; b < FB__SUP_FAIL_KIND_COUNT; b++)
            CHECKF(strcmp(fb__sup_fail_kind_name((fb__sup_fail_kind)a),
                          fb__sup_fail_kind_name((fb__sup_fail_kind)b)),
                   "kinds %d and %d share the name %s", a, b,
                   fb__sup_fail_kind_name((fb__sup_fail_kind)a));
}

/* ---- how one rank ended ---- */

static void test_judge_end(void)
{
    static const struct {
        const char *what;
        fb__sup_rank_end e;
        fb__sup_end_how how;
        fb__sup_fail_kind kind;
        int signal, has_exit_code, exit_code, launch_error;
    } cases[] = {
        {"local exit 0", {.wstatus_known = 1, .wstatus = EXITED(0)},
         FB__SUP_END_OK, FB__SUP_FAIL_NONE, 0, 0, 0, 0},
        {"local exit 3", {.wstatus_known = 1, .wstatus = EXITED(3)},
         FB__SUP_END_EXIT, FB__SUP_FAIL_ERROR_EXIT, 0, 1, 3, 0},
        {"local SIGSEGV", {.wstatus_known = 1, .wstatus = KILLED(SIGSEGV)},
         FB__SUP_END_SIGNAL, FB__SUP_FAIL_CRASH, SIGSEGV, 0, 0, 0},
        {"exec failed", {.wstatus_known = 1, .wstatus = EXITED(127), .exec_errno = ENOENT},
         FB__SUP_END_LAUNCH, FB__SUP_FAIL_LAUNCH_FAILURE, 0, 1, 127, 1},
        {"exec failure beats an exit 0", {.wstatus_known = 1, .wstatus = EXITED(0),
                                          .exec_errno = EACCES},
         FB__SUP_END_LAUNCH, FB__SUP_FAIL_LAUNCH_FAILURE, 0, 1, 127, 1},
        {"the wait status beats the record",
         {.wstatus_known = 1, .wstatus = EXITED(0), .end_kind = FB__END_SIGNAL, .end_code = 6},
         FB__SUP_END_OK, FB__SUP_FAIL_NONE, 0, 0, 0, 0},
        {"a SIGKILL seen by waitpid is a signal, injected or not",
         {.wstatus_known = 1, .wstatus = KILLED(SIGKILL), .injected = FB__INJECT_KILL},
         FB__SUP_END_SIGNAL, FB__SUP_FAIL_CRASH, SIGKILL, 0, 0, 0},
        {"record: exit 2", {.end_kind = FB__END_EXIT, .end_code = 2},
         FB__SUP_END_EXIT, FB__SUP_FAIL_ERROR_EXIT, 0, 1, 2, 0},
        {"record: exit 0", {.end_kind = FB__END_EXIT, .end_code = 0},
         FB__SUP_END_OK, FB__SUP_FAIL_NONE, 0, 0, 0, 0},
        {"record: SIGABRT", {.end_kind = FB__END_SIGNAL, .end_code = SIGABRT},
         FB__SUP_END_SIGNAL, FB__SUP_FAIL_CRASH, SIGABRT, 0, 0, 0},
        {"record: finalized", {.end_kind = FB__END_FINALIZED},
         FB__SUP_END_OK, FB__SUP_FAIL_NONE, 0, 0, 0, 0},
        {"no status, no record: vanished", {.end_kind = FB__END_NONE},
         FB__SUP_END_VANISHED, FB__SUP_FAIL_CRASH, 0, 0, 0, 0},
        {"no status, no record, an injected kill recorded",
         {.injected = FB__INJECT_KILL},
         FB__SUP_END_INJECTED_KILL, FB__SUP_FAIL_CRASH, SIGKILL, 0, 0, 0},
        {"an injected hang does not explain a vanished rank",
         {.injected = FB__INJECT_HANG},
         FB__SUP_END_VANISHED, FB__SUP_FAIL_CRASH, 0, 0, 0, 0},
        {"record: signal 0 is no signal", {.end_kind = FB__END_SIGNAL, .end_code = 0},
         FB__SUP_END_VANISHED, FB__SUP_FAIL_CRASH, 0, 0, 0, 0},
        {"a stopped status is no end", {.wstatus_known = 1, .wstatus = 0x137f},
         FB__SUP_END_VANISHED, FB__SUP_FAIL_CRASH, 0, 0, 0, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        fb__sup_end_verdict v;
        memset(&v, 0xa5, sizeof v);
        fb__sup_judge_end(&cases[i].e, &v);
        const char *w = cases[i].what;
        CHECKF(v.how == cases[i].how, "%s: how %d, want %d", w, v.how, cases[i].how);
        CHECKF(v.kind == cases[i].kind, "%s: kind %s, want %s", w,
               fb__sup_fail_kind_name(v.kind), fb__sup_fail_kind_name(cases[i].kind));
        CHECKF(v.signal == cases[i].signal, "%s: signal %d, want %d", w, v.signal,
               cases[i].signal);
        CHECKF(v.has_exit_code == cases[i].has_exit_code &&
                   (!v.has_exit_code || v.exit_code == cases[i].exit_code),
               "%s: exit code %d/%d, want %d/%d", w, v.has_exit_code, v.exit_code,
               cases[i].has_exit_code, cases[i].exit_code);
        CHECKF(v.launch_error == cases[i].launch_error, "%s: launch_error %d, want %d",
               w, v.launch_error, cases[i].launch_error);
    }
}

static void test_record_is_fatal(void)
{
    static const struct {
        uint32_t end_kind;
        int end_code, fatal;
    } cases[] = {
        {FB__END_NONE, 0, 0},      {FB__END_EXIT, 0, 0},   {FB__END_EXIT, 1, 1},
        {FB__END_EXIT, 255, 1},    {FB__END_SIGNAL, 9, 1}, {FB__END_SIGNAL, 11, 1},
        {FB__END_SIGNAL, 0, 0},    {FB__END_FINALIZED, 0, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        int got = fb__sup_record_is_fatal(cases[i].end_kind, cases[i].end_code);
        CHECKF(got == cases[i].fatal, "end_kind %u code %d: fatal %d, want %d",
               cases[i].end_kind, cases[i].end_code, got, cases[i].fatal);
    }
}

/* ---- which rank is to blame ---- */

#define LIVE(k, c) {.readable = 1, .end_kind = (k), .end_code = (c)}
#define QUIET {.readable = 1}

static void test_blame(void)
{
    static const struct {
        const char *what;
        fb__sup_end_how self_how;
        int self;
        fb__sup_end_record recs[4];
        int want;
    } cases[] = {
        {"a recorded fatal end beats a vanished rank (mpirun teardown)",
         FB__SUP_END_VANISHED, 1,
         {QUIET, QUIET, QUIET, LIVE(FB__END_SIGNAL, SIGSEGV)}, 3},
        {"... a non-zero exit too", FB__SUP_END_VANISHED, 0,
         {QUIET, LIVE(FB__END_EXIT, 2), QUIET, QUIET}, 1},
        {"the lowest such rank", FB__SUP_END_VANISHED, 1,
         {QUIET, QUIET, LIVE(FB__END_EXIT, 1), LIVE(FB__END_SIGNAL, SIGABRT)}, 2},
        {"not one whose end was already handled", FB__SUP_END_VANISHED, 1,
         {QUIET, QUIET, QUIET,
          {.ended = 1, .readable = 1, .end_kind = FB__END_SIGNAL, .end_code = 9}}, -1},
        {"not one whose segment is not read (not attached, corrupt)",
         FB__SUP_END_VANISHED, 1,
         {QUIET, QUIET, QUIET, {.end_kind = FB__END_SIGNAL, .end_code = 9}}, -1},
        {"a clean exit is no cause", FB__SUP_END_VANISHED, 1,
         {LIVE(FB__END_EXIT, 0), QUIET, LIVE(FB__END_FINALIZED, 0), QUIET}, -1},
        {"nobody recorded anything: the vanished rank", FB__SUP_END_VANISHED, 2,
         {QUIET, QUIET, QUIET, QUIET}, -1},
        {"its own record does not count", FB__SUP_END_VANISHED, 2,
         {QUIET, QUIET, LIVE(FB__END_SIGNAL, 9), QUIET}, -1},
        {"an injected kill is blamed on the injected rank",
         FB__SUP_END_INJECTED_KILL, 1,
         {QUIET, QUIET, QUIET, LIVE(FB__END_SIGNAL, SIGSEGV)}, -1},
        {"a rank that died by a signal is the first failure: it decides",
         FB__SUP_END_SIGNAL, 1,
         {QUIET, QUIET, QUIET, LIVE(FB__END_SIGNAL, SIGSEGV)}, -1},
        {"a non-zero exit decides too", FB__SUP_END_EXIT, 0,
         {QUIET, LIVE(FB__END_SIGNAL, SIGSEGV), QUIET, QUIET}, -1},
        {"a launch failure decides", FB__SUP_END_LAUNCH, 0,
         {QUIET, LIVE(FB__END_EXIT, 1), QUIET, QUIET}, -1},
    };
    for (size_t i = 0; i < N(cases); i++) {
        fb__sup_end_verdict v = {.how = cases[i].self_how};
        int got = fb__sup_blame_instead(&v, cases[i].self, cases[i].recs, 4);
        CHECKF(got == cases[i].want, "%s: blamed %d, want %d", cases[i].what, got,
               cases[i].want);
    }
}

/* ---- which rank a hang is blamed on ---- */

#define S_ 1000000000ull
/* A rank in training whose last beat was `ago` s before now (1000 s),
 * with a 10 s limit. */
#define BEAT(ago) {.readable = 1, .watched = 1, .last_beat_ns = 1000 * S_ - (ago) * S_, \
                   .limit_ns = 10 * S_, .phase = FB_PHASE_TRAIN, .step = 7}
#define BEAT_INJ(ago, k) {.readable = 1, .watched = 1, .last_beat_ns = 1000 * S_ - (ago) * S_, \
                   .limit_ns = 10 * S_, .phase = FB_PHASE_TRAIN, .step = 7, .injected = (k)}
#define ENDED(ago) {.readable = 1, .last_beat_ns = 1000 * S_ - (ago) * S_, \
                    .limit_ns = 10 * S_, .phase = FB_PHASE_TRAIN, .step = 7}
#define UNREAD {.step = -1}
#define NOLIMIT(ago) {.readable = 1, .watched = 1, .last_beat_ns = 1000 * S_ - (ago) * S_, \
                      .phase = FB_PHASE_DONE, .step = 7}
#define FR(...) 1, {__VA_ARGS__}

static const char *hang_basis_name(fb__sup_hang_basis b)
{
    switch (b) {
    case FB__SUP_HANG_NONE: return "none";
    case FB__SUP_HANG_OLDEST_BEAT: return "oldest_beat";
    case FB__SUP_HANG_INJECTED: return "injected";
    case FB__SUP_HANG_DECLARED: return "declared";
    case FB__SUP_HANG_FR_CULPRIT: return "fr_culprit";
    case FB__SUP_HANG_UNDECIDED: return "undecided";
    }
    return "?";
}

static void test_blame_hang(void)
{
    static const struct {
        const char *what;
        int declared;          /* -1: from the ranks below */
        fb__sup_hang_rank ranks[4];
        int fr_hang, culprits[3], nculprits;
        int want_rank;
        fb__sup_hang_basis want_basis;
        int want_fr_named;
    } cases[] = {
        /* 1. the heartbeats */
        {"everyone beat recently: no hang", -1,
         {BEAT(1), BEAT(2), BEAT(9), BEAT(0)}, 0, {0}, 0, -1, FB__SUP_HANG_NONE, 0},
        {"exactly at the limit is not past it", -1,
         {BEAT(1), BEAT(10), BEAT(1), BEAT(1)}, 0, {0}, 0, -1, FB__SUP_HANG_NONE, 0},
        {"one rank silent past its limit", -1,
         {BEAT(1), BEAT(1), BEAT(11), BEAT(1)}, 0, {0}, 0, 2, FB__SUP_HANG_OLDEST_BEAT, 0},
        {"the one silent the longest", -1,
         {BEAT(12), BEAT(30), BEAT(11), BEAT(1)}, 0, {0}, 0, 1, FB__SUP_HANG_OLDEST_BEAT, 0},
        {"a tie: the lowest-numbered", -1,
         {BEAT(1), BEAT(20), BEAT(1), BEAT(20)}, 0, {0}, 0, 1, FB__SUP_HANG_OLDEST_BEAT, 0},
        {"a rank whose end was noticed is not hung", -1,
         {ENDED(50), BEAT(1), BEAT(1), BEAT(1)}, 0, {0}, 0, -1, FB__SUP_HANG_NONE, 0},
        {"an unread segment is not hung (not attached, corrupt)", -1,
         {UNREAD, BEAT(1), BEAT(1), BEAT(1)}, 0, {0}, 0, -1, FB__SUP_HANG_NONE, 0},
        {"a phase without a limit is never hung", -1,
         {NOLIMIT(500), BEAT(1), BEAT(11), BEAT(1)}, 0, {0}, 0, 2,
         FB__SUP_HANG_OLDEST_BEAT, 0},
        {"a beat in the future is no silence", -1,
         {{.readable = 1, .watched = 1, .last_beat_ns = 2000 * S_, .limit_ns = 10 * S_},
          BEAT(1), BEAT(1), BEAT(1)}, 0, {0}, 0, -1, FB__SUP_HANG_NONE, 0},
        /* 2. a recorded hang injection */
        {"a recorded hang injection beats the oldest beat", -1,
         {BEAT(30), BEAT(1), BEAT_INJ(5, FB__INJECT_HANG), BEAT(1)}, 0, {0}, 0, 2,
         FB__SUP_HANG_INJECTED, 0},
        {"... the lowest-numbered injected rank", -1,
         {BEAT(30), BEAT_INJ(5, FB__INJECT_HANG), BEAT_INJ(5, FB__INJECT_HANG), BEAT(1)},
         0, {0}, 0, 1, FB__SUP_HANG_INJECTED, 0},
        {"... even one whose end was noticed", -1,
         {BEAT(30), BEAT(1), BEAT(1),
          {.readable = 1, .last_beat_ns = 999 * S_, .injected = FB__INJECT_HANG}},
         0, {0}, 0, 3, FB__SUP_HANG_INJECTED, 0},
        {"... not one whose segment is not read", -1,
         {BEAT(30), BEAT(1), {.injected = FB__INJECT_HANG}, BEAT(1)}, 0, {0}, 0, 0,
         FB__SUP_HANG_OLDEST_BEAT, 0},
        {"another injected kind is no evidence of a hang", -1,
         {BEAT(30), BEAT_INJ(1, FB__INJECT_SLOW), BEAT_INJ(1, FB__INJECT_KILL), BEAT(1)},
         0, {0}, 0, 0, FB__SUP_HANG_OLDEST_BEAT, 0},
        {"an injection alone, no rank past its limit: no hang yet", -1,
         {BEAT(1), BEAT_INJ(5, FB__INJECT_HANG), BEAT(1), BEAT(1)}, 0, {0}, 0, -1,
         FB__SUP_HANG_NONE, 0},
        /* 3. the flight recorder, on top of what was declared */
        {"the flight recorder's one culprit takes the blame", 1, {{0}},
         FR(3), 1, 3, FB__SUP_HANG_FR_CULPRIT, 1},
        {"... it beats a recorded injection too", -1,
         {BEAT(30), BEAT(1), BEAT_INJ(5, FB__INJECT_HANG), BEAT(1)}, FR(0), 1, 0,
         FB__SUP_HANG_FR_CULPRIT, 1},
        {"... and decides from the heartbeats in one call", -1,
         {BEAT(30), BEAT(1), BEAT(1), BEAT(1)}, FR(2), 1, 2, FB__SUP_HANG_FR_CULPRIT, 1},
        {"the culprit is the declared rank: kept, the summary still belongs", 2, {{0}},
         FR(2), 1, 2, FB__SUP_HANG_DECLARED, 1},
        {"several culprits: the blame stays, the summary belongs", 1, {{0}},
         FR(2, 3), 2, 1, FB__SUP_HANG_DECLARED, 1},
        {"a culprit outside the job is ignored", 1, {{0}},
         FR(4), 1, 1, FB__SUP_HANG_DECLARED, 1},
        {"a negative culprit is ignored", 1, {{0}},
         FR(-1), 1, 1, FB__SUP_HANG_DECLARED, 1},
        {"a verdict other than hang does not blame", 1, {{0}},
         0, {3}, 1, 1, FB__SUP_HANG_DECLARED, 0},
        {"a hang naming nobody does not blame", 1, {{0}},
         FR(0), 0, 1, FB__SUP_HANG_DECLARED, 0},
        {"declared (--attach-timeout, a node watcher), no analysis", 3, {{0}},
         0, {0}, 0, 3, FB__SUP_HANG_DECLARED, 0},
        {"no hang from the heartbeats: the flight recorder is not asked", -1,
         {BEAT(1), BEAT(1), BEAT(1), BEAT(1)}, FR(2), 1, -1, FB__SUP_HANG_NONE, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        fb__sup_hang_facts f = {.now_ns = 1000 * S_, .world = 4,
                                .declared = cases[i].declared,
                                .ranks = cases[i].declared < 0 ? cases[i].ranks : NULL,
                                .fr_hang = cases[i].fr_hang,
                                .fr_culprits = cases[i].culprits,
                                .fr_nculprits = cases[i].nculprits};
        fb__sup_hang_blame b;
        fb__sup_blame_hang(&f, &b);
        CHECKF(b.rank == cases[i].want_rank && b.basis == cases[i].want_basis &&
                   b.fr_named == cases[i].want_fr_named,
               "%s: rank %d (%s, fr_named %d), want rank %d (%s, fr_named %d)",
               cases[i].what, b.rank, hang_basis_name(b.basis), b.fr_named,
               cases[i].want_rank, hang_basis_name(cases[i].want_basis),
               cases[i].want_fr_named);
    }
    /* 1b. alone: the other ranks ended or beat within a quarter of the
     * silent rank's limit (10 s: 2.5 s) */
    static const struct {
        const char *what;
        fb__sup_hang_rank ranks[4];
        int want_rank, want_alone;
    } alone[] = {
        {"the others stepping: alone", {BEAT(1), BEAT(0), BEAT(11), BEAT(2)}, 2, 1},
        {"the others ended: alone", {ENDED(50), ENDED(1), BEAT(11), ENDED(3)}, 2, 1},
        {"one other silent 3 s (a collective's wait): not alone",
         {BEAT(1), BEAT(3), BEAT(11), BEAT(1)}, 2, 0},
        {"... every other silent nearly as long: not alone",
         {BEAT(10), BEAT(10), BEAT(11), BEAT(9)}, 2, 0},
        {"a rank without a segment says nothing: not alone",
         {UNREAD, BEAT(1), BEAT(11), BEAT(1)}, 2, 0},
        {"a beat in the future is no silence: alone",
         {{.readable = 1, .watched = 1, .last_beat_ns = 1001 * S_, .limit_ns = 10 * S_},
          BEAT(1), BEAT(11), BEAT(1)}, 2, 1},
    };
    {
        fb__sup_hang_rank one[1] = {BEAT(11)};
        fb__sup_hang_facts f = {.now_ns = 1000 * S_, .world = 1, .declared = -1,
                                .ranks = one};
        fb__sup_hang_blame b;
        fb__sup_blame_hang(&f, &b);
        CHECKF(b.rank == 0 && !b.alone, "one rank in the job: rank %d, alone %d", b.rank,
               b.alone);
    }
    for (size_t i = 0; i < N(alone); i++) {
        fb__sup_hang_facts f = {.now_ns = 1000 * S_, .world = 4, .declared = -1,
                                .ranks = alone[i].ranks};
        fb__sup_hang_blame b;
        fb__sup_blame_hang(&f, &b);
        CHECKF(b.rank == alone[i].want_rank && b.basis == FB__SUP_HANG_OLDEST_BEAT &&
                   b.alone == alone[i].want_alone,
               "%s: rank %d (%s), alone %d, want rank %d, alone %d", alone[i].what,
               b.rank, hang_basis_name(b.basis), b.alone, alone[i].want_rank,
               alone[i].want_alone);
    }
    /* 4. silence alone, after the flight recorder had its say */
    static const struct {
        const char *what;
        int world, declared, by_silence, analyzed;
        int fr_hang, culprits[3], nculprits;
        int want_rank;
        fb__sup_hang_basis want_basis;
    } undecided[] = {
        {"silence, the flight recorder names nobody: no rank", 4, 1, 1, 1,
         0, {0}, 0, -1, FB__SUP_HANG_UNDECIDED},
        {"silence, several culprits: no rank", 4, 1, 1, 1, FR(2, 3), 2, -1,
         FB__SUP_HANG_UNDECIDED},
        {"silence, a culprit outside the job: no rank", 4, 1, 1, 1, FR(7), 1, -1,
         FB__SUP_HANG_UNDECIDED},
        {"silence, one culprit: that rank", 4, 1, 1, 1, FR(2), 1, 2,
         FB__SUP_HANG_FR_CULPRIT},
        {"silence, the one culprit is the rank silent the longest", 4, 1, 1, 1,
         FR(1), 1, 1, FB__SUP_HANG_DECLARED},
        {"silence, the flight recorder has not run yet: kept", 4, 1, 1, 0, 0, {0}, 0, 1,
         FB__SUP_HANG_DECLARED},
        {"one rank in the job: silence tells it apart", 1, 0, 1, 1, 0, {0}, 0, 0,
         FB__SUP_HANG_DECLARED},
        {"not by silence (an injection, a watcher): kept", 4, 3, 0, 1, 0, {0}, 0, 3,
         FB__SUP_HANG_DECLARED},
    };
    for (size_t i = 0; i < N(undecided); i++) {
        fb__sup_hang_facts f = {.now_ns = 1000 * S_, .world = undecided[i].world,
                                .declared = undecided[i].declared,
                                .declared_by_silence = undecided[i].by_silence,
                                .fr_analyzed = undecided[i].analyzed,
                                .fr_hang = undecided[i].fr_hang,
                                .fr_culprits = undecided[i].culprits,
                                .fr_nculprits = undecided[i].nculprits};
        fb__sup_hang_blame b;
        fb__sup_blame_hang(&f, &b);
        CHECKF(b.rank == undecided[i].want_rank && b.basis == undecided[i].want_basis,
               "%s: rank %d (%s), want rank %d (%s)", undecided[i].what, b.rank,
               hang_basis_name(b.basis), undecided[i].want_rank,
               hang_basis_name(undecided[i].want_basis));
    }
}

/* ---- when it occurred ---- */

static void test_end_time(void)
{
    const uint64_t S = 1000000000ull, T = 1000 * S; /* noticed at T */
    static const struct {
        const char *what;
        uint64_t noticed, detected;
        uint32_t end_kind;
        uint64_t end_ns, inject_ns, want;
    } cases[] = {
        {"no record: when noticed", 1000, 2000, FB__END_NONE, 0, 0, 1000},
        {"noticed unknown: when detected", 0, 2000, FB__END_NONE, 0, 0, 2000},
        {"its own end record", 1000, 2000, FB__END_EXIT, 900, 0, 900},
        {"the record beats the injection", 1000, 2000, FB__END_SIGNAL, 900, 800, 900},
        {"a record later than noticed is not believed", 1000, 2000, FB__END_EXIT, 1500,
         0, 1000},
        {"an end time without an end kind is ignored", 1000, 2000, FB__END_NONE, 900, 0,
         1000},
    };
    for (size_t i = 0; i < N(cases); i++) {
        uint64_t got = fb__sup_end_time(cases[i].noticed, cases[i].detected,
                                        cases[i].end_kind, cases[i].end_ns,
                                        cases[i].inject_ns);
        CHECKF(got == cases[i].want, "%s: %llu, want %llu", cases[i].what,
               (unsigned long long)got, (unsigned long long)cases[i].want);
    }
    /* The injected fault's time, when it is the likely cause (< 5 s). */
    struct {
        const char *what;
        uint64_t inject_ns, want;
    } inj[] = {
        {"injected 1 s before", T - S, T - S},
        {"injected 4.9 s before", T - 49 * S / 10, T - 49 * S / 10},
        {"injected 5 s before: not the cause", T - 5 * S, T},
        {"injected after it was noticed", T + 1, T},
    };
    for (size_t i = 0; i < N(inj); i++) {
        uint64_t got = fb__sup_end_time(T, T + S, FB__END_NONE, 0, inj[i].inject_ns);
        CHECKF(got == inj[i].want, "%s: %llu, want %llu", inj[i].what,
               (unsigned long long)got, (unsigned long long)inj[i].want);
    }
}

/* ---- back-off ---- */

static void test_backoff(void)
{
    static const struct {
        int no_progress;
        double want;
    } cases[] = {
        {-1, 0}, {0, 0}, {1, 0.5}, {2, 1}, {3, 2}, {4, 4}, {5, 8}, {6, 16},
        {7, 30}, {8, 30}, {1000, 30}, {2147483647, 30},
    };
    for (size_t i = 0; i < N(cases); i++) {
        double got = fb__sup_backoff_s(cases[i].no_progress);
        CHECKF(got == cases[i].want, "after %d attempts without progress: %g s, want %g s",
               cases[i].no_progress, got, cases[i].want);
    }
}

/* ---- restart or stop: sequences of attempts ---- */

#define MAX_SEQ 12

/* One attempt's end and the decision expected after it. */
typedef struct step_case {
    fb__sup_attempt_end a;
    fb__sup_action want;
    double delay_s;            /* RESTART */
} step_case;

#define CRASH_AT(st) {.kind = FB__SUP_FAIL_CRASH, .step = (st), .durable_before = -1, \
                      .durable_after = -1}
#define HANG_AT(st) {.kind = FB__SUP_FAIL_HANG, .step = (st), .durable_before = -1, \
                     .durable_after = -1}
#define R(delay) FB__SUP_DO_RESTART, (delay)

static const char *action_name(fb__sup_action a)
{
    static const char *const names[] = {
        [FB__SUP_DO_RESTART] = "restart", [FB__SUP_DO_COMPLETED] = "completed",
        [FB__SUP_DO_INTERRUPTED] = "interrupted", [FB__SUP_DO_STOP_LAUNCH] = "stop_launch",
        [FB__SUP_DO_STOP_CRASH_LOOP] = "crash_loop",
        [FB__SUP_DO_STOP_MAX_RESTARTS] = "max_restarts",
    };
    return (unsigned)a < N(names) ? names[a] : "?";
}

static void test_decide(void)
{
    static const struct {
        const char *what;
        fb__sup_restart_limits lim;
        int n;
        step_case seq[MAX_SEQ];
        int want_restarts;
    } cases[] = {
        {"completed", {3, 2}, 1, {{{.completed = 1}, FB__SUP_DO_COMPLETED, 0}}, 0},
        {"completed after a restart", {3, 2}, 2,
         {{CRASH_AT(5), R(0)}, {{.completed = 1}, FB__SUP_DO_COMPLETED, 0}}, 1},
        {"a stop signal", {3, 2}, 1,
         {{{.stop_signal = SIGTERM, .kind = FB__SUP_FAIL_CRASH}, FB__SUP_DO_INTERRUPTED, 0}},
         0},
        {"a launch failure is not restarted", {3, 2}, 1,
         {{{.kind = FB__SUP_FAIL_LAUNCH_FAILURE, .launch_error = 1, .step = -1},
           FB__SUP_DO_STOP_LAUNCH, 0}}, 0},
        {"crash loop: the same failure at the same step twice", {3, 2}, 2,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), FB__SUP_DO_STOP_CRASH_LOOP, 0}}, 1},
        {"crash loop of 3", {10, 3}, 3,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), R(0.5)},
          {CRASH_AT(5), FB__SUP_DO_STOP_CRASH_LOOP, 0}}, 2},
        {"unknown step, same kind: a crash loop too", {3, 2}, 2,
         {{CRASH_AT(-1), R(0)}, {CRASH_AT(-1), FB__SUP_DO_STOP_CRASH_LOOP, 0}}, 1},
        {"another exit code at the same step is no crash loop", {3, 2}, 2,
         {{{.kind = FB__SUP_FAIL_ERROR_EXIT, .code = 3, .step = 6}, R(0)},
          {{.kind = FB__SUP_FAIL_ERROR_EXIT, .code = 17, .step = 6}, R(0.5)}}, 2},
        {"the same exit code at the same step is", {3, 2}, 2,
         {{{.kind = FB__SUP_FAIL_ERROR_EXIT, .code = 3, .step = 6}, R(0)},
          {{.kind = FB__SUP_FAIL_ERROR_EXIT, .code = 3, .step = 6},
           FB__SUP_DO_STOP_CRASH_LOOP, 0}}, 1},
        {"another signal at the same step is no crash loop", {3, 2}, 2,
         {{{.kind = FB__SUP_FAIL_CRASH, .code = 1000 + SIGSEGV, .step = 6}, R(0)},
          {{.kind = FB__SUP_FAIL_CRASH, .code = 1000 + SIGBUS, .step = 6}, R(0.5)}}, 2},
        {"another kind at the same step is no crash loop", {3, 2}, 2,
         {{CRASH_AT(5), R(0)}, {HANG_AT(5), R(0.5)}}, 2},
        {"the same kind at another step is no crash loop", {3, 2}, 3,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(7), R(0)}, {CRASH_AT(5), R(0.5)}}, 3},
        {"--crash-loop 0: never stop early", {3, 0}, 4,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), R(0.5)}, {CRASH_AT(5), R(1)},
          {CRASH_AT(5), FB__SUP_DO_STOP_MAX_RESTARTS, 0}}, 3},
        {"--max-restarts 0", {0, 2}, 1,
         {{CRASH_AT(5), FB__SUP_DO_STOP_MAX_RESTARTS, 0}}, 0},
        {"--max-restarts 2 with progress", {2, 2}, 3,
         {{CRASH_AT(1), R(0)}, {CRASH_AT(2), R(0)},
          {CRASH_AT(3), FB__SUP_DO_STOP_MAX_RESTARTS, 0}}, 2},
        {"a crash loop is found before the restarts run out", {1, 2}, 2,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), FB__SUP_DO_STOP_CRASH_LOOP, 0}}, 1},
        {"back-off doubles to its cap", {100, 0}, 10,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), R(0.5)}, {CRASH_AT(5), R(1)},
          {CRASH_AT(5), R(2)}, {CRASH_AT(5), R(4)}, {CRASH_AT(5), R(8)},
          {CRASH_AT(5), R(16)}, {CRASH_AT(5), R(30)}, {CRASH_AT(5), R(30)},
          {CRASH_AT(5), R(30)}}, 10},
        {"failing earlier is no progress", {10, 0}, 2,
         {{CRASH_AT(10), R(0)}, {CRASH_AT(4), R(0.5)}}, 2},
        {"a new complete checkpoint is progress: the back-off resets", {10, 0}, 5,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), R(0.5)}, {CRASH_AT(5), R(1)},
          {{.kind = FB__SUP_FAIL_CRASH, .step = 5, .durable_before = -1,
            .durable_after = 4}, R(0)},
          {{.kind = FB__SUP_FAIL_CRASH, .step = 5, .durable_before = 4,
            .durable_after = 4}, R(0.5)}}, 5},
        {"failing later is progress: the back-off resets", {10, 0}, 4,
         {{CRASH_AT(5), R(0)}, {CRASH_AT(5), R(0.5)}, {CRASH_AT(6), R(0)},
          {CRASH_AT(6), R(0.5)}}, 4},
    };
    for (size_t i = 0; i < N(cases); i++) {
        fb__sup_history h;
        fb__sup_history_init(&h);
        for (int k = 0; k < cases[i].n; k++) {
            const step_case *c = &cases[i].seq[k];
            fb__sup_decision d;
            fb__sup_decide(&cases[i].lim, &h, &c->a, &d);
            CHECKF(d.action == c->want, "%s, attempt %d: %s, want %s", cases[i].what, k,
                   action_name(d.action), action_name(c->want));
            if (c->want == FB__SUP_DO_RESTART)
                CHECKF(d.delay_s == c->delay_s, "%s, attempt %d: back-off %g s, want %g s",
                       cases[i].what, k, d.delay_s, c->delay_s);
            if (c->want == FB__SUP_DO_STOP_CRASH_LOOP)
                CHECKF(d.same_in_a_row == cases[i].lim.crash_loop,
                       "%s: %d in a row, want %d", cases[i].what, d.same_in_a_row,
                       cases[i].lim.crash_loop);
        }
        CHECKF(h.restarts == cases[i].want_restarts, "%s: %d restarts, want %d",
               cases[i].what, h.restarts, cases[i].want_restarts);
    }
}

static void test_torch_fr_names(void)
{
    const int O = FB__SUP_TORCH_FR_OLD, W = FB__SUP_TORCH_FR_NEW;
    static const struct {
        const char *version;
        int want;
    } cases[] = {
        {"2.7.0", 2}, {"2.7.0+cu126", 2}, {"2.10.0a0+git1234", 2}, {"2.15.0", 2},
        {"3.0", 2}, {"2.6.0", 1}, {"2.6.0+cpu", 1}, {"1.13.1", 1}, {"2.0", 1},
        {"1.13.1+cpu", 1}, {NULL, 3}, {"", 3}, {"2", 3}, {"2.", 3}, {"v2.7", 3},
        {"Traceback (most recent call last):", 3}, {"99999999.1", 3},
    };
    for (size_t i = 0; i < N(cases); i++) {
        int want = (cases[i].want & 1 ? O : 0) | (cases[i].want & 2 ? W : 0);
        int got = fb__sup_torch_fr_names(cases[i].version);
        CHECKF(got == want, "torch %s: names %d, want %d",
               cases[i].version ? cases[i].version : "(unknown)", got, want);
    }
}

static void test_standby_schedule(void)
{
    const uint64_t ms = 1000000ull;
    /* Phases: starting until every rank stepped, the burst for its first
     * second, training after. */
    static const struct {
        uint64_t ready, now;
        int want;
    } ph[] = {
        {0, 0, FB__SUP_STANDBY_STARTING},
        {0, 5000000000ull, FB__SUP_STANDBY_STARTING},
        {1000, 1000, FB__SUP_STANDBY_BURST},
        {1000, 1000 + FB__SUP_STANDBY_BURST_NS - 1, FB__SUP_STANDBY_BURST},
        {1000, 1000 + FB__SUP_STANDBY_BURST_NS, FB__SUP_STANDBY_TRAINING},
        {1000, UINT64_MAX, FB__SUP_STANDBY_TRAINING},
        {5000, 4000, FB__SUP_STANDBY_BURST}, /* a clock read just before */
    };
    for (size_t i = 0; i < N(ph); i++) {
        int got = fb__sup_standby_phase(ph[i].ready, ph[i].now);
        CHECKF(got == ph[i].want, "standby phase ready %llu now %llu: %d, want %d",
               (unsigned long long)ph[i].ready, (unsigned long long)ph[i].now, got,
               ph[i].want);
    }
    /* Budgets: the burst and training passes are shorter than starting's. */
    CHECK(fb__sup_standby_budget_ns(FB__SUP_STANDBY_STARTING) == 20 * ms);
    CHECK(fb__sup_standby_budget_ns(FB__SUP_STANDBY_BURST) == 5 * ms);
    CHECK(fb__sup_standby_budget_ns(FB__SUP_STANDBY_TRAINING) == 2 * ms);
    /* Waits: starting waits what the pass took (half the loop's time);
     * the burst holds the supervisor's CPU to 10% (9 x cpu), never less
     * than the pass's wall time; training to 0.5% (199 x cpu), never less
     * than the pass's wall time and at least 250 ms apart. */
    static const struct {
        int phase;
        uint64_t wall, cpu, want;
    } w[] = {
        {FB__SUP_STANDBY_STARTING, 7 * ms, 1 * ms, 7 * ms},
        {FB__SUP_STANDBY_STARTING, 0, 0, 0},
        {FB__SUP_STANDBY_BURST, 5 * ms, 2 * ms, 18 * ms},
        {FB__SUP_STANDBY_BURST, 40 * ms, 1 * ms, 40 * ms}, /* forks waited for a CPU */
        {FB__SUP_STANDBY_BURST, 0, 0, 0},
        {FB__SUP_STANDBY_BURST, 1, UINT64_MAX / 2, UINT64_MAX},
        {FB__SUP_STANDBY_TRAINING, 2 * ms, 2 * ms, 398 * ms},
        {FB__SUP_STANDBY_TRAINING, 1 * ms, 1 * ms, 250 * ms},
        {FB__SUP_STANDBY_TRAINING, 0, 0, 250 * ms},
        /* a loaded host: one fork waited 200 ms for a CPU and cost 0.7 ms
         * of it; at 1/200 of the wall time, a 40 s wait */
        {FB__SUP_STANDBY_TRAINING, 200 * ms, 7 * ms / 10, 250 * ms},
        {FB__SUP_STANDBY_TRAINING, 2 * ms, 10 * ms, 1990 * ms},
        {FB__SUP_STANDBY_TRAINING, 300 * ms, 1 * ms, 300 * ms}, /* never over half */
        {FB__SUP_STANDBY_TRAINING, UINT64_MAX / 100, 0, UINT64_MAX / 100},
        {FB__SUP_STANDBY_TRAINING, 1, UINT64_MAX / 100, UINT64_MAX},
    };
    for (size_t i = 0; i < N(w); i++) {
        uint64_t got = fb__sup_standby_wait_ns(w[i].phase, w[i].wall, w[i].cpu);
        CHECKF(got == w[i].want, "standby wait phase %d wall %llu cpu %llu: %llu, want %llu",
               w[i].phase, (unsigned long long)w[i].wall, (unsigned long long)w[i].cpu,
               (unsigned long long)got, (unsigned long long)w[i].want);
    }
}

/* ---- slurm: a rank that vanished on another node ---- */

static void test_judge_vanished(void)
{
    const uint64_t s = 1000000000ull;
    static const struct {
        const char *what;
        fb__sup_vanished_facts f;
        fb__sup_vanished_verdict want;
    } cases[] = {
        /* the node's next alive came: a rank SIGKILLed on a live node */
        {"alive after it", {1, 0, 100 * s, 101 * s, 3.0}, FB__SUP_VANISHED_RANK},
        {"alive after it, watchers gone since", {1, 1, 100 * s, 200 * s, 3.0},
         FB__SUP_VANISHED_RANK},
        /* node killed: its watcher reported the rank, then nothing */
        {"silent 1 s of 3", {0, 0, 100 * s, 101 * s, 3.0}, FB__SUP_VANISHED_WAIT},
        {"silent 3 s of 3", {0, 0, 100 * s, 103 * s, 3.0}, FB__SUP_VANISHED_WAIT},
        {"silent 3.1 s of 3", {0, 0, 100 * s, 103 * s + s / 10, 3.0},
         FB__SUP_VANISHED_NODE_LOST},
        {"watchers gone without its alive", {0, 1, 100 * s, 100 * s + 1, 3.0},
         FB__SUP_VANISHED_NODE_LOST},
        {"a clock read before the line", {0, 0, 100 * s, 99 * s, 3.0},
         FB__SUP_VANISHED_WAIT},
        /* --node-timeout 0: no node is ever lost */
        {"no node timeout", {0, 0, 100 * s, 900 * s, 0}, FB__SUP_VANISHED_RANK},
        {"no node timeout, watchers gone", {0, 1, 100 * s, 100 * s, 0},
         FB__SUP_VANISHED_RANK},
    };
    for (size_t i = 0; i < N(cases); i++) {
        fb__sup_vanished_verdict got = fb__sup_judge_vanished(&cases[i].f);
        CHECKF(got == cases[i].want, "%s: verdict %d, want %d", cases[i].what, got,
               cases[i].want);
    }
}

/* ---- Slurm: which held end is released first ---- */

static void test_held_first(void)
{
    static const struct {
        const char *what;
        int named;
        uint64_t held[4];
        unsigned char kill[4];
        int want;
    } cases[] = {
        /* the flake: rank 2 killed itself (--inject kill); srun named task
         * 3, which its teardown killed on another node */
        {"srun named a teardown kill", 3, {0, 0, 100, 130}, {0, 0, 1, 0}, 2},
        {"named after it was heard", 3, {0, 0, 130, 100}, {0, 0, 1, 0}, 2},
        {"srun named the injected kill", 2, {0, 0, 100, 130}, {0, 0, 1, 0}, 2},
        {"srun named none yet", -1, {0, 0, 100, 130}, {0, 0, 1, 0}, 2},
        {"two injected kills: the earliest heard", 0, {90, 120, 110, 0},
         {0, 1, 1, 0}, 2},
        /* no injected kill: srun's word stands -- a rank SIGKILLed
         * unrecorded (the OOM killer) named before the peers whose
         * recorded aborts were heard first */
        {"no injected kill", 1, {0, 130, 100, 110}, {0, 0, 0, 0}, 1},
        {"none named, none injected", -1, {0, 130, 100, 110}, {0, 0, 0, 0}, -1},
    };
    for (size_t i = 0; i < N(cases); i++) {
        int got = fb__sup_held_first(cases[i].named, cases[i].held, cases[i].kill, 4);
        CHECKF(got == cases[i].want, "%s: %d, want %d", cases[i].what, got, cases[i].want);
    }
}

/* ---- a disagreement of replicas seen after the attempt had failed ---- */

/* ---- the stop's real-time priority ---- */

static void test_stop_rt_priority(void)
{
    static const struct {
        const char *what;
        int rt, same_node;
        fb__sup_fail_kind kind;
        int want;
    } cases[] = {
        {"crash, local", 1, 1, FB__SUP_FAIL_CRASH, 1},
        {"error exit, local", 1, 1, FB__SUP_FAIL_ERROR_EXIT, 1},
        {"segment corrupt", 1, 1, FB__SUP_FAIL_SEGMENT_CORRUPT, 1},
        {"segment not ours", 1, 1, FB__SUP_FAIL_SEGMENT_NOT_OURS, 1},
        {"sdc", 1, 1, FB__SUP_FAIL_SDC, 1},
        {"launch failure", 1, 1, FB__SUP_FAIL_LAUNCH_FAILURE, 1},
        {"the priority asked", 50, 1, FB__SUP_FAIL_CRASH, 50},
        {"clamped at 99", 120, 1, FB__SUP_FAIL_CRASH, 99},
        /* the ranks' dumps and their analysis: the supervisor waits or
         * computes at length */
        {"hang", 1, 1, FB__SUP_FAIL_HANG, 0},
        /* ranks on other nodes: nothing to win here */
        {"crash under slurm", 1, 0, FB__SUP_FAIL_CRASH, 0},
        {"node lost", 1, 0, FB__SUP_FAIL_NODE_FAILURE, 0},
        {"--supervisor-rt 0", 0, 1, FB__SUP_FAIL_CRASH, 0},
        {"negative", -1, 1, FB__SUP_FAIL_CRASH, 0},
        {"no failure", 1, 1, FB__SUP_FAIL_NONE, 0},
        {"out of range", 1, 1, FB__SUP_FAIL_KIND_COUNT, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        int got = fb__sup_stop_rt_priority(cases[i].rt, cases[i].same_node, cases[i].kind);
        CHECKF(got == cases[i].want, "stop rt priority, %s: got %d, want %d",
                  cases[i].what, got, cases[i].want);
    }
}

static void test_sdc_supersedes(void)
{
    static const struct {
        const char *what;
        fb__sup_fail_kind kind;
        int64_t fail_step, sdc_step;
        int want;
    } cases[] = {
        /* the ranks' own end check exited after the corruption */
        {"exit after the corruption", FB__SUP_FAIL_ERROR_EXIT, 60, 25, 1},
        {"exit at the corrupted step", FB__SUP_FAIL_ERROR_EXIT, 25, 25, 1},
        {"exit before the corruption", FB__SUP_FAIL_ERROR_EXIT, 24, 25, 0},
        {"exit, step unknown", FB__SUP_FAIL_ERROR_EXIT, -1, 25, 1},
        {"crash after the corruption", FB__SUP_FAIL_CRASH, 30, 25, 1},
        {"crash before the corruption", FB__SUP_FAIL_CRASH, 3, 25, 0},
        {"hang after the corruption", FB__SUP_FAIL_HANG, 40, 25, 1},
        /* causes of their own: never taken for the corruption's */
        {"launch failure", FB__SUP_FAIL_LAUNCH_FAILURE, -1, 25, 0},
        {"segment corrupt", FB__SUP_FAIL_SEGMENT_CORRUPT, 60, 25, 0},
        {"segment not ours", FB__SUP_FAIL_SEGMENT_NOT_OURS, 60, 25, 0},
        {"node lost", FB__SUP_FAIL_NODE_FAILURE, 60, 25, 0},
        {"already sdc", FB__SUP_FAIL_SDC, 60, 25, 0},
        {"none", FB__SUP_FAIL_NONE, 60, 25, 0},
    };
    for (size_t i = 0; i < N(cases); i++) {
        int got = fb__sup_sdc_supersedes(cases[i].kind, cases[i].fail_step,
                                         cases[i].sdc_step);
        CHECKF(got == cases[i].want, "%s: %d, want %d", cases[i].what, got,
               cases[i].want);
    }
}

static void test_mpirun_arg_owned(void)
{
    static const struct {
        const char *arg;
        int slurm;
        const char *want; /* a word of the reason, or NULL: the user's */
    } cases[] = {
        {"-np", 0, "--nproc-per-node"},
        {"--np", 0, "--nproc-per-node"},
        {"-n", 1, "--nproc-per-node"},
        {"-c", 0, "--nproc-per-node"},
        {"--output-filename", 0, "logs/mpirun-attempt-<N>"},
        {"-output-filename", 1, "logs/mpirun-attempt-<N>"},
        {"--host", 1, "drained"},
        {"-H", 1, "drained"},
        {"--map-by", 1, "Slurm"},
        /* without Slurm: ranks on this node only; a mapping is the user's */
        {"--host", 0, "this node"},
        {"--hostfile", 0, "--launcher slurm --mpirun"},
        {"-machinefile", 0, "this node"},
        {"--map-by", 0, NULL},
        {"-map-by", 0, NULL},
        /* options firebreak leaves to the user */
        {"--mca", 1, NULL},
        {"-x", 0, NULL},
        {"--bind-to", 0, NULL},
        {"--tag-output", 0, NULL},
        /* not an mpirun spelling (mpirun refuses it itself) */
        {"--np=3", 0, NULL},
        {"np", 0, NULL},
        {"", 0, NULL},
    };
    for (size_t i = 0; i < N(cases); i++) {
        const char *got = fb__sup_mpirun_arg_owned(cases[i].arg, cases[i].slurm);
        if (!cases[i].want)
            CHECKF(!got, "mpirun arg '%s' (slurm %d): owned (%s), want the user's",
                   cases[i].arg, cases[i].slurm, got);
        else
            CHECKF(got && strstr(got, cases[i].want),
                   "mpirun arg '%s' (slurm %d): %s, want one naming %s", cases[i].arg,
                   cases[i].slurm, got ? got : "the user's", cases[i].want);
    }
}

/* A heartbeat from the future is a scribbled value: silence counts from
 * when the reader first saw it, and each new value is a sign of life. */
static void test_trusted_beat(void)
{
    uint64_t odd = 0, seen = 0, s = 1000000000ull;
    CHECK(fb__sup_trusted_beat(5 * s, 6 * s, &odd, &seen) == 5 * s);
    CHECK(fb__sup_trusted_beat(6 * s, 6 * s, &odd, &seen) == 6 * s && odd == 0);
    CHECK(fb__sup_trusted_beat(UINT64_MAX / 2, 7 * s, &odd, &seen) == 7 * s);
    CHECK(fb__sup_trusted_beat(UINT64_MAX / 2, 9 * s, &odd, &seen) == 7 * s); /* silent */
    CHECK(fb__sup_trusted_beat(UINT64_MAX / 3, 10 * s, &odd, &seen) == 10 * s); /* wrote */
    CHECK(fb__sup_trusted_beat(10 * s, 11 * s, &odd, &seen) == 10 * s);         /* sane again */
}

int main(void)
{
    test_kind_names();
    test_trusted_beat();
    test_judge_end();
    test_record_is_fatal();
    test_blame();
    test_blame_hang();
    test_end_time();
    test_backoff();
    test_decide();
    test_torch_fr_names();
    test_standby_schedule();
    test_judge_vanished();
    test_sdc_supersedes();
    test_held_first();
    test_stop_rt_priority();
    test_mpirun_arg_owned();
    if (failures)
        fprintf(stderr, "test_policy: %d check%s failed\n", failures,
                failures == 1 ? "" : "s");
    return failures != 0;
}
