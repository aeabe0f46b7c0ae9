"""The compiler sandbox's launcher: a small C++ program, built once per cache folder and compiler, that runs one
command in new user, mount, network, IPC and PID namespaces with a root made of the bind mounts it is given.

``cudagym-jail ROOT OP... -- COMMAND...``: ROOT is an empty folder on which a tmpfs is mounted (inside the new
mount namespace only, so any number of launchers can share it); each OP adds to that root, in order:

* ``-r PATH`` / ``-w PATH``: binds PATH (a real path, no symbolic link in it) at the same place, read-only
  (recursively) or read-write;
* ``-l TEXT PATH``: a symbolic link at PATH with the text TEXT;
* ``-m PATH``: an empty read-only tmpfs over PATH (hides a folder inside a bound one);
* ``-c DIR``: the working directory of COMMAND.

There is no /proc in it (nothing of the toolchain needs one), so no other process can be seen, and /dev holds
only the device nodes bound in.

Then the root becomes ``/`` (``pivot_root``; the old root is detached), the tmpfs itself is made read-only, every
capability is dropped (the bounding set, the inheritable and ambient sets, and ``no_new_privs``), and COMMAND is
executed as the first process of the new PID namespace: when it ends, everything it started ends with it. The
launcher's first process stays outside the PID namespace, waits, and ends as COMMAND ended. Any failure before
COMMAND runs ends the launcher with status FAILED and one line on stderr that starts with MESSAGE and says what
failed and why. Launching it costs about a millisecond.

Kept free of other cudagym imports. The program is trusted code run with the user's reach (it only sets up
mounts): it is built from SOURCE by the environment's own process, and a changed SOURCE or compiler builds anew.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

FAILED = 125
MESSAGE = "cudagym compiler sandbox:"

SOURCE = r"""
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define CUDAGYM_ATTR_RDONLY 0x1ULL
#define FAILED 125

struct cudagym_mount_attr { uint64_t attr_set, attr_clr, propagation, userns_fd; };

static const char* root = "";  // the folder the new root is built in (a tmpfs mounted there)
static size_t root_len = 0;

// Ends the launcher before COMMAND runs: one line that says what failed, and FAILED.
static void die(const char* what, const char* path) {
  int err = errno;
  fprintf(stderr, "cudagym compiler sandbox: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", strerror(err));
  _exit(FAILED);
}

static void put(const char* path, const char* text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  size_t n = strlen(text);
  if (fd < 0 || write(fd, text, n) != (ssize_t)n) die("write", path);
  close(fd);
}

// out = the place of the absolute ``path`` in the new root
static void inside(char* out, const char* path) {
  if (path[0] != '/' || root_len + strlen(path) >= PATH_MAX) {
    errno = EINVAL;
    die("not an absolute path of a usable length:", path);
  }
  memcpy(out, root, root_len);
  strcpy(out + root_len, path);
}

// mkdir -p of the folder holding ``full`` (below the root; folders that exist, in binds too, are left alone)
static void parents(char* full) {
  for (char* p = full + root_len + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(full, 0755) != 0 && errno != EEXIST) die("mkdir", full);
    *p = '/';
  }
}

