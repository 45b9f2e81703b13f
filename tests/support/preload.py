"""A library to preload into a kernel that records the effective uid of each process it is loaded
into: whether a kernel's LD_PRELOAD ever ran as root on the way to the kernel's account."""

from __future__ import annotations

import subprocess
from pathlib import Path

SPY = r"""
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void spy(void) {
    const char *log = getenv("EUID_LOG");
    int fd = log ? open(log, O_WRONLY | O_APPEND | O_CREAT, 0666) : -1;
    if (fd >= 0) { dprintf(fd, "%d\n", (int)geteuid()); close(fd); }
}
"""


def euid_spy(directory: Path) -> dict[str, str]:
    """Builds it in `directory` (one every account may write to); the environment that preloads it."""
    source, library = directory / "euid.c", directory / "euid.so"
    source.write_text(SPY)
    built = subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)])
    assert built.returncode == 0
    return {"LD_PRELOAD": str(library), "EUID_LOG": str(directory / "euid.log")}


def euids(env: dict[str, str]) -> list[str]:
    """The effective uids it recorded, in order."""
    return Path(env["EUID_LOG"]).read_text().split()
