/*
 * test_epilog.c -- Slurm's Epilog for firebreak (src/supervisor/epilog.c,
 * `firebreak slurm-epilog`), without a cluster:
 *   - the marker: formatted and parsed back; hostile markers refused;
 *   - fb__epilog_mark writes it (SLURM_JOB_ID) atomically, nothing
 *     outside Slurm;
 *   - the cleanup, in a directory standing for /dev/shm: the job's
 *     fb.<J>.mem goes, with J's rank segments and fb.<J>.ompi; another
 *     job's directory, one without a marker or with a bad one (garbage,
 *     too long, a symlink, a FIFO, another owner's), a symlink under the
 *     name, a directory others may write or that another user owns stay,
 *     and a symlink inside the job's directory is removed, not followed;
 *   - the command itself (argv[1]), as `firebreak slurm-epilog` and under
 *     its Epilog name: exit 0 whatever it is given from the environment.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../check.h"
#include "common/util.h"
#include "supervisor/watcher.h"

static char root[PATH_MAX], shm[PATH_MAX + 8], outside[PATH_MAX + 16];

static void put(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECKF(fd >= 0, "create %s: %s", path, strerror(errno));
    if (fd < 0)
        return;
    CHECK_RC(fb__write_all(fd, text, strlen(text)), 0);
    close(fd);
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* shm/<name>, a directory with a marker naming job (0: none). */
static void mem_dir(const char *name, const char *marker)
{
    char d[PATH_MAX * 2], f[PATH_MAX * 3];
    snprintf(d, sizeof d, "%s/%s", shm, name);
    CHECKF(mkdir(d, 0700) == 0, "mkdir %s: %s", d, strerror(errno));
    if (!marker)
        return;
    snprintf(f, sizeof f, "%s/" FB__EPILOG_MARKER, d);
    put(f, marker);
}

static const char *at(const char *name)
{
    static char p[4][PATH_MAX * 2];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", shm, name);
    return p[k];
}

static void test_marker(void)
{
    char buf[FB__EPILOG_MARKER_MAX];
    uint32_t job = 7;
    int n = fb__epilog_marker_format(buf, sizeof buf, 4294967295u);
    CHECK_EQ_STR(buf, "SLURM_JOB_ID=4294967295\n");
    CHECK_RC(fb__epilog_marker_parse(buf, (size_t)n, &job), 0);
    CHECK_EQ_U64(job, 4294967295u);
    CHECK_RC(fb__epilog_marker_parse("SLURM_JOB_ID=42", 15, &job), 0);
    CHECK_EQ_U64(job, 42);
    static const char *const bad[] = {
        "", "SLURM_JOB_ID=", "SLURM_JOB_ID=\n", "SLURM_JOB_ID=0", "SLURM_JOB_ID=042",
        "SLURM_JOB_ID=4294967296", "SLURM_JOB_ID=99999999999", "SLURM_JOB_ID=42\n\n",
        "SLURM_JOB_ID=42 ", "SLURM_JOB_ID= 42", "SLURM_JOB_ID=+42", "SLURM_JOB_ID=-1",
        "SLURM_JOB_ID=4x", "slurm_job_id=42", "SLURM_JOBID=42", " SLURM_JOB_ID=42",
        "SLURM_JOB_ID=42\r\n", "42",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        job = 7;
        CHECKF(fb__epilog_marker_parse(bad[i], strlen(bad[i]), &job) == -EINVAL,
               "'%s' parsed", bad[i]);
        CHECK_EQ_U64(job, 7);
    }
    CHECK_RC(fb__epilog_marker_parse("SLURM_JOB_ID=4\0002", 16, &job), -EINVAL);
    char longer[FB__EPILOG_MARKER_MAX + 2];
    memset(longer, '\n', sizeof longer);
    memcpy(longer, "SLURM_JOB_ID=42", 15);
    CHECK_RC(fb__epilog_marker_parse(longer, sizeof longer, &job), -EINVAL);
    CHECK_RC(fb__epilog_parse_job_id("123", &job), 0);
    CHECK_EQ_U64(job, 123);
    CHECK_RC(fb__epilog_parse_job_id("123.0", &job), -EINVAL);
    CHECK_RC(fb__epilog_parse_job_id("12345678901", &job), -EINVAL);
    CHECK_RC(fb__epilog_parse_job_id(NULL, &job), -EINVAL);
}

