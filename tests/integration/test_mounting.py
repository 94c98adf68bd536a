"""Mounting the usual ways: `mount -t fuse.spoolfs` (fuse3's mount.fuse3), `mount -t spoolfs`
(mount-helpers/mount.spoolfs), an fstab line, and every long option as `-o name=value`.

Each mount(8)-style mount must return only once the filesystem is ready (a read right after
it succeeds), leave the daemon in the background, and `umount`/`fusermount3 -u` must leave
no spoolfs process behind. Every test unmounts and kills what it started, even on failure.

How the binary is found matters here. mount(8) clears PATH (and HOME, SHELL, ...) before it
runs a helper, and mount.fuse3 runs `/bin/sh -c "spoolfs SOURCE DIR -o OPTS"`, so for
`-t fuse.spoolfs` the binary must be in dash's built-in PATH. The `on_std_path` fixture makes
`spoolfs` there resolve to $SPOOLFS_BIN for the test (a symlink in /usr/local/bin, removed
afterwards, under a lock; a spoolfs installed there is used when its bytes are those of
$SPOOLFS_BIN, and the test is skipped when it is another one).
`-t spoolfs` would need /sbin/mount.spoolfs: instead of installing into /sbin, the tests call
the helper exactly as mount(8) does (same argv shape, same stripped environment; checked
against util-linux 2.38 with strace), and test_real_mount_t_spoolfs runs the real thing when
/sbin/mount.spoolfs is installed and is this helper. (`mount -i` would not help: it skips
helpers altogether.)
"""

import errno
import fcntl
import filecmp
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest

from conftest import ROOT, SLOW, SPOOLFS, Mount, daemon_env, is_mounted, read_file
from helpers import refused_mount, wait_until
from rawfuse import RawFuse

MiB = 1 << 20
HELPER = os.path.join(ROOT, "mount-helpers", "mount.spoolfs")
# dash's PATH when none is set: where mount.fuse3's shell looks for `spoolfs`.
STD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What util-linux's mount(8) removes from the environment before running a helper.
MOUNT_STRIPPED = ("PATH", "HOME", "SHELL", "IFS", "ENV", "BASH_ENV", "KRB_CONF", "LIBPATH",
                  "MAIL", "NLSPATH", "SHLIB_PATH")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount(8) tests need root")


# ------------------------------------------------------------------------------- helpers

def spoolfs_pids(mountpoint):
    """Live (not zombie) spoolfs daemons serving `mountpoint`."""
    mountpoint = os.path.realpath(str(mountpoint))
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z" or not argv or "spoolfs" not in os.path.basename(argv[0]):
            continue
        if "status" in argv[1:2]:
            continue
        if any(os.path.realpath(a) == mountpoint for a in argv[1:] if a.startswith("/")):
            pids.append(int(d))
    return pids


def parent_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0


def force_cleanup(mountpoint):
    """Whatever happened: no mount and no daemon left on `mountpoint`."""
    mountpoint = str(mountpoint)
    if is_mounted(mountpoint):
        subprocess.run(["fusermount3", "-u", "-z", mountpoint], stderr=subprocess.DEVNULL)
        if is_mounted(mountpoint):
            subprocess.run(["umount", "-l", mountpoint], stderr=subprocess.DEVNULL)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = spoolfs_pids(mountpoint)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while spoolfs_pids(mountpoint) and time.monotonic() < deadline:
            time.sleep(0.05)


def assert_ready_and_backgrounded(mnt, store, path):
    """Right after mount(8) returned: mounted, readable at once, daemon in the background."""
    assert is_mounted(mnt), "mount returned but %s is not mounted" % mnt
    assert read_file(os.path.join(str(mnt), path)) == store.content(path)
    # The supervisor and its serving process (doc/survive.md): one daemon, the one whose
    # parent is not a spoolfs process of this mount.
    found = spoolfs_pids(mnt)
    pids = [p for p in found if parent_of(p) not in found]
    assert len(pids) == 1 and len(found) == 2, \
        "expected one supervisor and one serving process for %s, found %r" % (mnt, found)
    with open("/proc/%d/stat" % pids[0]) as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    assert ppid != os.getpid(), "the daemon is still a child of the test"
    return pids[0]


