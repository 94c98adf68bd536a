"""--writable DIR (doc/writable.md): the mountpoint is an overlay whose writes go to DIR, the
kernel's overlayfs as root and fuse-overlayfs as an ordinary user (nobody here), over the
spoolfs mount moved to the run directory. Every test runs as both. Builds write into the
tree (an in-tree CMake build, Python's bytecode), a file modified is copied up whole and
one deleted leaves a whiteout while spoolfs beneath still has it, the overlay's unmount
takes both mounts down (and the record of --record-reads is written), and `spoolfs
status` and `reload` given the overlay's path find the spoolfs mount beneath, which
survives a kill of its serving process with the overlay working on."""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile

import pytest

from conftest import SANITIZER_MARKS, SLOW, SPOOLFS, daemon_env, is_mounted
from helpers import publish_tree, wait_until

SOURCES = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.13)\nproject(hello C)\n"
                      "add_executable(hello hello.c)\n",
    "hello.c": '#include <stdio.h>\nint main(void) { puts("hello from the mount"); return 0; }\n',
    "pkg/__init__.py": "from pkg.mod import VALUE\n",
    "pkg/mod.py": "VALUE = 42\n",
    "data.txt": "the original\n" * 1000,
    "gone.txt": "deleted in the view\n",
}


def as_user(user, cmd):
    if user == "root":
        return cmd
    pw = pwd.getpwnam(user)
    return ["setpriv", "--reuid=%d" % pw.pw_uid, "--regid=%d" % pw.pw_gid,
            "--clear-groups"] + cmd


