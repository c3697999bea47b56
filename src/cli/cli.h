/*
 * cli.h -- the `firebreak` tool's subcommands.  Each lives in its own
 * cmd_<name>.c, parses its arguments and calls its component's API.
 * argv[0] is the subcommand's name.  Exit codes: 0 ok, 1 the thing checked
 * is bad, 2 usage or input error (health: Nagios convention, see there).
 */
#ifndef FB_CLI_CLI_H
#define FB_CLI_CLI_H

#include <string.h>

/* `--help` or `-h`. */
static inline int fb__cli_is_help(const char *arg)
{
    return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

int fb__cmd_run(int argc, char **argv);
int fb__cmd_demo(int argc, char **argv);
int fb__cmd_ckpt(int argc, char **argv);
int fb__cmd_fr(int argc, char **argv);
int fb__cmd_health(int argc, char **argv);
int fb__cmd_agent(int argc, char **argv);
int fb__cmd_report(int argc, char **argv);
int fb__cmd_sim(int argc, char **argv);
int fb__cmd_watch(int argc, char **argv);
int fb__cmd_slurm_epilog(int argc, char **argv);

struct fb__sup_result;
struct fb__sup_incident;
struct fb__jsonw;
/* Replace a run's live estimates by the journal's exact accounting, and
 * give each incident its root cause (the report's). */
void fb__cli_account(struct fb__sup_result *res);
/* An incident's root cause as --json keys: category, component,
 * decided_by, injected (null where not known). */
void fb__cli_cause_json(struct fb__jsonw *w, const struct fb__sup_incident *in);

/* Path of the running firebreak binary (for re-executing itself). */
const char *fb__cli_self(void);

/* A command that said itself why its stdout could not be written (with
 * the write's own errno) sets this, and main.c's last flush does not say
 * it again. */
extern int fb__cli_stdout_said;

#endif