def assert_unmounts_cleanly(mnt, cmd):
    subprocess.run(cmd + [str(mnt)], check=True, timeout=30 * SLOW)
    assert not is_mounted(mnt)
    wait_until(lambda: not spoolfs_pids(mnt), "the daemon never exited after unmount", 15)


def fstype_and_opts(mnt):
    path = os.path.realpath(str(mnt))
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                sep = fields.index("-")
                return fields[sep + 1], fields[5].split(","), fields[sep + 3].split(",")
    raise AssertionError("%s not mounted" % mnt)


@pytest.fixture
def mnt(tmp_path):
    d = tmp_path / "mnt"
    d.mkdir()
    yield d
    force_cleanup(d)


@pytest.fixture
def on_std_path():
    """`spoolfs` in dash's default PATH resolves to $SPOOLFS_BIN for the test's duration."""
    want = os.path.realpath(SPOOLFS)
    os.makedirs("/run/lock", exist_ok=True)
    lock = open("/run/lock/spoolfs-tests-std-path.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one test run at a time owns the symlink
    link = "/usr/local/bin/spoolfs"
    created = False
    try:
        found = next((os.path.join(d, "spoolfs") for d in STD_PATH.split(":")
                      if os.path.exists(os.path.join(d, "spoolfs"))), None)
        if found is None:
            os.makedirs("/usr/local/bin", exist_ok=True)
            os.symlink(want, link)
            created = True
        elif not filecmp.cmp(found, want, shallow=False):
            # By content: `cmake --install build` puts a byte-identical copy there, which
            # runs exactly what $SPOOLFS_BIN would.
            pytest.skip("%s is another spoolfs (%s): mount.fuse3 would run that one, not "
                        "$SPOOLFS_BIN" % (found, os.path.realpath(found)))
        yield
    finally:
        if created and os.path.islink(link) and os.readlink(link) == want:
            os.unlink(link)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def mount_env(extra=None):
    """The environment a mount helper gets from mount(8)."""
    env = daemon_env()
    for var in MOUNT_STRIPPED:
        env.pop(var, None)
    for var in list(env):
        if var.startswith("LD_"):
            env.pop(var)
    env.update(extra or {})
    return env


def run_mount(cmd, env=None, timeout=60):
    """mount(8) and helpers return once the fs is ready: no polling for the mount here."""
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout * SLOW,
                          env=env if env is not None else daemon_env(), stdin=subprocess.DEVNULL)


# ------------------------------------------------------------ mount -t fuse.spoolfs

def test_mount_t_fuse_spoolfs(store, mnt, tmp_path, on_std_path):
    store.add("tools/a.bin", 3 * MiB)
    store.add("b.txt", 1000)
    url = store.write()
    cache = tmp_path / "cache"
    # mount(8)/mount.fuse3-only options are dropped on the way; spoolfs options pass as -o.
    opts = ("ro,_netdev,nofail,noauto,x-systemd.automount,comment=ci,allow_other,"
            "cache_dir=%s,keep_cache,stall_timeout=7,retries=3,max_transfers=2,log_level=warn"
            % cache)
    r = run_mount(["mount", "-t", "fuse.spoolfs", url, str(mnt), "-o", opts])
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "tools/a.bin")
    fstype, vfs_opts, super_opts = fstype_and_opts(mnt)
    assert fstype == "fuse.spoolfs"
    assert "ro" in vfs_opts and "allow_other" in super_opts
    assert (cache / "index.db").exists(), "cache_dir= was not used"
    assert read_file(mnt / "b.txt") == store.content("b.txt")
    assert store.up.stats("tools/a.bin")["gets"] == 1
    assert_unmounts_cleanly(mnt, ["umount"])
    assert (cache / "index.db").exists(), "keep_cache must keep the cache dir's index"


def test_mount_t_fuse_spoolfs_fusermount_unmount(store, mnt, on_std_path):
    store.add("a.bin", MiB)
    r = run_mount(["mount", "-t", "fuse.spoolfs", store.write(), str(mnt)])
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "a.bin")
    assert_unmounts_cleanly(mnt, ["fusermount3", "-u"])


