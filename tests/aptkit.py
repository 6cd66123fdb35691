"""System packages some tests need (chromium, Graphviz): installed with apt when missing and
the tests run as root (CI does), one install at a time across pytest-xdist's workers."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

LOCK = "/tmp/sfc-apt-install.lock"


def installed(command: str, package: str) -> str | None:
    """The path of `command`, installing Debian's `package` first when it is missing and
    apt can run; None when it is still missing."""
    found = shutil.which(command)
    if found is not None or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return found
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing it just now
        if shutil.which(command) is None:
            install = ["apt-get", "install", "-y", package]
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            if subprocess.run(install, check=False, timeout=900, env=env).returncode != 0:
                # a fresh image has no package lists yet
                subprocess.run(["apt-get", "update"], check=False, timeout=900, env=env)
                subprocess.run(install, check=False, timeout=900, env=env)
    return shutil.which(command)