def lower_mounts(base):
    """The spoolfs mounts under base's run directories (the overlay's lower)."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4].startswith(base + "/") and fields[4].endswith("/lower"):
                found.append(fields[4])
    return found


def mount_type(path):
    with open("/proc/self/mountinfo") as f:
        types = [line.split(" - ")[1].split()[0] for line in f if line.split()[4] == path]
    return types[-1] if types else None


class Writable:
    """A --writable mount run in the foreground as `user`, in a directory of its own
    under /tmp (pytest's is root's, 0700): mnt, rw (DIR), tmp (TMPDIR: the run
    directory), the log. stop() takes both mounts down whatever happened."""

    def __init__(self, user, url, *args, rw=None, env=None):
        self.user, self.url = user, url
        self.base = tempfile.mkdtemp(prefix="spoolfs-writable-", dir="/tmp")
        pw = pwd.getpwnam(user)
        os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.mnt, self.rw, self.tmp = (os.path.join(self.base, n) for n in ("mnt", "rw", "tmp"))
        self.log_path = os.path.join(self.base, "spoolfs.log")
        self.env = daemon_env()
        self.env.update(TMPDIR=self.tmp, HOME=self.base)
        self.env.update(env or {})
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.proc = None
        self.log = open(self.log_path, "wb")
        try:
            self.run(["mkdir", self.mnt, self.rw, self.tmp])
            self.rw = rw or self.rw
            self.proc = subprocess.Popen(
                as_user(user, [SPOOLFS, "-f", url, self.mnt, "--writable", self.rw] +
                        [a.format(base=self.base) for a in args]),
                env=self.env, stdin=subprocess.DEVNULL, stdout=self.log,
                stderr=subprocess.STDOUT)
            wait_until(lambda: is_mounted(self.mnt) or self.proc.poll() is not None,
                       lambda: "the overlay:\n" + self.stderr(), timeout=30 * SLOW)
            assert self.proc.poll() is None, self.stderr()
        except BaseException:
            self.stop()
            raise

    def run(self, cmd, cwd=None, check=True, timeout=120):
        if cwd:  # changed into by the user: root may not enter a user's FUSE mount
            cmd = ["sh", "-c", 'cd "$0" && exec "$@"', cwd] + cmd
        r = subprocess.run(as_user(self.user, cmd), env=self.env, capture_output=True,
                           timeout=timeout * SLOW)
        if check:
            assert r.returncode == 0, (cmd, r.stdout, r.stderr,
                                       self.stderr() if self.proc else "")
        return r

    def lower(self):
        found = lower_mounts(self.tmp)
        assert len(found) == 1, found
        return found[0]

    def stderr(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def unmount_overlay(self):
        """The user's unmount of the mountpoint they named."""
        self.run(["umount", self.mnt] if self.user == "root" else ["fusermount3", "-u", self.mnt])

    def check_clean_exit(self):
        rc = self.proc.wait(30 * SLOW)
        text = self.stderr()
        for mark in SANITIZER_MARKS:
            assert mark not in text, text
        assert rc == 0, text
        assert not is_mounted(self.mnt) and lower_mounts(self.tmp) == [], text

    def stop(self):
        """Both layers down, the overlay first, even after a failure."""
        while is_mounted(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        for lower in lower_mounts(self.tmp):
            subprocess.run(["umount", "-l", lower], capture_output=True)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc is None or self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(5 * SLOW)
            except subprocess.TimeoutExpired:
                pass
        self.log.close()
        shutil.rmtree(self.base, ignore_errors=True)



@pytest.fixture
def tree(upstream, tmp_path):
    """SOURCES published on the test upstream: the manifest's URL."""
    src = tmp_path / "src"
    for rel, text in SOURCES.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    publish_tree(src, upstream.root)
    return upstream.url("manifest.json")


@pytest.fixture(params=["root", "nobody"])
def writable(request, tree, fuse_device_for_users):
    """writable(*args) -> Writable, as root and as nobody; stopped at teardown."""
    made = []

    def make(*args, env=None):
        w = Writable(request.param, tree, *args, env=env)
        made.append(w)
        return w

    yield make
    for w in made:
        w.stop()


def test_a_cmake_project_on_the_mount_builds_in_tree(writable):
    w = writable()
    assert mount_type(w.mnt) == ("overlay" if w.user == "root" else "fuse.fuse-overlayfs")
    w.run(["cmake", "-S", ".", "-B", "build"], cwd=w.mnt)
    w.run(["cmake", "--build", "build"], cwd=w.mnt)
    r = w.run([os.path.join(w.mnt, "build", "hello")])
    assert r.stdout == b"hello from the mount\n"
    # The build went to DIR, spoolfs beneath has none of it.
    assert os.path.isfile(os.path.join(w.rw, "upper", "build", "hello"))
    assert w.run(["ls", w.lower()]).stdout.split() == [b"CMakeLists.txt", b"data.txt",
                                                       b"gone.txt", b"hello.c", b"pkg"]
    w.unmount_overlay()
    w.check_clean_exit()


def test_a_python_package_writes_its_bytecode_into_dir(writable):
    w = writable()
    r = w.run(["python3", "-c", "import sys, pkg; print(pkg.VALUE, sys.dont_write_bytecode)"],
              cwd=w.mnt)
    assert r.stdout == b"42 False\n"
    written = glob.glob(os.path.join(w.rw, "upper", "pkg", "__pycache__", "*.pyc"))
    assert sorted(os.path.basename(p).split(".")[0] for p in written) == ["__init__", "mod"]
    assert b"__pycache__" in w.run(["ls", os.path.join(w.mnt, "pkg")]).stdout
    assert w.run(["ls", os.path.join(w.lower(), "pkg")]).stdout.split() == [b"__init__.py",
                                                                            b"mod.py"]
    w.unmount_overlay()
    w.check_clean_exit()


def test_a_file_modified_is_copied_up_whole_and_one_deleted_stays_beneath(writable):
    w = writable()
    data, gone = os.path.join(w.mnt, "data.txt"), os.path.join(w.mnt, "gone.txt")
    w.run(["sh", "-c", 'echo appended >>"$1"', "sh", data])
    w.run(["rm", gone])
    whole = SOURCES["data.txt"] + "appended\n"
    assert w.run(["cat", data]).stdout.decode() == whole
    with open(os.path.join(w.rw, "upper", "data.txt")) as f:
        assert f.read() == whole  # copied up whole, then appended to
    # With the mode spoolfs shows under --writable: the owner's write bit added (0644).
    assert os.stat(os.path.join(w.rw, "upper", "data.txt")).st_mode & 0o7777 == 0o644
    assert w.run(["stat", "-c", "%a", os.path.join(w.lower(), "hello.c")]).stdout == b"644\n"
    assert w.run(["ls", w.mnt]).stdout.split() == [b"CMakeLists.txt", b"data.txt", b"hello.c",
                                                   b"pkg"]
    assert w.run(["test", "-e", gone], check=False).returncode == 1
    # A whiteout in DIR (a 0:0 device, or fuse-overlayfs' .wh. file where it cannot make one).
    upper = os.listdir(os.path.join(w.rw, "upper"))
    assert "gone.txt" in upper or ".wh.gone.txt" in upper, upper
    lower = w.lower()
    assert w.run(["cat", os.path.join(lower, "gone.txt")]).stdout.decode() == \
        SOURCES["gone.txt"]
    assert w.run(["cat", os.path.join(lower, "data.txt")]).stdout.decode() == SOURCES["data.txt"]
    w.unmount_overlay()
    w.check_clean_exit()
    # DIR outlives the mount: the next mount with it shows the same changes.
    w2 = Writable(w.user, w.url, rw=w.rw)
    try:
        assert w2.run(["cat", os.path.join(w2.mnt, "data.txt")]).stdout.decode() == whole
        assert w2.run(["test", "-e", os.path.join(w2.mnt, "gone.txt")],
                      check=False).returncode == 1
        w2.unmount_overlay()
        w2.check_clean_exit()
    finally:
        w2.stop()


def test_the_overlays_unmount_takes_both_down_and_writes_the_record(writable):
    w = writable("--record-reads", "{base}/reads.txt", "--metrics-file", "{base}/m.prom")
    w.run(["cat", os.path.join(w.mnt, "hello.c")])
    w.run(["cat", os.path.join(w.mnt, "pkg", "mod.py")])
    assert lower_mounts(w.tmp)
    w.unmount_overlay()
    w.check_clean_exit()
    assert "the overlay on %s was unmounted" % w.mnt in w.stderr()
    with open(os.path.join(w.base, "m.prom")) as f:  # the path users know, not the lower
        assert 'mount="%s"' % w.mnt in f.read()
    with open(os.path.join(w.base, "reads.txt")) as f:
        record = f.read().split()
    if w.user == "root":
        assert record == ["hello.c", "pkg/mod.py"]
    else:  # fuse-overlayfs opens what it looks up (doc/writable.md)
        assert "hello.c" in record and "pkg/mod.py" in record, record


def test_status_and_reload_by_the_overlays_path_and_a_kill_keeps_it_working(writable):
    w = writable()
    r = w.run([SPOOLFS, "status", w.mnt])
    assert b"processes: serving PID" in r.stdout, r.stdout
    r = w.run([SPOOLFS, "reload", w.mnt])
    assert b"replaced by" in r.stdout, (r.stdout, r.stderr)
    assert w.run(["cat", os.path.join(w.mnt, "hello.c")]).stdout.decode() == SOURCES["hello.c"]
    # The supervisor holds the FUSE connection: the overlay over it survives a crash.
    serving = [int(c) for c in open("/proc/%d/task/%d/children" % (w.proc.pid, w.proc.pid))
               .read().split()]
    if w.user != "root":  # proc is setpriv's exec: the supervisor itself
        assert serving
    os.kill(serving[0], signal.SIGKILL)
    assert w.run(["cat", os.path.join(w.mnt, "pkg", "mod.py")]).stdout.decode() == \
        SOURCES["pkg/mod.py"]
    wait_until(lambda: b"1 restarts" in w.run([SPOOLFS, "status", w.mnt]).stdout,
               "the restart counted")
    w.unmount_overlay()
    w.check_clean_exit()


def test_root_with_uid_mounts_an_overlay_that_user_writes_into(tree, fuse_device_for_users):
    """The action's sudo route: root mounts with --uid USER and allow_other, DIR is
    root's; DIR/upper is made USER's, so that USER can create files at the top."""
    user = pwd.getpwnam("nobody")
    w = Writable("root", tree, "--uid", "nobody", "--gid", str(user.pw_gid), "-o", "allow_other")
    try:
        os.chmod(w.base, 0o755)  # for nobody to reach the mountpoint
        w.user = "nobody"  # what follows runs as the user the files show as
        w.run(["sh", "-c", 'echo built >"$1/top.o" && mkdir "$1/build" && echo x >>"$1/hello.c"',
               "sh", w.mnt])
        st = os.stat(os.path.join(w.rw, "upper"))
        assert (st.st_uid, st.st_gid) == (user.pw_uid, user.pw_gid)
        assert os.stat(os.path.join(w.rw, "upper", "top.o")).st_uid == user.pw_uid
        assert os.stat(w.rw).st_uid == 0 and os.stat(os.path.join(w.rw, "work")).st_uid == 0
        w.user = "root"
        w.unmount_overlay()
        w.check_clean_exit()
    finally:
        w.stop()


def test_a_crash_loop_that_ends_the_mount_takes_the_overlay_down_too(writable):
    """The supervisor ends the mount itself (every serving process after the first dies at
    start: doc/survive.md's crash loop): no overlay is left over a dead mount."""
    w = writable(env={"SPOOLFS_TEST_SERVE_EXIT": "1"})
    assert w.run(["cat", os.path.join(w.mnt, "hello.c")]).stdout.decode() == SOURCES["hello.c"]
    record = os.path.join(os.path.dirname(w.lower()), "overlay")
    wait_until(lambda: os.path.exists(record) and not open(record).read().startswith("0\n"),
               "the overlay's mount ID recorded")
    serving = [int(c) for c in open("/proc/%d/task/%d/children" % (w.proc.pid, w.proc.pid))
               .read().split()]
    os.kill(serving[0], signal.SIGKILL)
    assert w.proc.wait(60 * SLOW) == 1, w.stderr()
    assert "unmounted the overlay on %s" % w.mnt in w.stderr()
    assert not is_mounted(w.mnt) and lower_mounts(w.tmp) == [], w.stderr()


def test_the_fstab_form_o_writable(tree, tmp_path):
    """mount(8) and fstab pass options as -o name=value (mount.spoolfs)."""
    mnt, rw = tmp_path / "mnt", tmp_path / "rw"
    mnt.mkdir()
    rw.mkdir()
    with open(tmp_path / "log", "wb") as log:
        proc = subprocess.Popen([SPOOLFS, "-f", tree, str(mnt), "-o", "ro,writable=%s" % rw],
                                stdout=log, stderr=subprocess.STDOUT, env=daemon_env())
    try:
        wait_until(lambda: is_mounted(str(mnt)) or proc.poll() is not None, "the overlay")
        assert mount_type(str(mnt)) == "overlay", (tmp_path / "log").read_text()
        (mnt / "new.txt").write_text("new\n")
        assert (rw / "upper" / "new.txt").read_text() == "new\n"
        subprocess.run(["umount", str(mnt)], check=True)
        assert proc.wait(30 * SLOW) == 0, (tmp_path / "log").read_text()
    finally:
        while is_mounted(str(mnt)):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(10 * SLOW)


@pytest.fixture
def refused_upper(tmp_path):
    """DIR (tmp_path/layers/m/rw) on an overlayfs, which the kernel refuses as an upper
    (a container's /tmp); tmp_path/mnt and tmp_path/run made. Whatever is mounted on
    mnt or under run is taken down at teardown, then the overlay."""
    layers = tmp_path / "layers"
    for d in ("l", "u", "w", "m"):
        (layers / d).mkdir(parents=True)
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", "lowerdir=%s,upperdir=%s,workdir=%s"
                    % (layers / "l", layers / "u", layers / "w"), str(layers / "m")], check=True)
    mnt, run = tmp_path / "mnt", tmp_path / "run"
    try:
        for d in (mnt, run, layers / "m" / "rw"):
            d.mkdir()
        yield layers / "m" / "rw"
    finally:
        while is_mounted(str(mnt)):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        for lower in lower_mounts(str(run)):
            subprocess.run(["umount", "-l", lower], capture_output=True)
        subprocess.run(["umount", "-l", str(layers / "m")], capture_output=True)


