/* corral-spawn: the first process of a kernel, built by the agent (see corral/agent/spawn.py).
 *
 *   corral-spawn N FILE... UID GID COMMAND ARG...
 *
 * Writes its pid to each of the N cgroup.procs FILEs (the kernel's limits apply from its first byte),
 * then, when UID is not "-", drops to UID:GID with no supplementary groups (only after joining: an
 * unprivileged process could not join a cgroup it does not own), then becomes COMMAND (same pid,
 * PATH searched in the kernel's environment).  It does what `sh -c TRAMPOLINE` followed by `setpriv`
 * did, in one exec instead of three.  Exit codes follow a shell's: 126 when a step fails or COMMAND
 * cannot be executed, 127 when there is no COMMAND.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(int code, const char *what, const char *arg) {
    dprintf(2, "corral: %s %s: %s\n", what, arg, strerror(errno));
    return code;
}

static int parse_id(const char *text, unsigned long *out) {
    char *end;
    errno = 0;
    *out = strtoul(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && *out <= 0xfffffffeUL;
}

int main(int argc, char **argv) {
    if (argc < 2) return 126;
    char *end;
    long n = strtol(argv[1], &end, 10);
    if (*end != '\0' || n < 0 || n > argc - 5) {
        dprintf(2, "corral: corral-spawn: bad arguments\n");
        return 126;
    }
    char pid[24];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    for (long i = 0; i < n; i++) {
        const char *file = argv[2 + i];
        int fd = open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, pid, (size_t)len) != len) return fail(126, "cannot join cgroup", file);
        close(fd);
    }
    char **rest = argv + 2 + n;
    if (strcmp(rest[0], "-") != 0) {
        unsigned long uid, gid;
        if (!parse_id(rest[0], &uid) || !parse_id(rest[1], &gid)) {
            dprintf(2, "corral: corral-spawn: bad user %s:%s\n", rest[0], rest[1]);
            return 126;
        }
        if (setgroups(0, NULL) != 0) return fail(126, "cannot clear groups for", rest[0]);
        if (setresgid((gid_t)gid, (gid_t)gid, (gid_t)gid) != 0) return fail(126, "cannot set group", rest[1]);
        if (setresuid((uid_t)uid, (uid_t)uid, (uid_t)uid) != 0) return fail(126, "cannot set user", rest[0]);
    }
    char **command = rest + 2;
    execvp(command[0], command);
    return fail(errno == ENOENT ? 127 : 126, "cannot execute", command[0]);
}
