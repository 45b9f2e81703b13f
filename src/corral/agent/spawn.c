/* corral-spawn: the first process of a kernel, built by the agent (see corral/agent/spawn.py).
 *
 *   corral-spawn N FILE... UID GID COMMAND ARG...      (the environment on fd 3)
 *
 * Writes its pid to each of the N cgroup.procs FILEs (the kernel's limits apply from its first byte),
 * then, when UID is not "-", drops to UID:GID with no supplementary groups (only after joining: an
 * unprivileged process could not join a cgroup it does not own), then becomes COMMAND (same pid) with
 * the environment read from fd 3 (NAME=VALUE entries, each ended by a NUL), PATH searched in it as
 * execvp does.  It is started as root with an empty environment of its own: the kernel's
 * (LD_PRELOAD and the like) applies only once it runs as the kernel's account, and it never shows in
 * this process's command line, which every account can read.  Exit codes follow a shell's: 126 when
 * a step fails or COMMAND cannot be executed, 127 when it is not found.
 *
 * Built with CORRAL_BARE on x86-64 and arm64 it uses no C library at all, only system calls: on a
 * 2-core VM a static glibc's start-up (relocations, CPU feature probes) cost 0.35-0.4 ms of CPU per
 * kernel, where the exec into this helper costs 0.1 ms.  Elsewhere, or when that build fails or
 * misbehaves (spawn.py tries it first), the same code runs on the C library.
 */
#if defined(CORRAL_BARE) && !(defined(__x86_64__) || defined(__aarch64__))
#error "no bare build for this architecture: the C library's build is used"
#endif

#ifdef CORRAL_BARE
typedef unsigned long size_t;
typedef long ssize_t;
#define NULL ((void *)0)
#define O_WRONLY 01
#define O_CLOEXEC 02000000
#define AT_FDCWD (-100)
#define SEEK_SET 0
#define SEEK_END 2
#define EPERM 1
#define ENOENT 2
#define ESRCH 3
#define EIO 5
#define ENXIO 6
#define E2BIG 7
#define ENOEXEC 8
#define EBADF 9
#define EAGAIN 11
#define ENOMEM 12
#define EACCES 13
#define EFAULT 14
#define EBUSY 16
#define ENODEV 19
#define ENOTDIR 20
#define EISDIR 21
#define EINVAL 22
#define ENFILE 23
#define EMFILE 24
#define ETXTBSY 26
#define EFBIG 27
#define ENOSPC 28
#define ESPIPE 29
#define EROFS 30
#define ENAMETOOLONG 36
#define ELOOP 40
#define ELIBBAD 80
#define ETIMEDOUT 110
#define ESTALE 116

#if defined(__x86_64__)
enum { SYS_read_at = 17, SYS_write = 1, SYS_openat = 257, SYS_close = 3, SYS_lseek = 8, SYS_mmap = 9,
       SYS_getpid = 39, SYS_setgroups = 116, SYS_setresuid = 117, SYS_setresgid = 119,
       SYS_execve = 59, SYS_exit_group = 231 };

static long sys(long n, long a, long b, long c, long d, long e, long f) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
/* The stack as the kernel leaves it (argc, argv..., 0, envp..., 0) goes to start(), aligned. */
__asm__(".text\n.global _start\n_start:\n xor %rbp, %rbp\n mov %rsp, %rdi\n and $-16, %rsp\n call start\n hlt\n");
#else
enum { SYS_read_at = 67, SYS_write = 64, SYS_openat = 56, SYS_close = 57, SYS_lseek = 62, SYS_mmap = 222,
       SYS_getpid = 172, SYS_setgroups = 159, SYS_setresuid = 147, SYS_setresgid = 149,
       SYS_execve = 221, SYS_exit_group = 94 };

static long sys(long n, long a, long b, long c, long d, long e, long f) {
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
}
__asm__(".text\n.global _start\n_start:\n mov x0, sp\n bl start\n");
#endif

static int errno;

/* A system call's result, with errno set from a failure's negative error number, as libc does. */
static long checked(long ret) {
    if (ret < 0 && ret > -4096) {
        errno = (int)-ret;
        return -1;
    }
    return ret;
}