def test_an_overlay_that_cannot_be_mounted_fails_the_command_and_leaves_nothing(tree, tmp_path, refused_upper):
    """DIR on an overlayfs (a container's /tmp): the kernel refuses it as an upper, and with
    no fuse-overlayfs on PATH either, spoolfs (daemonised, as mount(8) runs it) exits 1
    with both reasons, and neither mount stays."""
    mnt, run, rw = tmp_path / "mnt", tmp_path / "run", refused_upper
    env = dict(daemon_env(), PATH="/nonexistent", TMPDIR=str(run))
    r = subprocess.run([SPOOLFS, tree, str(mnt), "--writable", str(rw)], env=env,
                       capture_output=True, timeout=60 * SLOW)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "overlayfs: Invalid argument (see the kernel's log); trying fuse-overlayfs" in err
    assert "cannot mount the overlay on %s" % mnt in err, err
    assert "fuse-overlayfs is not installed" in err, err
    assert not is_mounted(str(mnt))
    wait_until(lambda: lower_mounts(str(run)) == [], "the spoolfs mount taken down")


def test_a_directory_others_may_write_or_inside_the_mountpoint_is_refused(tree, tmp_path):
    """Bad input: refused before anything is mounted, with the reason."""
    mnt, bad = tmp_path / "mnt", tmp_path / "shared"
    mnt.mkdir()
    bad.mkdir()
    bad.chmod(0o777)
    for rw, says in ((bad, "refused: %s is writable by group or others" % bad),
                     (mnt / "rw", "must not hold one another")):
        if rw == mnt / "rw":
            rw.mkdir()
        r = subprocess.run([SPOOLFS, "-f", tree, str(mnt), "--writable", str(rw)],
                           capture_output=True, env=daemon_env(), timeout=30 * SLOW)
        assert r.returncode == 2 and says in r.stderr.decode(), r.stderr
        assert not is_mounted(str(mnt))