// Read-only: mount_setattr (Linux 5.12 and later, recursive), else a remount of that one mount that keeps the
// flags a user namespace may not clear.
static void make_readonly(const char* target, int recursive) {
  struct cudagym_mount_attr attr = {CUDAGYM_ATTR_RDONLY, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, target, recursive ? AT_RECURSIVE : 0, &attr, sizeof attr) == 0) return;
  if (errno != ENOSYS) die("mount_setattr", target);
  struct statvfs st;
  if (statvfs(target, &st) != 0) die("statvfs", target);
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY;
  if (st.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (st.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (st.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (st.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (st.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (st.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (mount(NULL, target, NULL, flags, NULL) != 0) die("remount read-only", target);
}

// Binds ``path`` at the same place in the new root (a folder or an empty file as the mount point).
static void bind(const char* path, int writable) {
  char target[PATH_MAX];
  struct stat st;
  if (stat(path, &st) != 0) die("stat", path);
  inside(target, path);
  parents(target);
  if (S_ISDIR(st.st_mode)) {
    if (mkdir(target, 0755) != 0 && errno != EEXIST) die("mkdir", target);
  } else {
    int fd = open(target, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) die("create", target);
    close(fd);
  }
  if (mount(path, target, NULL, MS_BIND | MS_REC, NULL) != 0) die("bind", path);
  if (!writable) make_readonly(target, 1);
}

static void symlink_at(const char* text, const char* path) {
  char at[PATH_MAX];
  inside(at, path);
  parents(at);
  if (symlink(text, at) != 0 && errno != EEXIST) die("symlink", path);
}

static void mask(const char* path) {
  char at[PATH_MAX];
  inside(at, path);
  if (mount("tmpfs", at, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0755") != 0)
    die("mask", path);
}

// COMMAND runs with no capability, even as root in the namespace: it cannot undo any mount above.
static void drop_capabilities(void) {
  for (int cap = 0; cap < 64; ++cap)
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) die("drop capability", NULL);
#ifdef PR_CAP_AMBIENT
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
#endif
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &header, data) == 0) {
    data[0].inheritable = data[1].inheritable = 0;
    if (syscall(SYS_capset, &header, data) != 0) die("capset", NULL);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) die("no_new_privs", NULL);
}

// The launcher's first process: ends as COMMAND (the first process of the new PID namespace) ended.
static int wait_for(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0)
    if (errno != EINTR) die("waitpid", NULL);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) {
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    signal(WTERMSIG(status), SIG_DFL);
    raise(WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  return FAILED;
}

int main(int argc, char** argv) {
  int command = 0;
  for (int i = 2; i < argc; ++i)
    if (strcmp(argv[i], "--") == 0) {
      command = i + 1;
      break;
    }
  if (argc < 4 || command == 0 || command >= argc) {
    fprintf(stderr, "usage: %s ROOT [-r PATH | -w PATH | -l TEXT PATH | -m PATH | -c DIR]... -- COMMAND...\n",
            argv[0]);
    return FAILED;
  }
  // a user namespace in which the caller keeps its uid and gid, owning every namespace below
  root = argv[1];
  root_len = strlen(root);
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER) != 0) die("unshare", "CLONE_NEWUSER");
  char map[64];
  put("/proc/self/setgroups", "deny");
  snprintf(map, sizeof map, "%u %u 1", (unsigned)uid, (unsigned)uid);
  put("/proc/self/uid_map", map);
  snprintf(map, sizeof map, "%u %u 1", (unsigned)gid, (unsigned)gid);
  put("/proc/self/gid_map", map);
  if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID) != 0)
    die("unshare", "CLONE_NEWNS|CLONE_NEWNET|CLONE_NEWIPC|CLONE_NEWPID");
  fflush(stderr);
  pid_t child = fork();
  if (child < 0) die("fork", NULL);
  if (child > 0) return wait_for(child);
  // the first process of the new PID namespace: build the root, enter it, become COMMAND
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("mount --make-rprivate", "/");
  if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m") != 0) die("mount tmpfs on", root);
  const char* cwd = "/";
  for (int i = 2; i < command - 1; ++i) {
    const char* op = argv[i];
    int left = command - 2 - i;  // arguments after op, before "--"
    if (left >= 1 && strcmp(op, "-r") == 0) {
      bind(argv[++i], 0);
    } else if (left >= 1 && strcmp(op, "-w") == 0) {
      bind(argv[++i], 1);
    } else if (left >= 1 && strcmp(op, "-m") == 0) {
      mask(argv[++i]);
    } else if (left >= 1 && strcmp(op, "-c") == 0) {
      cwd = argv[++i];
    } else if (left >= 2 && strcmp(op, "-l") == 0) {
      symlink_at(argv[i + 1], argv[i + 2]);
      i += 2;
    } else {
      errno = EINVAL;
      die("unknown or incomplete option", op);
    }
  }
  if (chdir(root) != 0) die("chdir", root);
  if (syscall(SYS_pivot_root, ".", ".") != 0) die("pivot_root", root);
  if (umount2(".", MNT_DETACH) != 0) die("umount the old root", NULL);
  if (chdir("/") != 0) die("chdir", "/");
  make_readonly("/", 0);
  if (chdir(cwd) != 0) die("chdir", cwd);
  drop_capabilities();
  execvp(argv[command], argv + command);
  die("exec", argv[command]);
  return FAILED;
}
"""


def launcher_name(cxx: str) -> str:
    """The built launcher's file name: the source's and the compiler's hash, so that a change rebuilds it."""
    digest = hashlib.sha256(f"{SOURCE}\0{os.path.realpath(cxx)}".encode()).hexdigest()[:16]
    return f"cudagym-jail-{digest}"


def build(folder: Path, cxx: str, timeout: float = 120.0) -> Path:
    """Builds the launcher into ``folder`` with ``cxx`` unless it is there already (one builder at a time, under a
    file lock); returns its path. The file appears whole or not at all (built beside it, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / launcher_name(cxx)
    if target.exists():
        return target
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=folder, prefix=".jail-") as tmp:
            source = Path(tmp) / "jail.cpp"
            source.write_text(SOURCE)
            built = Path(tmp) / "jail"
            command = [cxx, "-O2", "-Wall", "-x", "c++", str(source), "-o", str(built)]
            proc = subprocess.run(
                command, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, LC_ALL="C")
            )
            if proc.returncode != 0:
                raise RuntimeError(f"building the compiler sandbox's launcher failed: {proc.stderr[-2000:]}")
            os.replace(built, target)
    return target
