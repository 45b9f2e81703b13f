/* corral-spawn: the first process of a kernel, built by the agent (see corral/agent/spawn.py).
 *
 *   corral-spawn N FILE... UID GID M NAME=VALUE... COMMAND ARG...
 *
 * Writes its pid to each of the N cgroup.procs FILEs (the kernel's limits apply from its first byte),
 * then, when UID is not "-", drops to UID:GID with no supplementary groups (only after joining: an
 * unprivileged process could not join a cgroup it does not own), then becomes COMMAND (same pid) with
 * the M NAME=VALUEs as its whole environment, PATH searched in it.  It is started as root with an
 * empty environment of its own: the kernel's (LD_PRELOAD and the like) applies only once it runs as
 * the kernel's account.  It does what a shell, setpriv and env did, in one exec instead of four.
 * Exit codes follow a shell's: 126 when a step fails or COMMAND cannot be executed, 127 when it is
 * not found.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int fail(int code, const char *what, const char *arg) {
    dprintf(2, "corral: %s %s: %s\n", what, arg, strerror(errno));
    return code;
}

static int usage(void) {
    dprintf(2, "corral: corral-spawn: bad arguments\n");
    return 126;
}

/* A count or an id: decimal digits only, at most `max`. */
static int parse(const char *text, unsigned long max, unsigned long *out) {
    if (text[0] < '0' || text[0] > '9') return 0;
    char *end;
    errno = 0;
    *out = strtoul(text, &end, 10);
    return errno == 0 && *end == '\0' && *out <= max;
}

int main(int argc, char **argv) {
    unsigned long n, m, uid = 0, gid = 0;
    if (argc < 2 || !parse(argv[1], (unsigned long)argc, &n) || n + 5 > (unsigned long)argc) return usage();
    char **rest = argv + 2 + n; /* UID GID M ... */
    int own = strcmp(rest[0], "-") != 0;
    if (own && (!parse(rest[0], 0xfffffffeUL, &uid) || !parse(rest[1], 0xfffffffeUL, &gid))) return usage();
    if (!parse(rest[2], (unsigned long)argc, &m) || n + 6 + m > (unsigned long)argc) return usage();

    char pid[24];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    for (unsigned long i = 0; i < n; i++) {
        const char *file = argv[2 + i];
        int fd = open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, (size_t)len) != len) return fail(126, "cannot join cgroup", file);
        close(fd);
    }
    if (own) {
        if (setgroups(0, NULL) != 0) return fail(126, "cannot clear groups for", rest[0]);
        if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) return fail(126, "cannot set group", rest[1]);
        if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) return fail(126, "cannot set user", rest[0]);
    }
    char **env = rest + 3;
    char **command = env + m;
    const char *first = command[0];
    /* A list of its own, ended by NULL (in argv it runs on into the command); execvp reads PATH in it. */
    char **envp = calloc(m + 1, sizeof *envp);
    if (envp == NULL) return fail(126, "cannot start", first);
    memcpy(envp, env, m * sizeof *envp);
    environ = envp;
    execvp(first, command);
    return fail(errno == ENOENT ? 127 : 126, "cannot execute", first);
}
