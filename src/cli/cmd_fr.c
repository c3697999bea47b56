/*
 * cmd_fr.c -- `firebreak fr`: analyze flight recorders (firebreak rings,
 * PyTorch dumps) and name the rank and the collective.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/jsonw.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "fr/fr.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: firebreak fr analyze INPUT... [--json] [--min-wait DURATION]\n"
        "                           [--late-threshold DURATION] [--max-findings N]\n"
        "                           [--world N]\n"
        "\n"
        "Merge every rank's flight recorder and say what went wrong: for a\n"
        "hang, the collective where progress stopped and the ranks that never\n"
        "entered it; operation, size, dtype and send/recv mismatches; ranks\n"
        "that arrive late.  An INPUT is a file or a directory of per-rank\n"
        "files: firebreak rings (live /dev/shm segments, or .fbseg snapshots;\n"
        "a name /fb.<job>.<attempt>.<rank> opens a live one) and PyTorch\n"
        "flight-recorder dumps (JSON or pickle, <prefix><rank>).  A run\n"
        "directory (or its fr/) stands for its newest attempt's snapshots\n"
        "(fr/attempt-<N>) and PyTorch's dumps of it (fr/torch/attempt-<N>).\n"
        "\n"
        "  --json               one JSON object on the last line of stdout\n"
        "  --min-wait D         pending longer than D is stuck (default 1s;\n"
        "                       not applied to PyTorch dumps)\n"
        "  --late-threshold D   mean lateness below D is noise (default 200us)\n"
        "  --max-findings N     findings listed per kind (default 20)\n"
        "  --world N            the job's size: a ring stating a larger world\n"
        "                       is held to N (as the supervisor does)\n"
        "\n"
        "A directory's files are read on as many threads as this process may\n"
        "run on (at most 8; FIREBREAK_FR_THREADS=N sets it); the result is\n"
        "the same on any number.\n"
        "\n"
        "Exit: 0 ok, 1 hang / mismatch / slow / undecided, 2 bad usage, an\n"
        "INPUT that cannot be opened, no readable input, or incomplete input\n"
        "(verdict incomplete: nothing decided and some ranks' evidence is\n"
        "missing; the result is printed).\n");
}

/* A run directory (or its fr/) given for INPUT i: the newest attempt's
 * snapshots, and PyTorch's dumps of that attempt, as the supervisor reads
 * them at a hang (docs/flight-recorder.md); said on stderr.  *owned: the
 * two paths' memory, to free (NULL when INPUT i stays).  Returns the new
 * number of inputs. */
static int run_dir_inputs(const char **inputs, int n, int i, char **owned)
{
    char fr[PATH_MAX], torch[PATH_MAX];
    int count;
    *owned = NULL;
    long k = fb__fr_newest_attempt(inputs[i], fr, torch, sizeof fr, &count);
    if (k < 0)
        return n;
    size_t lf = strlen(fr) + 1, lt = strlen(torch) + 1;
    char *b = malloc(lf + lt);
    if (!b)
        return n; /* left as given: its error says where the snapshots are */
    memcpy(b, fr, lf);
    memcpy(b + lf, torch, lt);
    *owned = b;
    char safe[3][PATH_MAX], other[32] = "";
    if (count > 1)
        snprintf(other, sizeof other, ", the newest of %d", count);
    fprintf(stderr, "firebreak fr: %s: attempt %ld's flight recorders%s (%s%s%s)\n",
            fb__safe_text(safe[0], PATH_MAX, inputs[i]), k, other,
            fb__safe_text(safe[1], PATH_MAX, fr), torch[0] ? " and PyTorch's in " : "",
            fb__safe_text(safe[2], PATH_MAX, torch));
    inputs[i] = b;
    if (torch[0]) {
        memmove(&inputs[i + 2], &inputs[i + 1], (size_t)(n - i - 1) * sizeof *inputs);
        inputs[i + 1] = b + lf;
        n++;
    }
    return n;
}