def test_a_mountpoint_swapped_for_a_symlink_during_start_up_gets_no_overlay(
        upstream, tree, fuse_device_for_users):
    """Review 3 #2: root mounts for nobody (--uid), whose directory holds the mountpoint.
    While the manifest loads (held at the upstream's gate), nobody swaps the mountpoint for
    a symlink to a directory of root's: the overlay lands neither there nor anywhere else,
    and the start fails saying why."""
    user = pwd.getpwnam("nobody")
    base = tempfile.mkdtemp(prefix="spoolfs-writable-", dir="/tmp")
    home, rw, run = (os.path.join(base, n) for n in ("home", "rw", "run"))
    mnt = os.path.join(home, "mnt")
    target = tempfile.mkdtemp(prefix="spoolfs-victim-", dir="/tmp")  # root's: /etc/cron.d
    for d in (home, mnt, rw, run):
        os.mkdir(d)
    for d in (home, mnt):  # nobody's home, and the mountpoint in it
        os.chown(d, user.pw_uid, user.pw_gid)
    log_path = os.path.join(base, "log")
    upstream.fault("manifest.json", gate=True)
    log = open(log_path, "wb")
    proc = subprocess.Popen([SPOOLFS, "-f", tree, mnt, "--writable", rw, "--uid", "nobody"],
                            env=dict(daemon_env(), TMPDIR=run), stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT)

    def text():
        with open(log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    try:
        wait_until(lambda: upstream.stats("manifest.json")["gated"] == 1 or
                   proc.poll() is not None, text, timeout=30 * SLOW)
        os.rename(mnt, mnt + ".was")
        os.symlink(target, mnt)
        upstream.release("manifest.json")
        wait_until(lambda: "was replaced during start-up" in text() or is_mounted(target),
                   text, timeout=30 * SLOW)
        assert not is_mounted(target) and not is_mounted(mnt + ".was"), text()
        assert "the mountpoint %s was replaced during start-up" % mnt in text(), text()
        proc.wait(30 * SLOW)
        assert not is_mounted(target) and lower_mounts(run) == [], text()
    finally:
        for path in (target, mnt + ".was"):
            while is_mounted(path):
                subprocess.run(["umount", "-l", path], capture_output=True)
        for lower in lower_mounts(run):
            subprocess.run(["umount", "-l", lower], capture_output=True)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)