def test_mount_t_fuse_spoolfs_failure_leaves_nothing(upstream, mnt, on_std_path):
    r = run_mount(["mount", "-t", "fuse.spoolfs", upstream.url("missing.json"), str(mnt),
                   "-o", "ro,_netdev"])
    assert r.returncode != 0
    assert "missing.json" in r.stderr, r.stderr
    assert not is_mounted(mnt)
    assert not spoolfs_pids(mnt)


@pytest.mark.nosan
def test_mount_t_fuse_spoolfs_bad_option_value_fails(store, mnt, on_std_path):
    store.add("a.bin", 100)
    r = run_mount(["mount", "-t", "fuse.spoolfs", store.write(), str(mnt),
                   "-o", "log_level=loud"])
    assert r.returncode != 0
    assert "unknown log level" in r.stderr, r.stderr
    assert not is_mounted(mnt) and not spoolfs_pids(mnt)


# ------------------------------------------------------------------ an fstab line

@pytest.mark.nosan
def test_fstab_line(store, mnt, tmp_path, on_std_path):
    store.add("data/x.bin", 2 * MiB)
    url = store.write()
    cache = tmp_path / "fstab-cache"
    fstab = tmp_path / "fstab"
    # The README's line, plus what fstab lines often carry. The real /etc/fstab is untouched.
    fstab.write_text("# test fstab\n%s %s fuse.spoolfs ro,_netdev,allow_other,cache_dir=%s,"
                     "noauto,nofail,x-systemd.mount-timeout=150 0 0\n" % (url, mnt, cache))
    r = run_mount(["mount", "--fstab", str(fstab), str(mnt)])
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "data/x.bin")
    assert fstype_and_opts(mnt)[0] == "fuse.spoolfs"
    assert (cache / "index.db").exists()
    assert_unmounts_cleanly(mnt, ["umount"])


# ---------------------------------------------------- mount -t spoolfs (mount.spoolfs)

@pytest.fixture
def helper_dir(tmp_path):
    """mount.spoolfs installed in a directory with `spoolfs` next to it."""
    d = tmp_path / "sbin"
    d.mkdir()
    shutil.copy2(HELPER, d / "mount.spoolfs")
    os.symlink(os.path.realpath(SPOOLFS), d / "spoolfs")
    return d


def test_mount_t_spoolfs_helper_next_to_binary(store, mnt, tmp_path, helper_dir):
    store.add("a.bin", 3 * MiB)
    cache = tmp_path / "hcache"
    # As mount(8) runs /sbin/mount.spoolfs: "SOURCE DIR -o OPTS", PATH and HOME removed, and
    # "rw" added when no ro/rw is given; fstab options such as relatime reach the helper too.
    opts = ("rw,relatime,nosuid,nodev,_netdev,nofail,noauto,user,defaults,x-systemd.automount,"
            "comment=ci,allow_other,cache_dir=%s,log_level=error,retries=2" % cache)
    r = run_mount([str(helper_dir / "mount.spoolfs"), store.write(), str(mnt), "-o", opts],
                  env=mount_env())
    assert r.returncode == 0, r.stderr
    pid = assert_ready_and_backgrounded(mnt, store, "a.bin")
    assert os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(SPOOLFS)
    fstype, vfs_opts, super_opts = fstype_and_opts(mnt)
    assert fstype == "fuse.spoolfs" and "ro" in vfs_opts and "allow_other" in super_opts
    assert (cache / "index.db").exists()
    assert_unmounts_cleanly(mnt, ["umount"])


@pytest.mark.nosan
def test_mount_t_spoolfs_helper_with_spoolfs_bin(store, mnt, tmp_path):
    store.add("a.bin", MiB)
    d = tmp_path / "alone"
    d.mkdir()
    shutil.copy2(HELPER, d / "mount.spoolfs")
    r = run_mount([str(d / "mount.spoolfs"), store.write(), str(mnt), "-v", "-o",
                   "rw,_netdev,stall_timeout=9"], env=mount_env({"SPOOLFS_BIN": SPOOLFS}))
    assert r.returncode == 0, r.stderr
    assert "dropping mount(8)-only option '_netdev'" in r.stderr
    assert_ready_and_backgrounded(mnt, store, "a.bin")
    assert_unmounts_cleanly(mnt, ["fusermount3", "-u"])