static void test_mark(void)
{
    char d[PATH_MAX * 2], f[PATH_MAX * 3], text[128] = "";
    snprintf(d, sizeof d, "%s/fb.marked.mem", root);
    snprintf(f, sizeof f, "%s/" FB__EPILOG_MARKER, d);
    unsetenv("SLURM_JOB_ID");
    CHECK_RC(fb__epilog_mark(d, 1, stderr), 0);
    CHECK(!exists(d)); /* not under Slurm: nothing */
    setenv("SLURM_JOB_ID", "42x", 1);
    CHECK_RC(fb__epilog_mark(d, 1, stderr), -EINVAL);
    CHECK(!exists(d));
    setenv("SLURM_JOB_ID", "42", 1);
    CHECK_RC(fb__epilog_mark(d, 1, stderr), 0);
    struct stat st;
    CHECK(stat(d, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700);
    FILE *fp = fopen(f, "r");
    CHECK(fp != NULL);
    if (fp) {
        CHECK(fgets(text, sizeof text, fp) != NULL);
        fclose(fp);
    }
    CHECK_EQ_STR(text, "SLURM_JOB_ID=42\n");
    CHECK_RC(fb__epilog_mark(d, 0, stderr), 0); /* again: the same, in place */
    CHECK_RC(fb__epilog_mark_job("a/../b", stderr), -EINVAL);
    unsetenv("SLURM_JOB_ID");
}

static void test_clean(void)
{
    char p[PATH_MAX * 3];
    /* The job's (42): its memory with steps, peer copies and a symlink
     * out, its segments and Open MPI directory. */
    mem_dir("fb.run-a1.mem", "SLURM_JOB_ID=42\n");
    snprintf(p, sizeof p, "%s/step-0000000005", at("fb.run-a1.mem"));
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/step-0000000005/rank-0.safetensors", at("fb.run-a1.mem"));
    put(p, "shard");
    snprintf(p, sizeof p, "%s/peer", at("fb.run-a1.mem"));
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/peer/step-0000000005", at("fb.run-a1.mem"));
    CHECK(mkdir(p, 0700) == 0);
    snprintf(p, sizeof p, "%s/peer/step-0000000005/rank-1.safetensors", at("fb.run-a1.mem"));
    put(p, "copy");
    snprintf(p, sizeof p, "%s/out", at("fb.run-a1.mem"));
    CHECK(symlink(outside, p) == 0);
    put(at("fb.run-a1.0.0"), "seg");
    put(at("fb.run-a1.3.17"), "seg");
    CHECK(mkdir(at("fb.run-a1.ompi"), 0700) == 0);
    snprintf(p, sizeof p, "%s/x", at("fb.run-a1.ompi"));
    put(p, "x");
    /* The same job, a second firebreak run in it. */
    mem_dir("fb.run-a2.mem", "SLURM_JOB_ID=42");
    /* Another job's. */
    mem_dir("fb.run-b.mem", "SLURM_JOB_ID=43\n");
    put(at("fb.run-b.0.0"), "seg");
    /* No marker, a bad one, one too long. */
    mem_dir("fb.run-c.mem", NULL);
    mem_dir("fb.run-d.mem", "SLURM_JOB_ID=42x\n");
    char pad[FB__EPILOG_MARKER_MAX + 20];
    snprintf(pad, sizeof pad, "SLURM_JOB_ID=42%*s", FB__EPILOG_MARKER_MAX, "\n");
    mem_dir("fb.run-e.mem", pad);
    /* A marker that is a symlink to a good one; one that is a FIFO. */
    mem_dir("fb.run-f.mem", NULL);
    snprintf(p, sizeof p, "%s/good", outside);
    put(p, "SLURM_JOB_ID=42\n");
    char m[PATH_MAX * 3];
    snprintf(m, sizeof m, "%s/" FB__EPILOG_MARKER, at("fb.run-f.mem"));
    CHECK(symlink(p, m) == 0);
    mem_dir("fb.run-g.mem", NULL);
    snprintf(m, sizeof m, "%s/" FB__EPILOG_MARKER, at("fb.run-g.mem"));
    CHECK(mkfifo(m, 0600) == 0);
    /* A symlink under the job's name, to a directory with a good marker. */
    snprintf(p, sizeof p, "%s/" FB__EPILOG_MARKER, outside);
    put(p, "SLURM_JOB_ID=42\n");
    CHECK(symlink(outside, at("fb.run-h.mem")) == 0);
    /* A directory others may write into, with a good marker. */
    mem_dir("fb.run-i.mem", "SLURM_JOB_ID=42\n");
    CHECK(chmod(at("fb.run-i.mem"), 0777) == 0);
    /* Another user's, with a good marker; a marker of another owner. */
    int as_root = geteuid() == 0;
    if (as_root) {
        mem_dir("fb.run-j.mem", "SLURM_JOB_ID=42\n");
        snprintf(m, sizeof m, "%s/" FB__EPILOG_MARKER, at("fb.run-j.mem"));
        CHECK(chown(m, 54321, 54321) == 0 && chown(at("fb.run-j.mem"), 54321, 54321) == 0);
        mem_dir("fb.run-k.mem", "SLURM_JOB_ID=42\n");
        snprintf(m, sizeof m, "%s/" FB__EPILOG_MARKER, at("fb.run-k.mem"));
        CHECK(chown(m, 54321, 54321) == 0);
    }
    /* Names that are not a job's memory. */
    mem_dir("fb.run-a1.mem.x", "SLURM_JOB_ID=42\n");
    mem_dir("fb..mem", "SLURM_JOB_ID=42\n");
    put(at("other"), "x");

    fb__epilog_opts o = {.shm_dir = shm, .job = 42, .log = stderr};
    fb__epilog_result r;
    fb__epilog_clean(&o, &r);
    CHECK_EQ_INT(r.jobs, 2);
    CHECK_EQ_INT(r.removed, 5); /* two memories, two segments, ompi */
    CHECK_EQ_INT(r.failed, 0);
    CHECK_EQ_INT(r.left, as_root ? 9 : 7);
    static const char *const gone[] = {"fb.run-a1.mem", "fb.run-a1.0.0", "fb.run-a1.3.17",
                                       "fb.run-a1.ompi", "fb.run-a2.mem"};
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        CHECKF(!exists(at(gone[i])), "%s is still there", gone[i]);
    static const char *const kept[] = {"fb.run-b.mem", "fb.run-b.0.0", "fb.run-c.mem",
                                       "fb.run-d.mem", "fb.run-e.mem", "fb.run-f.mem",
                                       "fb.run-g.mem", "fb.run-h.mem", "fb.run-i.mem",
                                       "fb.run-a1.mem.x", "fb..mem", "other"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        CHECKF(exists(at(kept[i])), "%s was removed", kept[i]);
    if (as_root) {
        CHECK(exists(at("fb.run-j.mem")));
        CHECK(exists(at("fb.run-k.mem")));
    }
    /* Nothing behind the symlinks went. */
    snprintf(p, sizeof p, "%s/good", outside);
    CHECK(exists(p));
    snprintf(p, sizeof p, "%s/" FB__EPILOG_MARKER, outside);
    CHECK(exists(p));

    /* Another job: nothing of 42's is left, 43's goes, also a directory
     * of its user (SLURM_JOB_UID) when that is not root; a tree deeper
     * than FB__EPILOG_MAX_DEPTH is removed as deep as that, and said. */
    o.job = 43;
    o.have_uid = 1;
    o.job_uid = 54321;
    if (as_root) {
        mem_dir("fb.run-l.mem", "SLURM_JOB_ID=43\n");
        snprintf(m, sizeof m, "%s/" FB__EPILOG_MARKER, at("fb.run-l.mem"));
        CHECK(chown(m, 54321, 54321) == 0 && chown(at("fb.run-l.mem"), 54321, 54321) == 0);
    }
    mem_dir("fb.run-deep.mem", "SLURM_JOB_ID=43\n");
    size_t len = (size_t)snprintf(p, sizeof p, "%s", at("fb.run-deep.mem"));
    for (int k = 0; k < FB__EPILOG_MAX_DEPTH + 4 && len + 3 < sizeof p; k++) {
        len += (size_t)snprintf(p + len, sizeof p - len, "/d");
        CHECK(mkdir(p, 0700) == 0);
    }
    fb__epilog_clean(&o, &r);
    CHECK_EQ_INT(r.jobs, as_root ? 3 : 2);
    CHECK_EQ_INT(r.removed, as_root ? 3 : 2);
    CHECK_EQ_INT(r.failed, 1);
    CHECK(!exists(at("fb.run-b.mem")) && !exists(at("fb.run-b.0.0")));
    CHECK(!exists(at("fb.run-l.mem")));
    CHECK(exists(at("fb.run-deep.mem")));
    CHECK(exists(at("fb.run-c.mem")));
    if (as_root)
        CHECK(exists(at("fb.run-j.mem"))); /* 42's, of that user */
    CHECK_EQ_INT(fb__rm_rf(at("fb.run-deep.mem")), 0);
}

/* Run the command (argv0: its name) with SLURM_JOB_ID=job (NULL: unset);
 * its exit status, -1 when it did not exit. */
static int run(const char *bin, const char *argv0, const char *job)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (job)
            setenv("SLURM_JOB_ID", job, 1);
        else
            unsetenv("SLURM_JOB_ID");
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        if (!strcmp(argv0, "slurm-epilog"))
            execl(bin, "firebreak", "slurm-epilog", "--shm", shm, (char *)NULL);
        else
            execl(bin, argv0, "--shm", shm, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

static void test_command(const char *fb)
{
    char link[PATH_MAX + 32];
    snprintf(link, sizeof link, "%s/firebreak-slurm-epilog", root);
    CHECK(symlink(fb, link) == 0);
    mem_dir("fb.cmd1.mem", "SLURM_JOB_ID=77\n");
    mem_dir("fb.cmd2.mem", "SLURM_JOB_ID=78\n");
    CHECK_EQ_INT(run(fb, "slurm-epilog", NULL), 0);
    CHECK_EQ_INT(run(fb, "slurm-epilog", "garbage"), 0);
    CHECK_EQ_INT(run(fb, "slurm-epilog", "99"), 0);
    CHECK(exists(at("fb.cmd1.mem")) && exists(at("fb.cmd2.mem")));
    CHECK_EQ_INT(run(fb, "slurm-epilog", "77"), 0);
    CHECK(!exists(at("fb.cmd1.mem")) && exists(at("fb.cmd2.mem")));
    CHECK_EQ_INT(run(link, link, "78"), 0); /* slurm.conf's Epilog= name */
    CHECK(!exists(at("fb.cmd2.mem")));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_epilog FIREBREAK\n");
        return 2;
    }
    snprintf(root, sizeof root, "/tmp/fb-epilog.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    check_tmpdir(root);
    snprintf(shm, sizeof shm, "%s/shm", root);
    snprintf(outside, sizeof outside, "%s/precious", root);
    CHECK(mkdir(shm, 01777) == 0 && chmod(shm, 01777) == 0);
    CHECK(mkdir(outside, 0700) == 0);
    test_marker();
    test_mark();
    test_clean();
    char fb[PATH_MAX];
    CHECK(realpath(argv[1], fb) != NULL);
    test_command(fb);
    fb__rm_rf(root);
    return failures != 0;
}