def test_a_second_mount_with_the_same_dir_is_refused(writable):
    """Review 3 #5: two overlays on one upper corrupt it; the kernel refuses the second
    (EBUSY), fuse-overlayfs would not: DIR/.spoolfs.lock, held for the mount's life by the
    supervisor, refuses it first, as root and as a user."""
    w = writable()
    # After a serving process's restart too: the supervisor holds the lock, not the first.
    serving = [int(c) for c in open("/proc/%d/task/%d/children" % (w.proc.pid, w.proc.pid))
               .read().split()]
    os.kill(serving[0], signal.SIGKILL)
    wait_until(lambda: b"1 restarts" in w.run([SPOOLFS, "status", w.mnt]).stdout,
               "the restart counted")
    other = os.path.join(w.base, "mnt2")
    w.run(["mkdir", other])
    try:
        r = w.run([SPOOLFS, w.url, other, "--writable", w.rw], check=False, timeout=60)
        assert r.returncode != 0, r.stderr
        assert b"--writable %s: DIR is in use by another mount" % w.rw.encode() in r.stderr, \
            r.stderr
        assert not is_mounted(other)
    finally:  # without the lock, a second overlay (and its spoolfs mount) came up
        while is_mounted(other):
            subprocess.run(["umount", "-l", other], capture_output=True)
    assert w.run(["cat", os.path.join(w.mnt, "hello.c")]).stdout.decode() == SOURCES["hello.c"]
    w.unmount_overlay()
    w.check_clean_exit()


