/* corral-spawn: the first process of a kernel, built by the agent (see corral/agent/spawn.py).
 *
 *   corral-spawn N FILE... UID GID COMMAND ARG...      (the environment on fd 3)
 *
 * Writes its pid to each of the N cgroup.procs FILEs (the kernel's limits apply from its first byte),
 * then, when UID is not "-", drops to UID:GID with no supplementary groups (only after joining: an
 * unprivileged process could not join a cgroup it does not own), then becomes COMMAND (same pid) with
 * the environment read from fd 3 (NAME=VALUE entries, each ended by a NUL), PATH searched in it.
 * It is started as root with an empty environment of its own: the kernel's (LD_PRELOAD and the like)
 * applies only once it runs as the kernel's account, and it never shows in this process's command
 * line, which every account can read.  Exit codes follow a shell's: 126 when a step fails or COMMAND
 * cannot be executed, 127 when it is not found.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENV_FD 3

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

/* The environment on ENV_FD: the whole file, its NUL-ended entries as a NULL-ended list. */
static char **read_env(void) {
    struct stat st;
    if (fstat(ENV_FD, &st) != 0 || st.st_size < 0) return NULL;
    size_t size = (size_t)st.st_size;
    char *text = malloc(size + 1);
    if (text == NULL) return NULL;
    size_t got = 0;
    while (got < size) {
        ssize_t n = pread(ENV_FD, text + got, size - got, (off_t)got);
        if (n <= 0) return NULL;
        got += (size_t)n;
    }
    text[size] = '\0';
    size_t count = 0;
    for (size_t i = 0; i < size; i++) count += text[i] == '\0';
    char **envp = calloc(count + 1, sizeof *envp);
    if (envp == NULL) return NULL;
    for (size_t i = 0, k = 0; i < size && k < count; i += strlen(text + i) + 1) envp[k++] = text + i;
    close(ENV_FD);
    return envp;
}

int main(int argc, char **argv) {
    unsigned long n, uid = 0, gid = 0;
    if (argc < 2 || !parse(argv[1], (unsigned long)argc, &n) || n + 5 > (unsigned long)argc) return usage();
    char **rest = argv + 2 + n; /* UID GID COMMAND ... */
    int own = strcmp(rest[0], "-") != 0;
    if (own && (!parse(rest[0], 0xfffffffeUL, &uid) || !parse(rest[1], 0xfffffffeUL, &gid))) return usage();

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
    char **command = rest + 2;
    char **envp = read_env();
    if (envp == NULL) return fail(126, "cannot read the environment of", command[0]);
    environ = envp;
    execvp(command[0], command);
    return fail(errno == ENOENT ? 127 : 126, "cannot execute", command[0]);
}