/* What the compiler may call on its own, for a copy or a zeroing it spots. */
void *memset(void *dst, int c, size_t n) {
    unsigned char *d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}
void *memcpy(void *dst, const void *src, size_t n) {
    unsigned char *d = dst;
    const unsigned char *s = src;
    while (n--) *d++ = *s++;
    return dst;
}

static int os_open(const char *path, int flags) { return (int)checked(sys(SYS_openat, AT_FDCWD, (long)path, flags, 0, 0, 0)); }
static ssize_t os_write(int fd, const void *buf, size_t n) { return checked(sys(SYS_write, fd, (long)buf, (long)n, 0, 0, 0)); }
static ssize_t os_pread(int fd, void *buf, size_t n, long at) { return checked(sys(SYS_read_at, fd, (long)buf, (long)n, at, 0, 0)); }
static long os_size(int fd) { return checked(sys(SYS_lseek, fd, 0, SEEK_END, 0, 0, 0)); }
static void os_close(int fd) { sys(SYS_close, fd, 0, 0, 0, 0, 0); }
static long os_getpid(void) { return sys(SYS_getpid, 0, 0, 0, 0, 0, 0); }
static int os_drop_groups(void) { return (int)checked(sys(SYS_setgroups, 0, 0, 0, 0, 0, 0)); }
static int os_setresgid(unsigned long g) { return (int)checked(sys(SYS_setresgid, (long)g, (long)g, (long)g, 0, 0, 0)); }
static int os_setresuid(unsigned long u) { return (int)checked(sys(SYS_setresuid, (long)u, (long)u, (long)u, 0, 0, 0)); }
static int os_execve(const char *path, char *const argv[], char *const envp[]) {
    return (int)checked(sys(SYS_execve, (long)path, (long)argv, (long)envp, 0, 0, 0));
}
/* Zeroed memory that lives until the exec (never freed). */
static void *os_alloc(size_t n) {
    long p = checked(sys(SYS_mmap, 0, (long)(n ? n : 1), 3 /* read, write */, 0x22 /* private, anonymous */, -1, 0));
    return p == -1 ? NULL : (void *)p;
}

static const char *os_strerror(int e) {
    switch (e) {
    /* glibc's texts, for what opening a cgroup file, reading fd 3 or an exec can fail with. */
    case EPERM: return "Operation not permitted";
    case ENOENT: return "No such file or directory";
    case ESRCH: return "No such process";
    case EIO: return "Input/output error";
    case ENXIO: return "No such device or address";
    case E2BIG: return "Argument list too long";
    case ENOEXEC: return "Exec format error";
    case EBADF: return "Bad file descriptor";
    case EAGAIN: return "Resource temporarily unavailable";
    case ENOMEM: return "Cannot allocate memory";
    case EACCES: return "Permission denied";
    case EFAULT: return "Bad address";
    case EBUSY: return "Device or resource busy";
    case ENODEV: return "No such device";
    case ENOTDIR: return "Not a directory";
    case EISDIR: return "Is a directory";
    case EINVAL: return "Invalid argument";
    case ENFILE: return "Too many open files in system";
    case EMFILE: return "Too many open files";
    case ETXTBSY: return "Text file busy";
    case EFBIG: return "File too large";
    case ENOSPC: return "No space left on device";
    case ESPIPE: return "Illegal seek";
    case EROFS: return "Read-only file system";
    case ENAMETOOLONG: return "File name too long";
    case ELOOP: return "Too many levels of symbolic links";
    case ELIBBAD: return "Accessing a corrupted shared library";
    case ETIMEDOUT: return "Connection timed out";
    case ESTALE: return "Stale file handle";
    default: return NULL;
    }
}
#else
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int os_open(const char *path, int flags) { return open(path, flags); }
static ssize_t os_write(int fd, const void *buf, size_t n) { return write(fd, buf, n); }
static ssize_t os_pread(int fd, void *buf, size_t n, long at) { return pread(fd, buf, n, (off_t)at); }
static long os_size(int fd) { return (long)lseek(fd, 0, SEEK_END); }
static void os_close(int fd) { close(fd); }
static long os_getpid(void) { return (long)getpid(); }
static int os_drop_groups(void) { return setgroups(0, NULL); }
static int os_setresgid(unsigned long g) { return setresgid((gid_t)g, (gid_t)g, (gid_t)g); }
static int os_setresuid(unsigned long u) { return setresuid((uid_t)u, (uid_t)u, (uid_t)u); }
static int os_execve(const char *path, char *const argv[], char *const envp[]) { return execve(path, argv, envp); }
static void *os_alloc(size_t n) { return calloc(n ? n : 1, 1); }
static const char *os_strerror(int e) { return strerror(e); }
#endif