static int cmd_analyze(int argc, char **argv)
{
    int json = 0;
    fb__fr_options opt;
    fb__fr_options_init(&opt);
    opt.inputs_must_open = 1; /* an INPUT named that cannot be read: exit 2 */
    /* an INPUT may stand for two (a run directory: the attempt's rings
     * and PyTorch's dumps) */
    const char **inputs = calloc(2 * (size_t)argc + 1, sizeof *inputs);
    int n = 0;
    if (!inputs)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        double d;
        long long x;
        if (fb__cli_is_help(a)) {
            usage(stdout);
            free(inputs);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (i + 1 == argc && (!strcmp(a, "--min-wait") ||
                                     !strcmp(a, "--late-threshold") ||
                                     !strcmp(a, "--max-findings") ||
                                     !strcmp(a, "--world"))) {
            fprintf(stderr, "firebreak fr: %s needs a value\n", a);
            usage(stderr);
            free(inputs);
            return 2;
        } else if (!strcmp(a, "--min-wait") || !strcmp(a, "--late-threshold")) {
            if (fb__parse_duration(argv[i + 1], &d)) {
                fprintf(stderr, "firebreak fr: %s: bad duration '%s'\n", a,
                        argv[i + 1]);
                free(inputs);
                return 2;
            }
            if (!strcmp(a, "--min-wait"))
                opt.min_wait_s = d;
            else
                opt.late_threshold_s = d;
            i++;
        } else if (!strcmp(a, "--max-findings")) {
            if (fb__parse_int(argv[i + 1], 1, 100000, &x)) {
                fprintf(stderr, "firebreak fr: --max-findings: bad number '%s'\n",
                        argv[i + 1]);
                free(inputs);
                return 2;
            }
            opt.max_findings = (int)x;
            i++;
        } else if (!strcmp(a, "--world")) {
            if (fb__parse_int(argv[i + 1], 1, 1 << 24, &x)) {
                fprintf(stderr, "firebreak fr: --world: want a number of ranks "
                        "from 1 to 16777216, not '%s'\n", argv[i + 1]);
                free(inputs);
                return 2;
            }
            opt.world_max = (int)x;
            i++;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "firebreak fr: unknown option '%s'\n", a);
            usage(stderr);
            free(inputs);
            return 2;
        } else {
            inputs[n++] = a;
        }
    }
    if (!n) {
        fprintf(stderr, "firebreak fr analyze: no INPUT given\n");
        usage(stderr);
        free(inputs);
        return 2;
    }
    const char *threads = getenv("FIREBREAK_FR_THREADS");
    long long nthreads;
    if (threads && *threads && fb__parse_int(threads, 1, LLONG_MAX, &nthreads)) {
        char safe[64];
        fprintf(stderr,
                "firebreak fr: FIREBREAK_FR_THREADS='%s' is not a whole number "
                "from 1; reading on as many threads as CPUs\n",
                fb__safe_text(safe, sizeof safe, threads));
    }
    int given = n;
    char **owned = calloc((size_t)given, sizeof *owned);
    if (!owned) {
        free(inputs);
        return 2;
    }
    for (int i = given - 1; i >= 0; i--)
        n = run_dir_inputs(inputs, n, i, &owned[i]);
    fb__fr_result *res = NULL;
    char err[1024];
    int rc = fb__fr_analyze_paths_opt(inputs, n, &opt, &res, err, sizeof err);
    free(inputs);
    for (int i = 0; i < given; i++)
        free(owned[i]);
    free(owned);
    if (rc) {
        char safe[sizeof err];
        fprintf(stderr, "firebreak fr: %s\n", fb__safe_text(safe, sizeof safe, err));
        return 2;
    }
    if (json) {
        fb__jsonw w;
        fb__jsonw_init(&w);
        fb__fr_result_json(res, &w);
        rc = fb__jsonw_print(&w, stdout) ? 2 : 0;
        fb__jsonw_free(&w);
        if (rc) {
            fb__fr_result_free(res);
            return 2;
        }
    } else {
        fb__fr_result_text(res, stdout);
    }
    /* incomplete is an input problem: the ranks given say nothing is
     * wrong, and the ranks not given could */
    fb__fr_verdict_code v = fb__fr_verdict_kind(res);
    rc = v == FB__FR_OK ? 0 : v == FB__FR_INCOMPLETE ? 2 : 1;
    fb__fr_result_free(res);
    return rc;
}

int fb__cmd_fr(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (fb__cli_is_help(argv[1]) ||
        !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "analyze"))
        return cmd_analyze(argc - 1, argv + 1);
    fprintf(stderr, "firebreak fr: unknown subcommand '%s' (analyze)\n", argv[1]);
    usage(stderr);
    return 2;
}
