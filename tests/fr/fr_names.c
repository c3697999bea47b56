/*
 * fr_names.c -- the analyzer's verdicts and finding kinds: every enum value
 * has a name, names round-trip, they are the names docs/flight-recorder.md
 * lists (JSON readers depend on them), and a hang fixture's verdict is the
 * enum and the name at once.
 *
 *   fr_names DOCS/flight-recorder.md FR_DATA_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "fr/fr.h"
#include "../check.h"

/* The paragraph of docs that starts with `lead`, up to the next item. */
static const char *paragraph(const char *doc, const char *lead, size_t *len)
{
    const char *p = strstr(doc, lead);
    if (!p) {
        *len = 0;
        return "";
    }
    const char *e = strstr(p + 1, "\n- ");
    *len = e ? (size_t)(e - p) : strlen(p);
    return p;
}

static int in_paragraph(const char *par, size_t len, const char *name)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "`%s`", name);
    const char *p = strstr(par, quoted);
    return p && p < par + len;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s flight-recorder.md FR_DATA_DIR\n", argv[0]);
        return 2;
    }
    char *doc = NULL;
    size_t doclen = 0;
    CHECK_RC(fb__read_file(argv[1], 1 << 22, &doc, &doclen), 0);
    if (!doc)
        return 1;

    /* the output names, pinned: changing one breaks journals and reports */
    static const char *const verdicts[FB__FR_VERDICT_COUNT_] = {
        [FB__FR_UNDECIDED] = "undecided", [FB__FR_HANG] = "hang",
        [FB__FR_MISMATCH] = "mismatch", [FB__FR_SLOW] = "slow",
        [FB__FR_OK] = "ok", [FB__FR_INCOMPLETE] = "incomplete",
    };
    static const char *const kinds[FB__FR_FINDING_KIND_COUNT_] = {
        [FB__FR_MISSING_RANKS] = "missing_ranks",
        [FB__FR_TYPE_MISMATCH] = "type_mismatch",
        [FB__FR_SIZE_MISMATCH] = "size_mismatch",
        [FB__FR_DTYPE_MISMATCH] = "dtype_mismatch",
        [FB__FR_STATE_MISMATCH] = "state_mismatch",
        [FB__FR_P2P_MISMATCH] = "p2p_mismatch",
        [FB__FR_LATE_RANKS] = "late_ranks",
        [FB__FR_MISSING_DUMP] = "missing_dump",
    };
    size_t vlen, klen;
    const char *vpar = paragraph(doc, "- `verdict`: one of", &vlen);
    const char *kpar = paragraph(doc, "- `findings[].kind`: one of", &klen);
    CHECK(vlen > 0);
    CHECK(klen > 0);

    for (int v = 0; v < FB__FR_VERDICT_COUNT_; v++) {
        const char *n = fb__fr_verdict_name((fb__fr_verdict_code)v);
        CHECKF(n && verdicts[v] && !strcmp(n, verdicts[v]),
               "verdict %d is named %s, want %s", v, n ? n : "(null)",
               verdicts[v] ? verdicts[v] : "(null)");
        CHECKF(n && fb__fr_verdict_from_name(n) == v, "verdict %s -> %d, want %d",
               n ? n : "(null)", n ? fb__fr_verdict_from_name(n) : -1, v);
        CHECKF(n && in_paragraph(vpar, vlen, n),
               "verdict %s is not in docs/flight-recorder.md", n ? n : "(null)");
    }
    for (int k = 0; k < FB__FR_FINDING_KIND_COUNT_; k++) {
        const char *n = fb__fr_finding_kind_name((fb__fr_finding_kind)k);
        CHECKF(n && kinds[k] && !strcmp(n, kinds[k]),
               "finding kind %d is named %s, want %s", k, n ? n : "(null)",
               kinds[k] ? kinds[k] : "(null)");
        CHECKF(n && fb__fr_finding_kind_from_name(n) == k,
               "finding kind %s -> %d, want %d", n ? n : "(null)",
               n ? fb__fr_finding_kind_from_name(n) : -1, k);
        CHECKF(n && in_paragraph(kpar, klen, n),
               "finding kind %s is not in docs/flight-recorder.md",
               n ? n : "(null)");
    }
    CHECK_EQ_STR(fb__fr_verdict_name(FB__FR_VERDICT_COUNT_), NULL);
    CHECK_EQ_STR(fb__fr_verdict_name((fb__fr_verdict_code)-1), NULL);
    CHECK_EQ_STR(fb__fr_finding_kind_name(FB__FR_FINDING_KIND_COUNT_), NULL);
    CHECK_EQ_INT(fb__fr_verdict_from_name("stuck"), -1);
    CHECK_EQ_INT(fb__fr_verdict_from_name(NULL), -1);
    CHECK_EQ_INT(fb__fr_finding_kind_from_name(""), -1);
    CHECK_EQ_INT(fb__fr_verdict_kind(NULL), FB__FR_UNDECIDED);
    CHECK_EQ_STR(fb__fr_verdict(NULL), "undecided");

    /* a result: the enum and the name agree */
    static const struct { const char *dir; fb__fr_verdict_code want; } cases[] = {
        {"torch/hang-json", FB__FR_HANG},
        {"torch/type-json", FB__FR_MISMATCH},
        {"torch/ok-json", FB__FR_OK},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/%s", argv[2], cases[i].dir);
        const char *p = path;
        fb__fr_result *r = NULL;
        CHECK_RC(fb__fr_analyze_paths(&p, 1, &r, err, sizeof err), 0);
        if (!r)
            continue;
        CHECKF(fb__fr_verdict_kind(r) == cases[i].want, "%s: verdict %d (%s), "
               "want %d", cases[i].dir, fb__fr_verdict_kind(r), fb__fr_verdict(r),
               cases[i].want);
        CHECKF(!strcmp(fb__fr_verdict(r), verdicts[cases[i].want]),
               "%s: verdict %s, want %s", cases[i].dir, fb__fr_verdict(r),
               verdicts[cases[i].want]);
        fb__fr_result_free(r);
    }
    free(doc);
    return failures != 0;
}