#define ENV_FD 3
#define PATH_MAX_LEN 4096
#define NAME_MAX_LEN 255
#define DEFAULT_PATH "/bin:/usr/bin" /* execvp's, when the environment has no PATH */

static size_t length(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

static int same(const char *a, const char *b) {
    while (*a && *a == *b) a++, b++;
    return *a == *b;
}

/* Appends `s` at `*at` within `buf` of `size` (cut short, never past its end). */
static void put(char *buf, size_t size, size_t *at, const char *s) {
    while (*s && *at + 1 < size) buf[(*at)++] = *s++;
}

/* "corral: WHAT ARG: REASON" on stderr, and the exit code. */
static int fail(int code, const char *what, const char *arg) {
    char line[PATH_MAX_LEN + 256];
    char number[32];
    size_t at = 0;
    const char *reason = os_strerror(errno);
    if (reason == NULL) { /* "error N", for what the bare build has no text for */
        size_t end = sizeof number;
        number[--end] = '\0';
        unsigned int e = (unsigned int)errno;
        do number[--end] = (char)('0' + e % 10); while ((e /= 10) > 0);
        for (const char *w = " rorre"; *w; w++) number[--end] = *w;
        reason = number + end;
    }
    put(line, sizeof line, &at, "corral: ");
    put(line, sizeof line, &at, what);
    put(line, sizeof line, &at, " ");
    put(line, sizeof line, &at, arg);
    put(line, sizeof line, &at, ": ");
    put(line, sizeof line, &at, reason);
    line[at++] = '\n';
    os_write(2, line, at);
    return code;
}

static int usage(void) {
    static const char text[] = "corral: corral-spawn: bad arguments\n";
    os_write(2, text, sizeof text - 1);
    return 126;
}

/* A count or an id: decimal digits only, at most `max`. */
static int parse(const char *text, unsigned long max, unsigned long *out) {
    unsigned long value = 0;
    if (*text == '\0') return 0;
    for (; *text; text++) {
        if (*text < '0' || *text > '9') return 0;
        unsigned long digit = (unsigned long)(*text - '0');
        if (value > max / 10 || (value == max / 10 && digit > max % 10)) return 0;
        value = value * 10 + digit;
    }
    *out = value;
    return 1;
}

/* The environment on ENV_FD: the whole file, its NUL-ended entries as a NULL-ended list. */
static char **read_env(void) {
    long size = os_size(ENV_FD);
    if (size < 0) return NULL;
    char *text = os_alloc((size_t)size + 1);
    if (text == NULL) return NULL;
    long got = 0;
    while (got < size) {
        ssize_t n = os_pread(ENV_FD, text + got, (size_t)(size - got), got);
        if (n <= 0) return NULL;
        got += n;
    }
    text[size] = '\0';
    size_t count = 0;
    for (long i = 0; i < size; i++) count += text[i] == '\0';
    char **envp = os_alloc((count + 1) * sizeof *envp);
    if (envp == NULL) return NULL;
    for (size_t i = 0, k = 0; i < (size_t)size && k < count; i += length(text + i) + 1) envp[k++] = text + i;
    os_close(ENV_FD);
    return envp;
}

/* execve, and for a file the system cannot execute (no #! line) /bin/sh running it, as execvp does
 * (when that fails too, errno is the shell's, as there). */
static void execute(const char *path, char **argv, char **envp) {
    os_execve(path, argv, envp);
    if (errno != ENOEXEC) return;
    size_t argc = 0;
    while (argv[argc]) argc++;
    char **script = os_alloc((argc + 2) * sizeof *script);
    if (script == NULL) return;
    script[0] = "/bin/sh";
    script[1] = (char *)path;
    for (size_t i = 1; i < argc; i++) script[i + 1] = argv[i];
    os_execve("/bin/sh", script, envp);
}

/* Becomes `argv[0]` as execvp would: a name with a slash as it is, any other searched in the PATH of
 * `envp`; returns only when it cannot, with errno saying why. */
static void become(char **argv, char **envp) {
    const char *file = argv[0];
    for (const char *c = file; *c; c++)
        if (*c == '/') {
            execute(file, argv, envp);
            return;
        }
    if (*file == '\0') {
        errno = ENOENT;
        return;
    }
    const char *search = DEFAULT_PATH;
    for (char **e = envp; *e; e++)
        if ((*e)[0] == 'P' && (*e)[1] == 'A' && (*e)[2] == 'T' && (*e)[3] == 'H' && (*e)[4] == '=') {
            search = *e + 5;
            break;
        }
    size_t name = length(file);
    if (name > NAME_MAX_LEN) {
        errno = ENAMETOOLONG;
        return;
    }
    int denied = 0;
    errno = ENOENT; /* what is said when every entry is too long to try */
    char candidate[PATH_MAX_LEN + 1 + NAME_MAX_LEN + 1];
    for (const char *dir = search;; dir++) {
        const char *end = dir;
        while (*end && *end != ':') end++;
        size_t len = (size_t)(end - dir);
        if (len < PATH_MAX_LEN) { /* a longer one is skipped, as execvp does */
            size_t at = 0;
            if (len == 0) candidate[at++] = '.'; /* an empty entry is the current directory */
            for (size_t i = 0; i < len; i++) candidate[at++] = dir[i];
            candidate[at++] = '/';
            for (size_t i = 0; i <= name; i++) candidate[at++] = file[i];
            execute(candidate, argv, envp);
            switch (errno) {
            case EACCES:
                denied = 1; /* one found but not executable: said if nothing else is */
                break;
            case ENOENT:
            case ESTALE:
            case ENOTDIR:
            case ENODEV:
            case ETIMEDOUT:
                break;
            default:
                return; /* found, but it cannot run: that is the answer */
            }
        }
        if (*end == '\0') break;
        dir = end;
    }
    if (denied) errno = EACCES;
}

static int run(int argc, char **argv) {
    unsigned long n, uid = 0, gid = 0;
    if (argc < 2 || !parse(argv[1], (unsigned long)argc, &n) || n + 5 > (unsigned long)argc) return usage();
    char **rest = argv + 2 + n; /* UID GID COMMAND ... */
    int own = !same(rest[0], "-");
    if (own && (!parse(rest[0], 0xfffffffeUL, &uid) || !parse(rest[1], 0xfffffffeUL, &gid))) return usage();

    char pid[24];
    size_t len = 0;
    {
        char digits[24];
        int i = 0;
        long p = os_getpid();
        do digits[i++] = (char)('0' + p % 10); while ((p /= 10) > 0);
        while (i > 0) pid[len++] = digits[--i];
        pid[len++] = '\n';
    }
    for (unsigned long i = 0; i < n; i++) {
        const char *file = argv[2 + i];
        int fd = os_open(file, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || os_write(fd, pid, len) != (ssize_t)len) return fail(126, "cannot join cgroup", file);
        os_close(fd);
    }
    if (own) {
        if (os_drop_groups() != 0) return fail(126, "cannot clear groups for", rest[0]);
        if (os_setresgid(gid) != 0) return fail(126, "cannot set group", rest[1]);
        if (os_setresuid(uid) != 0) return fail(126, "cannot set user", rest[0]);
    }
    char **command = rest + 2;
    char **envp = read_env();
    if (envp == NULL) return fail(126, "cannot read the environment of", command[0]);
    become(command, envp);
    return fail(errno == ENOENT ? 127 : 126, "cannot execute", command[0]);
}

#ifdef CORRAL_BARE
__attribute__((noreturn, used)) void start(long *sp) {
    int code = run((int)sp[0], (char **)(sp + 1));
    for (;;) sys(SYS_exit_group, code, 0, 0, 0, 0, 0);
}
#else
int main(int argc, char **argv) { return run(argc, argv); }
#endif