@pytest.mark.nosan
def test_mount_t_spoolfs_helper_fake_mounts_nothing(store, mnt, helper_dir):
    store.add("a.bin", 100)
    r = run_mount([str(helper_dir / "mount.spoolfs"), store.write(), str(mnt), "-fv",
                   "-o", "_netdev,allow_other"], env=mount_env())
    assert r.returncode == 0, r.stderr
    assert "-o allow_other" in r.stderr, r.stderr
    assert not is_mounted(mnt) and not spoolfs_pids(mnt)
    assert store.up.stats()["total_gets"] == 0


@pytest.mark.nosan
def test_mount_t_spoolfs_helper_verbose_hides_passwords_with_commas(mnt, helper_dir):
    """A ',' is legal in a password: -v output (CI logs) must not stop masking at it."""
    r = run_mount([str(helper_dir / "mount.spoolfs"), "http://alice:pa,SECRET1@127.0.0.1:1/m",
                   str(mnt), "-fv", "-o", "proxy=bob:s\\,SECRET2@127.0.0.1:1,allow_other"],
                  env=mount_env())
    assert r.returncode == 0, r.stderr
    assert "SECRET" not in r.stderr, r.stderr
    assert "://***@127.0.0.1:1/m" in r.stderr and "allow_other" in r.stderr, r.stderr


@pytest.mark.nosan
def test_mount_t_spoolfs_helper_reports_failure(upstream, mnt, helper_dir):
    r = run_mount([str(helper_dir / "mount.spoolfs"), upstream.url("nope.json"), str(mnt),
                   "-o", "rw"], env=mount_env())
    assert r.returncode != 0
    assert "nope.json" in r.stderr
    assert not is_mounted(mnt) and not spoolfs_pids(mnt)


def test_real_mount_t_spoolfs(store, mnt):
    installed = "/sbin/mount.spoolfs"
    if not os.path.exists(installed) or not filecmp.cmp(installed, HELPER, shallow=False):
        pytest.skip("/sbin/mount.spoolfs is not this helper (install it to run this test)")
    store.add("a.bin", MiB)
    r = run_mount(["mount", "-t", "spoolfs", store.write(), str(mnt), "-o", "_netdev"],
                  env=daemon_env() | {"SPOOLFS_BIN": SPOOLFS})
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "a.bin")
    assert_unmounts_cleanly(mnt, ["umount"])


# ------------------------------------------------- every long option as -o name=value

def test_o_cache_dir(store, mount, tmp_path):
    store.add("a.bin", MiB)
    cache = tmp_path / "c"
    m = mount(store.write(), "-o", "cache_dir=%s" % cache)
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    assert (cache / "index.db").exists()
    assert os.listdir(cache / "spool"), "no spool file in the -o cache_dir"


@pytest.mark.nosan
def test_o_cache_dir_twice_last_wins(store, mount, tmp_path):
    store.add("a.bin", 100)
    first, second = tmp_path / "first", tmp_path / "second"
    m = mount(store.write(), "-o", "cache_dir=%s,cache_dir=%s" % (first, second))
    assert read_file(m.p("a.bin")) == store.content("a.bin")
    assert (second / "index.db").exists() and not first.exists()


@pytest.mark.nosan
@pytest.mark.parametrize("level,info_shown", [("info", True), ("warn", False),
                                              ("error", False), ("debug", True)])
def test_o_log_level(store, mount, level, info_shown):
    store.add("a.bin", 100)
    m = mount(store.write(), "-o", "log_level=" + level)
    read_file(m.p("a.bin"))
    assert ("spoolfs: info: mounted on" in m.stderr()) == info_shown, m.stderr()
    if level == "debug":
        assert "spoolfs: debug:" in m.stderr()


def test_o_retries(store, mount):
    path = store.add("down.bin", MiB)
    m = mount(store.write(), "-o", "retries=2")
    store.up.fault(path, fail_status=503, fail_count=10)
    with pytest.raises(OSError) as e:
        read_file(m.p(path))
    assert e.value.errno == errno.EIO
    assert store.up.stats(path)["statuses"] == [503, 503]  # exactly retries=2 tries
    store.up.clear(path)


