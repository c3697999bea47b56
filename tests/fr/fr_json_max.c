/*
 * fr_json_max.c -- the verdict the supervisor journals for a hang stays
 * small and readable however many ranks a group lists: every list is cut
 * to max_list entries and the counts give the whole.
 *
 * usage: fr_json_max DUMP_DIR WORLD   (a gen_torch.py --wide WORLD dump:
 * rank 0 waits in all_reduce, ranks 1..WORLD-1 are the culprits)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "common/jsonw.h"
#include "firebreak/firebreak.h"
#include "fr/fr.h"
#include "../check.h"

/* The report's limits for incident.fr_verdict (src/diag/classify.c). */
static int parse_as_report(const char *text, fb__json_doc **doc)
{
    fb__json_limits lim = {.max_input = 1u << 20, .max_depth = 16,
                           .max_nodes = 100000};
    return fb__json_parse(text, strlen(text), &lim, doc, NULL, 0);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: fr_json_max DUMP_DIR WORLD\n");
        return 2;
    }
    long world = atol(argv[2]);
    const char *paths[1] = {argv[1]};
    fb__fr_result *r = NULL;
    char err[512];
    CHECK_RC(fb__fr_analyze_paths(paths, 1, &r, err, sizeof err), 0);
    if (!r)
        return 1;

    fb__jsonw w;
    fb__jsonw_init(&w);
    CHECK_RC(fb__fr_result_json_max(r, &w, 256), 0);
    size_t len = strlen(fb__jsonw_text(&w));
    CHECKF(len < 64 * 1024, "bounded verdict is %zu bytes", len);
    fb__json_doc *doc = NULL;
    CHECK_RC(parse_as_report(fb__jsonw_text(&w), &doc), 0);
    if (doc) {
        const fb__json *root = fb__json_root(doc);
        const fb__json *c = fb__json_get(root, "culprits");
        int64_t count = -1;
        fb__json_as_i64(fb__json_get(root, "culprit_count"), &count);
        CHECKF(c && c->count == 256, "culprits listed: %zu", c ? c->count : 0);
        CHECKF(count == world - 1, "culprit_count %lld, want %ld", (long long)count, world - 1);
        CHECK_EQ_STR(fb__json_as_str(fb__json_get(root, "verdict")), "hang");
        fb__json_free(doc);
    }
    fb__jsonw_free(&w);

    /* The whole result lists every culprit: more than the report reads. */
    fb__jsonw_init(&w);
    CHECK_RC(fb__fr_result_json(r, &w), 0);
    doc = NULL;
    CHECK(parse_as_report(fb__jsonw_text(&w), &doc) != 0);
    fb__json_free(doc);
    fb__jsonw_free(&w);
    fb__fr_result_free(r);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("fr_json_max: all checks passed\n");
    return failures ? 1 : 0;
}