def test_a_sigkilled_supervisors_overlay_is_cleared_by_the_next_start(writable):
    """Review 3 #6: a SIGKILL of the supervisor and its serving process at once (the OOM
    killer or a runner's cleanup killing the job's cgroup) ends the FUSE connection and
    leaves the overlay over a dead lower (doc/writable.md). The next mount with the same
    TMPDIR finds the run directory no process holds, unmounts its overlay then its lower
    and removes it; that mount may use the same DIR."""
    w = writable()
    lower = w.lower()
    serving = [int(c) for c in open("/proc/%d/task/%d/children" % (w.proc.pid, w.proc.pid))
               .read().split()]
    w.proc.kill()
    for pid in serving:
        os.kill(pid, signal.SIGKILL)
    w.proc.wait(30 * SLOW)
    wait_until(lambda: w.run(["ls", w.mnt], check=False).returncode != 0, "the dead overlay")
    assert is_mounted(w.mnt) and lower_mounts(w.tmp) == [lower]
    w2 = Writable(w.user, w.url, rw=w.rw, env={"TMPDIR": w.tmp})
    try:
        assert not is_mounted(w.mnt), w2.stderr()
        assert lower not in lower_mounts(w.tmp) and not os.path.exists(os.path.dirname(lower))
        assert "unmounted the overlay on %s" % w.mnt in w2.stderr()
        assert "unmounted %s, a dead mount's" % lower in w2.stderr()
        assert w2.run(["cat", os.path.join(w2.mnt, "hello.c")]).stdout.decode() == \
            SOURCES["hello.c"]
        w2.unmount_overlay()
        w2.check_clean_exit()
    finally:
        w2.stop()


def test_root_falls_back_to_fuse_overlayfs_on_the_held_mountpoint(tree, tmp_path, refused_upper):
    """DIR on an overlayfs: the kernel refuses it (EINVAL), and root's fuse-overlayfs mounts
    on the mountpoint held since start-up (/proc/self/fd/N, kept open across its exec)."""
    mnt, run, rw = tmp_path / "mnt", tmp_path / "run", refused_upper
    r = subprocess.run([SPOOLFS, tree, str(mnt), "--writable", str(rw)],
                       env=dict(daemon_env(), TMPDIR=str(run)), capture_output=True,
                       timeout=60 * SLOW)
    assert r.returncode == 0, r.stderr
    assert "trying fuse-overlayfs" in r.stderr.decode(), r.stderr
    assert mount_type(str(mnt)) == "fuse.fuse-overlayfs"
    assert (mnt / "hello.c").read_text() == SOURCES["hello.c"]
    (mnt / "new.txt").write_text("new\n")
    assert (rw / "upper" / "new.txt").read_text() == "new\n"
    subprocess.run(["umount", str(mnt)], check=True)
    wait_until(lambda: lower_mounts(str(run)) == [], "the spoolfs mount taken down")


def test_a_mountpoint_of_another_user_or_in_a_directory_others_may_change_is_refused(
        tree, tmp_path):
    """Bad input (review 3 #2): root mounts the overlay on a user's behalf only on a
    directory of its own (or --uid's), whose directory no one else can change."""
    nobody = pwd.getpwnam("nobody").pw_uid
    theirs, shared, rw = tmp_path / "theirs", tmp_path / "shared", tmp_path / "rw"
    for d in (theirs, shared, shared / "mnt", rw):
        d.mkdir()
    os.chown(theirs, nobody, -1)
    shared.chmod(0o777)
    run = tmp_path / "run"
    run.mkdir()
    env = dict(daemon_env(), TMPDIR=str(run))
    try:
        for mnt, says in ((theirs, "the mountpoint %s is uid %d's" % (theirs, nobody)),
                          (shared / "mnt", "the mountpoint's directory %s can be changed by"
                           " another user" % shared)):
            r = subprocess.run([SPOOLFS, tree, str(mnt), "--writable", str(rw)],
                               capture_output=True, env=env, timeout=30 * SLOW)
            assert r.returncode != 0 and says in r.stderr.decode(), r.stderr
            assert not is_mounted(str(mnt))
        # The same directory of nobody's is the mountpoint when root mounts for nobody.
        r = subprocess.run([SPOOLFS, tree, str(theirs), "--writable", str(rw), "--uid",
                            "nobody"], capture_output=True, env=env, timeout=30 * SLOW)
        assert r.returncode == 0 and is_mounted(str(theirs)), r.stderr
        subprocess.run(["umount", str(theirs)], check=True)
        wait_until(lambda: lower_mounts(str(run)) == [], "the spoolfs mount taken down")
    finally:
        for mnt in (theirs, shared / "mnt"):
            while is_mounted(str(mnt)):
                subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        for lower in lower_mounts(str(run)):
            subprocess.run(["umount", "-l", lower], capture_output=True)