def test_o_stall_timeout(store, mount):
    path = store.add("stall.bin", 3 * MiB)
    m = mount(store.write(), "-o", "stall_timeout=1")
    store.up.fault(path, stall_at=MiB)
    t0 = time.monotonic()
    assert read_file(m.p(path)) == store.content(path)
    took = time.monotonic() - t0
    assert store.up.stats(path)["gets"] == 2
    assert took < 10 * SLOW, "stall_timeout=1 not used (took %.1fs; default is 30)" % took


def test_o_max_transfers(store, mount):
    paths = [store.add("g%d.bin" % i, MiB) for i in range(3)]
    m = mount(store.write(), "-o", "max_transfers=1")
    for p in paths:
        store.up.fault(p, gate=True)
    results = {}

    def reader(p):
        try:
            results[p] = read_file(m.p(p)) == store.content(p)
        except OSError as e:
            results[p] = e

    threads = [threading.Thread(target=reader, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    try:
        # Each file held at the gate until the test lets it through, one at a time: the
        # upstream's most requests at its gates at once is the daemon's transfers at once.
        let_through = set()
        while len(let_through) < len(paths):
            wait_until(lambda: [p for p in paths if store.up.stats(p)["gated"]],
                       lambda: store.up.stats())
            for p in paths:
                if store.up.stats(p)["gated"]:
                    store.up.release(p)
                    let_through.add(p)
        peak = store.up.stats()["peak_gated"]
        assert peak == 1, "max_transfers=1 but %d transfers were running" % peak
    finally:
        for p in paths:
            store.up.clear(p)
            store.up.release(p)
        for t in threads:
            t.join(30 * SLOW)
    assert all(results.get(p) is True for p in paths), results


@pytest.mark.nosan
@pytest.mark.parametrize("opt", [
    "ca_file=/etc/ssl/certs/ca-certificates.crt",
    "proxy=",
    "endpoint=http://127.0.0.1:9",
    "region=eu-west-1",
    "profile=nobody",
    "path_style",
    "no_sign",
    # fstab's own, given straight to spoolfs (mount(8) drops them itself)
    "x-systemd.automount",
    "x-systemd.requires=network-online.target",
])
def test_o_other_long_options_are_accepted(store, mount, opt):
    """Options whose effect other tests cover (proxy: test_proxy.py; S3 options: tests/s3)
    or that do nothing for an http manifest: they must be taken as spoolfs options, not
    handed to the kernel, where they would fail the mount."""
    store.add("a.bin", 1000)
    m = mount(store.write(), "-o", opt)
    assert read_file(m.p("a.bin")) == store.content("a.bin")


@pytest.mark.nosan
def test_o_unknown_option_fails_the_mount(store, tmp_path):
    store.add("a.bin", 100)
    with pytest.raises(RuntimeError, match="unknown option"):
        Mount(store.write(), tmp_path / "m", tmp_path / "m.log", ["-o", "no_such_option=1"])
    assert not is_mounted(tmp_path / "m")


@pytest.mark.nosan
@pytest.mark.parametrize("before, says", [
    (["--cache-dirr", "/x"], "spoolfs: unknown option '--cache-dirr' (did you mean --cache-dir?)"),
    (["--retry=3"], "spoolfs: unknown option '--retry' (did you mean --retries?)"),
    (["--proxyy=http://ci:hunter2@127.0.0.1:9"],
     "spoolfs: unknown option '--proxyy' (did you mean --proxy?)"),
    (["--bogus"], "spoolfs: unknown option '--bogus' (see --help)"),
])
def test_an_unknown_long_option_is_named_with_the_closest_known(store, tmp_path, before, says):
    """A mistyped long option is the one blamed, not the mountpoint after it ("unexpected
    argument 'MNT'": fuse_opt took "--cache-dirr" for --cache-dir with the value "r") nor
    libfuse ("fuse: unknown option(s)"); its value, which may be a secret, is not shown."""
    store.add("a.bin", 100)
    mnt = tmp_path / "m"
    mnt.mkdir()
    res = subprocess.run([SPOOLFS] + before + ["-f", store.write(), str(mnt)], env=daemon_env(),
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=20 * SLOW)
    assert res.returncode == 2 and not is_mounted(mnt), res
    assert res.stderr.decode().strip() == says
    assert store.up.stats()["total_gets"] == 0  # refused before anything was fetched


@pytest.mark.nosan
def test_long_options_take_their_value_after_an_equals_sign(store, mount, tmp_path):
    """`--opt=value` must mean what `--opt value` means. fuse_opt also matched the
    separate-argument template against it, so every such option got "=value": --retries=3
    was refused as '=3', --cache-dir=DIR named a directory "=DIR", --mirror=URL was kept
    twice."""
    a = store.add("a.bin", 1000)
    cache = tmp_path / "cache"
    url = store.write()
    base = url.rsplit("/", 1)[0] + "/"
    m = mount(url, "--cache-dir=%s" % cache, "--stall-timeout=7", "--retries=3",
              "--max-transfers=2", "--log-level=info", "--cache-max-size=1G",
              "--mirror=%s" % base)
    assert read_file(m.p(a)) == store.content(a)
    assert (cache / "index.db").exists()
    assert "'=" not in m.stderr(), m.stderr()

    proc = subprocess.run([SPOOLFS, "--retries=0", url, str(tmp_path / "unused")],
                          env=daemon_env(), capture_output=True, timeout=30 * SLOW)
    err = proc.stderr.decode()
    assert proc.returncode == 2 and "not '0'" in err, err


@pytest.mark.nosan
@pytest.mark.parametrize("args, says", [
    # A fresh session directory is kept where no later mount would look: refused, not
    # quietly dropped.
    (["--keep-cache"], "--keep-cache keeps --cache-dir"),
    (["-o", "keep_cache"], "--keep-cache keeps --cache-dir"),
])
def test_options_that_cannot_mean_what_they_say_are_refused(store, tmp_path, args, says):
    store.add("a.bin", 100)
    err = refused_mount(store.write(), tmp_path / "mnt", *args)
    assert says in err, err


@pytest.mark.nosan
def test_a_missing_ca_file_is_refused_before_any_download(store, tmp_path):
    """A --ca-file that is not there failed only https downloads, once they started."""
    store.add("a.bin", 100)
    err = refused_mount(store.write(), tmp_path / "mnt", "--ca-file", "/nonexistent/ca.pem")
    assert "--ca-file /nonexistent/ca.pem: No such file or directory" in err, err


@pytest.mark.nosan
def test_options_for_the_other_kind_of_source_are_named(store, mount):
    store.add("a.bin", 100)
    m = mount(store.write(), "--endpoint", "http://127.0.0.1:9", "--region", "eu-west-1")
    assert "are for s3:// sources; ignored" in m.stderr(), m.stderr()
    assert read_file(m.p("a.bin")) == store.content("a.bin")


def test_a_manifest_url_of_another_scheme_is_refused_at_once(tmp_path):
    """curl refuses ftp:// with the code it also gives a garbled HTTP answer, which the
    manifest's fetch retried with backoff: 6 tries and about a minute, for a typo."""
    err = refused_mount("ftp://user:secret@127.0.0.1:9/m.json", tmp_path / "mnt")
    assert "unsupported scheme" in err, err
    assert "secret" not in err and "retry" not in err.lower(), err


# ------------------------------------------------------------- mount flags and stacking

def mounts_at(path):
    # Not the path itself: a stat of a hung FUSE mount there never returns.
    path = os.path.join(os.path.realpath(os.path.dirname(str(path))), os.path.basename(str(path)))
    with open("/proc/self/mountinfo") as f:
        return sum(1 for line in f if line.split()[4] == path)


def test_mount_t_fuse_spoolfs_is_nosuid_nodev(store, mnt, on_std_path):
    """mount.fuse3 passes "dev,suid" for root: a store must never bring a set-user-ID
    binary or a device node."""
    store.add("a.bin", 1000)
    r = run_mount(["mount", "-t", "fuse.spoolfs", store.write(), str(mnt), "-o", "rw"])
    assert r.returncode == 0, r.stderr
    assert_ready_and_backgrounded(mnt, store, "a.bin")
    fstype, vfs_opts, _ = fstype_and_opts(mnt)
    assert fstype == "fuse.spoolfs"
    for want in ("ro", "nosuid", "nodev"):
        assert want in vfs_opts, vfs_opts
    assert_unmounts_cleanly(mnt, ["umount"])


def test_dev_and_suid_asked_for_are_dropped_and_said(store, mount):
    store.add("a.bin", 1000)
    m = mount(store.write(), "-o", "dev,suid")
    _, vfs_opts, _ = fstype_and_opts(m.path)
    assert "nosuid" in vfs_opts and "nodev" in vfs_opts, vfs_opts
    m.check_clean_exit()
    assert "ignored dev and suid: a spoolfs mount is always nosuid,nodev" in m.stderr()


def test_a_second_mount_on_a_live_one_is_refused(store, mount, tmp_path):
    store.add("a.bin", 1000)
    url = store.write()
    m = mount(url)
    proc = subprocess.Popen([SPOOLFS, "-f", url, m.path], env=daemon_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # Refused: it exits. Stacked (the bug): a second mount shows up instead.
        wait_until(lambda: proc.poll() is not None or mounts_at(m.path) > 1,
                   "the second spoolfs never exited")
        stacked = mounts_at(m.path) > 1
    finally:
        if proc.poll() is None:
            subprocess.run(["fusermount3", "-u", m.path], capture_output=True)
            proc.wait(10 * SLOW)
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.stdout.close()
    assert not stacked, "a second mount was stacked on a live one"
    assert proc.returncode != 0
    assert "is already a live fuse.spoolfs mount" in err and "fusermount3 -u" in err, err
    assert read_file(os.path.join(m.path, "a.bin")) == store.content("a.bin")


def test_a_dead_mount_is_cleared_and_mounted_over(store, tmp_path):
    """A cancelled CI job leaves its mount behind with no daemon: the next job's mount on
    the same directory must not fail for it."""
    store.add("a.bin", 1000)
    url = store.write()
    path = str(tmp_path / "mnt")
    dead = Mount(url, path, tmp_path / "dead.log")
    dead.kill_daemons()
    log_path = tmp_path / "mnt.log"
    proc = None
    try:
        with pytest.raises(OSError) as e:
            read_file(os.path.join(path, "a.bin"))
        # ENOTCONN once the device is closed; ECONNABORTED when the connection was aborted
        # (the supervisor aborts it as it ends).
        assert e.value.errno in (errno.ENOTCONN, errno.ECONNABORTED)
        # Not conftest's Mount: it would take the dead mount for the new one, and
        # os.makedirs fails on a directory that answers ENOTCONN.
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([SPOOLFS, "-f", url, path], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, env=daemon_env())
        wait_until(lambda: b"mounted on" in log_path.read_bytes() or proc.poll() is not None,
                   "the new mount never came")
        text = log_path.read_text()
        assert proc.poll() is None, text
        assert mounts_at(path) == 1
        assert read_file(os.path.join(path, "a.bin")) == store.content("a.bin")
        subprocess.run(["fusermount3", "-u", path], check=True)
        assert proc.wait(30 * SLOW) == 0, log_path.read_text()
        assert "held a dead fuse.spoolfs mount (its daemon is gone): lazily unmounted it" \
            in text, text
    finally:
        if proc is not None and proc.poll() is None:
            subprocess.run(["fusermount3", "-u", "-z", path], capture_output=True)
            proc.kill()
            proc.wait()
        dead.kill()  # a lazy unmount of what is left, if anything


def start_on(mountpoint, *args, timeout=30, env=None):
    """spoolfs -f on mountpoint with an unreachable manifest: it exits once past its
    mountpoint checks (the fetch fails). Its (returncode, stderr)."""
    r = subprocess.run([SPOOLFS, "-f", "--retries", "1", "http://127.0.0.1:1/m.json",
                        str(mountpoint)] + list(args), stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout * SLOW,
                       env=env or daemon_env())
    return r.returncode, r.stderr


def test_a_dead_mount_of_another_user_is_left_alone(tmp_path):
    """root must not detach what another user's FUSE daemon mounted: it says how to."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    other = RawFuse(mnt, user_id=65534, allow_other=True)
    try:
        other.kill()
        with pytest.raises(OSError) as e:
            os.listdir(mnt)
        assert e.value.errno == errno.ENOTCONN  # dead, as a cancelled job leaves it
        rc, err = start_on(mnt)
        assert rc != 0
        assert "dead fuse.rawfuse mount (its daemon is gone) of another user" in err, err
        assert "fusermount3 -u -z %s" % mnt in err, err
        assert mounts_at(mnt) == 1  # still there
    finally:
        other.close()


def test_a_hung_fuse_mount_is_refused_not_waited_for(tmp_path):
    """A FUSE daemon that never answers must not hang spoolfs's start-up."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    hung = RawFuse(mnt)  # its INIT is never answered: every request waits
    # LeakSanitizer's exit-time check ptrace-stops every thread, and waits forever for the
    # one left in the FUSE wait (killable, not stoppable); exit itself kills it.
    env = daemon_env()
    env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":detect_leaks=0"
    try:
        rc, err = start_on(mnt, env=env)
        assert rc != 0
        assert "%s is a fuse.rawfuse mount that does not answer" % mnt in err, err
        assert mounts_at(mnt) == 1
    finally:
        hung.close()


def test_a_fuse_mount_hidden_under_another_is_not_the_mountpoints(tmp_path):
    """The table names a path a hidden mount is at too (a tmpfs mounted over a directory
    above it): the directory spoolfs would mount on is not that mount."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    hidden = RawFuse(tmp_path / "a" / "b")
    try:
        hidden.kill()
        subprocess.run(["mount", "-t", "tmpfs", "over", str(tmp_path / "a")], check=True)
        (tmp_path / "a" / "b").mkdir()
        _, err = start_on(tmp_path / "a" / "b")
        assert "cannot fetch manifest" in err, err  # past the mountpoint's checks
        assert "fuse.rawfuse" not in err, err
        with open("/proc/self/mountinfo") as f:
            assert " - fuse.rawfuse " in f.read()  # still there, under the tmpfs
    finally:
        subprocess.run(["umount", "-l", str(tmp_path / "a")], capture_output=True)
        hidden.close()


def test_the_mount_checked_dead_is_the_one_unmounted(tmp_path):
    """A FUSE daemon holds its statfs answer while a directory above the mountpoint is
    swapped for a symlink elsewhere, then says ENOTCONN: the lazy unmount must hit the
    mount that answered, not what the path names by then (a tmpfs here)."""
    ws, vroot = tmp_path / "ws", tmp_path / "vroot"
    (ws / "mnt").mkdir(parents=True)
    (vroot / "mnt").mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "victim", str(vroot / "mnt")], check=True)
    (vroot / "mnt" / "kept").write_text("x")
    evil = RawFuse(ws / "mnt")
    proc = None
    try:
        evil.serve()
        proc = subprocess.Popen([SPOOLFS, "-f", "--retries", "1", "http://127.0.0.1:1/m.json",
                                 str(ws / "mnt")], stdin=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, env=daemon_env())
        assert evil.statfs_held.wait(20 * SLOW), "spoolfs never asked the mount's statfs"
        os.rename(ws, tmp_path / "ws2")
        os.symlink(vroot, ws)
        evil.statfs_release.set()
        _, err = proc.communicate(timeout=30 * SLOW)
        assert (vroot / "mnt" / "kept").exists(), err  # the tmpfs is still mounted
        assert mounts_at(vroot / "mnt") == 1, err
        assert mounts_at(tmp_path / "ws2" / "mnt") == 0, err  # the one that said dead
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        evil.close(tmp_path / "ws2" / "mnt")
        subprocess.run(["umount", "-l", str(vroot / "mnt")], capture_output=True)


def test_a_tmpfs_mountpoint_is_mounted_on(store, mount, tmp_path):
    """Only a FUSE mount there is refused: another filesystem's directory is a directory."""
    store.add("a.bin", 1000)
    d = tmp_path / "mnt"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmp", str(d)], check=True)
    try:
        m = mount(store.write())
        # Mount's wait saw the tmpfs: wait for ours on top of it.
        wait_until(lambda: mounts_at(d) == 2 or m.proc.poll() is not None, "no mount came")
        assert read_file(m.p("a.bin")) == store.content("a.bin")
        assert m.unmount() == 0, m.stderr()
        assert mounts_at(d) == 1  # the tmpfs alone
    finally:
        subprocess.run(["umount", "-l", str(d)], capture_output=True)
