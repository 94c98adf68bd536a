"""The GitHub Action (action.yml, action/finish/action.yml), run as a runner runs it: each
`run:` step under `bash --noprofile --norc -eo pipefail` with the step's env, the inputs
and step outputs put into `${{ }}` expressions, GITHUB_OUTPUT and GITHUB_ENV read back
after each step, one GITHUB_STEP_SUMMARY, RUNNER_TEMP; the actions/cache steps are played
by a stub that copies files in and out of a directory, with immutable keys and restore by
prefix. The spoolfs input stands in for the install (this build, SPOOLFS_BIN). Against the
test upstream, as root and as an ordinary user: a job mounts, reads, finishes (summary,
unmount, the daemon's exit, the record saved), and its next run prefetches that record;
README's five-line example runs as it stands."""

import os
import pwd
import re
import shutil
import subprocess
import tempfile

import pytest
import yaml

from conftest import ROOT, SLOW, SPOOLFS, daemon_env, is_mounted
from helpers import expected, wait_until

MAIN = os.path.join(ROOT, "action.yml")
FINISH = os.path.join(ROOT, "action", "finish", "action.yml")
USER = "nobody"
# What these run is the action's YAML and shell; the daemon under them mounts, reads,
# records and prefetches as test_core.py, test_prefetch.py and test_read_order.py make it
# do under the sanitizers too.
pytestmark = pytest.mark.nosan


class StepFailed(AssertionError):
    pass


class Expr:
    """The part of the workflow expression language the action's files use: contexts,
    'strings', ==, !=, &&, ||, !, ( ) and always()."""

    TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(==|!=|&&|\|\||!|\(|\))|([A-Za-z_][\w.-]*(?:\(\))?))")

    def __init__(self, text, ctx):
        self.tokens, pos = [], 0
        while pos < len(text.rstrip()):
            m = self.TOKEN.match(text, pos)
            assert m and m.end() > pos, "expression not understood: %r" % text
            self.tokens.append(m.group(1) or m.group(2) or m.group(3))
            pos = m.end()
        self.ctx = ctx

    def value(self):
        v = self.disjunction()
        assert not self.tokens, "trailing tokens: %r" % self.tokens
        return v

    def disjunction(self):
        return self.chain("||", self.conjunction)

    def conjunction(self):
        return self.chain("&&", self.comparison)

    def chain(self, op, operand):
        """operand (op operand)*"""
        v = operand()
        while self.tokens[:1] == [op]:
            self.tokens.pop(0)
            rhs = operand()
            v = (v or rhs) if op == "||" else (v and rhs)
        return v

    def comparison(self):
        v = self.unary()
        if self.tokens[:1] in (["=="], ["!="]):
            op = self.tokens.pop(0)
            rhs = self.unary()
            v = (str(v).lower() == str(rhs).lower()) == (op == "==")
        return v

    def unary(self):
        t = self.tokens.pop(0)
        if t == "!":
            return not self.unary()
        if t == "(":
            v = self.disjunction()
            assert self.tokens.pop(0) == ")"
            return v
        if t.startswith("'"):
            return t[1:-1].replace("''", "'")
        if t in ("always()", "success()"):
            return True
        v = self.ctx
        for part in t.split("."):
            v = v.get(part, "") if isinstance(v, dict) else ""
        return v


def interpolate(text, ctx):
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: str(Expr(m.group(1), ctx).value()), str(text))


class StubCache:
    """The cache service: one directory per key; a key is written once."""

    def __init__(self, root):
        self.root = root
        self.order = []
        os.makedirs(root, exist_ok=True)

    def restore(self, path, key, prefixes=()):
        match = key if os.path.isdir(os.path.join(self.root, key)) else None
        for prefix in prefixes:
            newest = [k for k in self.order if k.startswith(prefix)]
            if match is None and newest:
                match = newest[-1]
        if match is None:
            return {"cache-hit": "false"}
        shutil.copytree(os.path.join(self.root, match), path, dirs_exist_ok=True)
        return {"cache-hit": str(match == key).lower(), "cache-matched-key": match}

    def save(self, path, key):
        assert key and os.path.isdir(path), (key, path)
        assert key not in self.order, "cache key saved twice: %s" % key
        shutil.copytree(path, os.path.join(self.root, key))
        self.order.append(key)


class Job:
    """One job on a runner: its RUNNER_TEMP, env (with what GITHUB_ENV added), summary."""

    def __init__(self, tmp, cache, run_id, user=None, extra_env=None, wrap=()):
        self.tmp = tmp
        self.wrap = list(wrap)  # a command each run: step runs under
        self.cache = cache
        self.user = user
        self.temp = os.path.join(tmp, "runner-temp")
        self.files = os.path.join(tmp, "runner-files")
        for d in (self.temp, self.files):
            os.makedirs(d)
            if user:
                os.chown(d, user.pw_uid, user.pw_gid)
        self.summary = os.path.join(self.files, "summary.md")
        self.env = daemon_env()
        self.env.update(RUNNER_TEMP=self.temp, GITHUB_RUN_ID=str(run_id), GITHUB_RUN_ATTEMPT="1",
                        GITHUB_WORKFLOW="ci build", GITHUB_JOB="build", GITHUB_ACTIONS="true",
                        GITHUB_STEP_SUMMARY=self.summary, **(extra_env or {}))
        if user:
            self.env.update(HOME=self.temp, USER=USER, TMPDIR=self.temp)
        # The daemon runs in the background: a sanitizer's report goes to a file.
        self.sanitizer_log = os.path.join(self.temp, "sanitizer")
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS"):
            self.env[var] += ":log_path=" + self.sanitizer_log
        self.posts = []
        self.log = []

    def run_action(self, action_file, inputs):
        """Runs an action's steps; returns its outputs. StepFailed when a step fails."""
        with open(action_file) as f:
            action = yaml.safe_load(f)
        assert action["runs"]["using"] == "composite"
        given = {k: str(v) for k, v in inputs.items()}
        for name in given:
            assert name in action.get("inputs", {}), "no input %s" % name
        ins = {k: str(v.get("default", "")) for k, v in action.get("inputs", {}).items()}
        ins.update(given)
        steps = self.run_steps(action["runs"]["steps"], ins, os.path.dirname(action_file))
        ctx = {"steps": steps}
        return {k: interpolate(v["value"], ctx) for k, v in action.get("outputs", {}).items()}

    def run_steps(self, step_list, inputs, action_path):
        """Runs steps in order (skipping those whose if: is false); returns steps.*."""
        steps = {}
        for step in step_list:
            ctx = {"inputs": inputs, "steps": steps, "env": self.env,
                   "github": {"action_ref": "v1", "action_path": action_path},
                   "runner": {"temp": self.temp}}
            if "if" in step and not Expr(step["if"], ctx).value():
                continue
            outputs = (self.uses(step, ctx) if "uses" in step
                       else self.run(step, ctx, action_path))
            if "id" in step:
                steps[step["id"]] = {"outputs": outputs}
        return steps

    def uses(self, step, ctx):
        out = self.uses_as_root(step, ctx)
        path = interpolate(step.get("with", {}).get("path", ""), ctx)
        # actions/cache runs as the runner's user: what it restores is that user's.
        if self.user and step["uses"].startswith("actions/cache") and os.path.isdir(path):
            for d, _, files in os.walk(path):
                for name in [d] + [os.path.join(d, f) for f in files]:
                    os.chown(name, self.user.pw_uid, self.user.pw_gid)
        return out

    def uses_as_root(self, step, ctx):
        name = step["uses"]
        w = {k: interpolate(v, ctx) for k, v in step.get("with", {}).items()}
        if name == "actions/cache@v4":  # restore now, save in its post step if it missed
            out = self.cache.restore(w["path"], w["key"])
            if out["cache-hit"] != "true":
                self.posts.append(lambda: os.path.isdir(w["path"]) and
                                  self.cache.save(w["path"], w["key"]))
            return out
        if name == "actions/cache/restore@v4":
            prefixes = [p for p in w.get("restore-keys", "").splitlines() if p.strip()]
            return self.cache.restore(w["path"], w["key"], prefixes)
        if name == "actions/cache/save@v4":
            self.cache.save(w["path"], w["key"])
            return {}
        # A workflow's steps naming this repository's actions (OWNER stands for its owner):
        # the spoolfs input stands in for the install.
        if name == "OWNER/spoolfs@v1":
            return self.run_action(MAIN, dict(w, spoolfs=SPOOLFS))
        if name == "OWNER/spoolfs/action/finish@v1":
            return self.run_action(FINISH, w)
        raise AssertionError("the test does not play %s" % name)

    def run(self, step, ctx, action_path):
        # A workflow's run: step without shell: runs under `bash -e` on Linux.
        assert step.get("shell", "bash") == "bash"
        outputs, env_file = (os.path.join(self.files, n) for n in ("output", "env"))
        script = os.path.join(self.files, "step.sh")
        with open(script, "w") as f:
            f.write(interpolate(step["run"], ctx))
        for path in (outputs, env_file):
            open(path, "w").close()
            if self.user:
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
        env = dict(self.env)
        env.update({k: interpolate(v, ctx) for k, v in step.get("env", {}).items()})
        env.update(GITHUB_OUTPUT=outputs, GITHUB_ENV=env_file, GITHUB_ACTION_PATH=action_path)
        cmd = (["bash", "--noprofile", "--norc", "-eo", "pipefail", script] if "shell" in step
               else ["bash", "-e", script])
        if self.user:
            cmd = ["setpriv", "--reuid=%d" % self.user.pw_uid, "--regid=%d" % self.user.pw_gid,
                   "--clear-groups"] + cmd
        proc = subprocess.run(self.wrap + cmd, env=env, cwd=self.temp, capture_output=True,
                              timeout=120 * SLOW)
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        self.log.append("[%s] %s" % (step.get("id", "?"), text))
        if proc.returncode != 0:
            raise StepFailed("step %s failed (%d):\n%s" % (step.get("id"), proc.returncode, text))
        self.env.update(read_commands(env_file))
        return read_commands(outputs)

    def end(self):
        """The job's post steps (actions/cache saving what it built)."""
        for post in self.posts:
            post()

    def summary_text(self):
        if not os.path.exists(self.summary):
            return ""
        with open(self.summary) as f:
            return f.read()


def read_commands(path):
    """NAME=VALUE and NAME<<DELIMITER ... DELIMITER entries, as the runner reads them."""
    with open(path) as f:
        lines = f.read().splitlines()
    out, i = {}, 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            value = []
            while lines[i] != delim:
                value.append(lines[i])
                i += 1
            i += 1
            out[name] = "\n".join(value)
        elif line:
            name, value = line.split("=", 1)
            out[name] = value
    return out


@pytest.fixture
def runner(tmp_path):
    """runner(run_id, user=None) -> a Job; every mount a job left is torn down after the test."""
    jobs = []
    cache = StubCache(str(tmp_path / "cache-service"))

    def make(run_id, user=None, extra_env=None, wrap=()):
        base = tempfile.mkdtemp(prefix="spoolfs-gha-", dir="/tmp") if user else str(
            tmp_path / ("run-%d" % run_id))
        os.makedirs(base, exist_ok=True)
        if user:
            os.chown(base, user.pw_uid, user.pw_gid)
        jobs.append(Job(base, cache, run_id, user, extra_env, wrap))
        return jobs[-1]

    make.cache = cache
    yield make
    reports = []
    for job in jobs:
        mnt = job.env.get("SPOOLFS_ACTION_MOUNT")
        if mnt and is_mounted(mnt):
            subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
        for name in os.listdir(job.temp):
            if name.startswith("sanitizer"):
                with open(os.path.join(job.temp, name)) as f:
                    reports.append(f.read())
        if job.user:
            shutil.rmtree(job.tmp, ignore_errors=True)
    assert not reports, "sanitizer reports:\n" + "\n".join(reports)


def daemon_pids(mnt):
    """The supervisor's and the serving process's PIDs, from the mount's stats."""
    with open(os.path.join(mnt, ".spoolfs", "stats")) as f:
        vals = dict(line.split()[:2] for line in f if line.startswith("spoolfs_") and
                    line.split()[0] in ("spoolfs_supervisor_pid", "spoolfs_serving_pid"))
    return [int(float(v)) for v in vals.values() if float(v) > 0]


def summary_rows(text):
    return dict(re.findall(r"^\| ([^|]+?) \| (.+?) \|$", text, re.M))


def one_job(job, url, read, inputs=None, before_finish=None):
    """A job that mounts url, reads the files in read (checking their bytes), finishes."""
    out = job.run_action(MAIN, dict({"source": url, "spoolfs": SPOOLFS}, **(inputs or {})))
    mnt = out["path"]
    assert is_mounted(mnt), job.log
    for path, want in read:
        with open(os.path.join(mnt, path), "rb") as f:
            assert f.read() == want
    if before_finish:
        before_finish(mnt)
    pids = daemon_pids(mnt)
    assert pids
    job.run_action(FINISH, {})
    assert not is_mounted(mnt), job.log
    # The finish step returned after the daemon exited: its record was written by then.
    for pid in pids:
        assert not os.path.exists("/proc/%d" % pid), "spoolfs %d still running" % pid
    job.end()
    return mnt


def test_a_job_mounts_reports_unmounts_and_its_next_run_prefetches_what_it_read(store, runner):
    store.add("tools/cc.tar", 3 << 20)
    store.add("tools/ld", 5000)
    store.add("docs/unread.txt", 7000)
    url = store.write()
    want = [(p, expected(store, p)) for p in ("tools/cc.tar", "tools/ld")]

    job = runner(1001)
    mnt = one_job(job, url, want)
    assert mnt == os.path.realpath(os.path.join(job.temp, "spoolfs"))
    rows = summary_rows(job.summary_text())
    assert rows["objects"] == "2", job.summary_text()
    assert rows["bytes fetched"].startswith("3.0 MiB in "), rows
    assert rows["cache hits"].startswith("0 (opens of objects already local; 2 started"), rows
    assert re.fullmatch(r"\d+\.\d{3} s over \d+ reads that waited for their bytes",
                        rows["time waited"]), rows
    assert "totals: 2 objects" in job.summary_text()
    # The record went to the cache service under this run's key, in the order read.
    keys = runner.cache.order
    assert len(keys) == 1 and keys[0].startswith("spoolfs-reads-ci_build-build-"), keys
    assert keys[0].endswith("-1001-1")
    with open(os.path.join(runner.cache.root, keys[0], "reads")) as f:
        assert f.read().split() == ["tools/cc.tar", "tools/ld"]

    # The next run restores it by prefix and mounts with it as --prefetch-list: both
    # objects are fetched before anything reads them, and nothing else is.
    store.up.reset()
    job2 = runner(1002)

    def prefetched(mnt):
        for path, _ in want:
            store.up.wait_for(lambda s: s["gets"] >= 1, timeout=20 * SLOW, path=path)
        assert store.up.stats("docs/unread.txt")["gets"] == 0
        wait_until(lambda: "prefetch list: done" in status(mnt), lambda: status(mnt))

    def status(mnt):
        return subprocess.run([SPOOLFS, "status", mnt], capture_output=True).stdout.decode()

    out = job2.run_action(MAIN, {"source": url, "spoolfs": SPOOLFS})
    assert "prefetching the 2 files the last run opened" in "".join(job2.log)
    prefetched(out["path"])
    job2.run_action(FINISH, {})
    assert not is_mounted(out["path"])
    assert "prefetch list: done; 2 entries" in job2.summary_text(), job2.summary_text()
    # Nothing was opened in run 2: no record to save, and run 1's stays the newest.
    assert runner.cache.order == keys


def test_an_ordinary_user_mounts_through_fusermount3(store, runner):
    store.add("a.bin", 100000)
    url = store.write()
    mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o666)  # as Debian's udev rule makes it (containers pass 0600)
    try:
        user = pwd.getpwnam(USER)
        job = runner(7, user=user)
        bin_dir = os.path.join(job.tmp, "bin")  # nobody can reach this build
        os.makedirs(bin_dir)
        shutil.copy(SPOOLFS, bin_dir)
        os.chmod(bin_dir, 0o755)
        out = job.run_action(MAIN, {"source": url, "spoolfs": os.path.join(bin_dir, "spoolfs")})
        # Only its user may look in (no allow_other): the reads are that user's.
        got = subprocess.run(["setpriv", "--reuid=%d" % user.pw_uid, "--regid=%d" % user.pw_gid,
                              "--clear-groups", "sh", "-c", 'stat -c %u "$1" && cat "$1/a.bin"',
                              "sh", out["path"]], capture_output=True, timeout=60 * SLOW)
        assert got.returncode == 0, got.stderr
        uid, data = got.stdout.split(b"\n", 1)
        assert int(uid) == user.pw_uid and data == expected(store, "a.bin")
        job.run_action(FINISH, {})
        assert not is_mounted(out["path"])
        assert summary_rows(job.summary_text())["objects"] == "1"
        assert len(runner.cache.order) == 1
    finally:
        os.chmod("/dev/fuse", mode)


# sudo as a runner has it (NOPASSWD), for a machine without one: a setuid-root program that
# runs its command as root with the environment sudo's env_reset leaves (PATH, and the names
# --preserve-env lists; the sanitizers' options too, for the test's own report files).
FAKE_SUDO = r"""
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static char *env[512];
static int n;
static void keep(const char *name)
{
	const char *v = getenv(name);
	if (v && n < 510 && asprintf(&env[n], "%s=%s", name, v) > 0)
		n++;
}
int main(int argc, char **argv)
{
	int i = 1;
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strncmp(argv[i], "--preserve-env=", 15) == 0) {
			char *list = strdup(argv[i] + 15), *save = NULL;
			for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save))
				keep(t);
		} else if (strcmp(argv[i], "-n") != 0) {
			fprintf(stderr, "fake sudo: %s not played\n", argv[i]);
			return 1;
		}
	}
	keep("PATH");
	keep("ASAN_OPTIONS");
	keep("UBSAN_OPTIONS");
	keep("TSAN_OPTIONS");
	env[n++] = "HOME=/root";
	if (i == argc || setresgid(0, 0, 0) || setgroups(0, NULL) || setresuid(0, 0, 0))
		return 1;
	execvpe(argv[i], argv + i, env);
	perror(argv[i]);
	return 127;
}
"""


@pytest.fixture
def sudo_path(tmp_path):
    """A directory with sudo in it (the real one where there is one), for PATH."""
    d = tempfile.mkdtemp(prefix="spoolfs-sudo-", dir="/tmp")
    os.chmod(d, 0o755)
    real = shutil.which("sudo")
    if real:
        os.symlink(real, os.path.join(d, "sudo"))
    else:
        src = tmp_path / "sudo.c"
        src.write_text(FAKE_SUDO)
        subprocess.run(["cc", "-O", "-o", os.path.join(d, "sudo"), str(src)], check=True)
        os.chmod(os.path.join(d, "sudo"), 0o4755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_an_ordinary_user_who_cannot_mount_mounts_through_sudo(store, runner, sudo_path):
    """/dev/fuse 0600 (as container runtimes pass it): the runner's user mounts through
    sudo, as root with --uid: root's log, metrics and record live in a directory of root's
    (root refuses the user's, util/trusted_path.h), come back for the summary and the
    cache, and the next run's prefetch list reaches root; the daemon has only what spoolfs
    reads of the job's environment."""
    store.add("tools/ld", 5000)
    store.add("docs/unread.txt", 7000)
    url = store.write()
    user = pwd.getpwnam(USER)
    mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o600)
    env = {"PATH": "%s:%s" % (sudo_path, os.environ["PATH"]), "GITHUB_TOKEN": "ghs_secret",
           "ACTIONS_RUNTIME_TOKEN": "runtime_secret", "AWS_REGION": "eu-test-1"}
    try:
        roots = []
        for run_id in (41, 42):
            job = runner(run_id, user=user, extra_env=env)
            bin_dir = os.path.join(job.tmp, "bin")
            os.makedirs(bin_dir)
            shutil.copy(SPOOLFS, bin_dir)
            os.chmod(bin_dir, 0o755)
            out = job.run_action(MAIN, {"source": url,
                                        "spoolfs": os.path.join(bin_dir, "spoolfs")})
            mnt = out["path"]
            assert is_mounted(mnt), job.log
            state = job.env["SPOOLFS_ACTION_DAEMON_STATE"]
            st = os.stat(state)
            assert st.st_uid == 0 and st.st_mode & 0o777 == 0o755, state
            roots.append(state)
            # allow_other: the user reads, the files are the user's.
            got = subprocess.run(["setpriv", "--reuid=%d" % user.pw_uid,
                                  "--regid=%d" % user.pw_gid, "--clear-groups", "sh", "-c",
                                  'stat -c %u "$1/tools/ld" && cat "$1/tools/ld"', "sh", mnt],
                                 capture_output=True, timeout=60 * SLOW)
            assert got.returncode == 0, got.stderr
            uid, data = got.stdout.split(b"\n", 1)
            assert int(uid) == user.pw_uid and data == expected(store, "tools/ld")
            pids = daemon_pids(mnt)
            for pid in pids:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    environ = f.read().split(b"\0")
                assert os.stat("/proc/%d" % pid).st_uid == 0
                assert b"AWS_REGION=eu-test-1" in environ, environ
                assert not [v for v in environ if v.startswith((b"GITHUB_", b"ACTIONS_"))], \
                    environ
            if run_id == 42:
                assert "prefetching the 1 files the last run opened" in "".join(job.log)
                store.up.wait_for(lambda s: s["gets"] >= 1, timeout=20 * SLOW,
                                  path="tools/ld")
            job.run_action(FINISH, {})
            job.end()
            assert not is_mounted(mnt), job.log
            for pid in pids:
                assert not os.path.exists("/proc/%d" % pid), "spoolfs %d still running" % pid
            assert not os.path.exists(state), "root's state directory left behind"
            log = "".join(job.log)
            assert "refused" not in log, log
            rows = summary_rows(job.summary_text())
            assert rows["objects"] == "1", job.summary_text()
            assert "time waited" in rows, job.summary_text()  # the metrics came back
        # Run 41's record went to the cache (the user's copy of root's); run 42 read it.
        assert len(runner.cache.order) == 2, runner.cache.order
        with open(os.path.join(runner.cache.root, runner.cache.order[0], "reads")) as f:
            assert f.read().split() == ["tools/ld"]
        assert roots[0] != roots[1]
    finally:
        os.chmod("/dev/fuse", mode)


def test_an_old_libfuse_is_refused_with_the_reason(store, runner, tmp_path):
    url = store.write()
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "pkg-config").write_text("#!/bin/sh\necho 3.10.5\n")
    (fake / "pkg-config").chmod(0o755)
    job = runner(3, extra_env={"PATH": "%s:%s" % (fake, os.environ["PATH"])})
    with pytest.raises(StepFailed) as e:
        job.run_action(MAIN, {"source": url, "spoolfs": SPOOLFS})
    assert "step prepare failed" in str(e.value)
    assert ("spoolfs needs libfuse 3.14 or newer (its supervisor keeps the mount open through"
            " libfuse's custom-io hook, added in 3.14); this runner has libfuse 3.10.5."
            " Ubuntu 22.04 ships 3.10: use runs-on: ubuntu-24.04.") in str(e.value)


def test_ubuntu_22_04_is_refused_with_the_reason(store, runner, tmp_path):
    """Its /etc/os-release, bound over this machine's in a mount namespace of the steps'
    own (this machine's libfuse is 3.14: only the release tells)."""
    url = store.write()
    release = tmp_path / "os-release"
    release.write_text('NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n')
    job = runner(32, wrap=["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount --bind "$0" /etc/os-release && exec "$@"', str(release)])
    with pytest.raises(StepFailed) as e:
        job.run_action(MAIN, {"source": url})
    assert "step prepare failed" in str(e.value)
    assert ("spoolfs needs libfuse 3.14 or newer (its supervisor keeps the mount open through"
            " libfuse's custom-io hook, added in 3.14); this runner is Ubuntu 22.04, whose"
            " libfuse is older. Ubuntu 22.04 ships 3.10: use runs-on: ubuntu-24.04.") in str(e.value)


def writable_job(job, url, spoolfs, as_user=lambda cmd: cmd):
    """A job with writable: true that writes into the tree, reads a file, and finishes:
    the path written to goes to the overlay's DIR, and the finish step takes both mounts
    down, waits for the daemon and saves the record."""
    out = job.run_action(MAIN, {"source": url, "spoolfs": spoolfs, "writable": "true"})
    mnt = out["path"]
    got = subprocess.run(as_user(["sh", "-c", 'cat "$1/a.bin" && echo built >"$1/out.o" && '
                                  'cat "$1/out.o"', "sh", mnt]),
                         capture_output=True, timeout=60 * SLOW)
    assert got.returncode == 0, (got.stderr, job.log)
    assert got.stdout.endswith(b"built\n")
    with open(os.path.join(job.temp, "spoolfs-writable", "upper", "out.o")) as f:
        assert f.read() == "built\n"
    status = subprocess.run(as_user([spoolfs, "status", mnt]), capture_output=True).stdout
    pids = [int(p) for p in re.findall(rb"(?:serving|supervisor) PID (\d+)", status)]
    assert len(pids) == 2, status
    job.run_action(FINISH, {})
    assert not is_mounted(mnt), job.log
    # The finish step returned after the daemon exited: its record was written by then.
    for pid in pids:
        assert not os.path.exists("/proc/%d" % pid), "spoolfs %d still running" % pid
    with open("/proc/self/mountinfo") as f:
        assert "fuse.spoolfs" not in "".join(line for line in f if job.temp in line)
    assert summary_rows(job.summary_text())["objects"] == "1", job.summary_text()
    return got.stdout[:-len(b"built\n")]


def test_writable_puts_an_overlay_on_the_mount(store, runner):
    store.add("a.bin", 5000)
    url = store.write()
    job = runner(4)
    assert writable_job(job, url, SPOOLFS) == expected(store, "a.bin")
    assert len(runner.cache.order) == 1  # the record, written as the daemon exited
    with open(os.path.join(runner.cache.root, runner.cache.order[0], "reads")) as f:
        assert f.read().split() == ["a.bin"]


def test_writable_as_an_ordinary_user_through_fuse_overlayfs(store, runner):
    """fuse-overlayfs shows no /.spoolfs: the finish step finds the daemon through status."""
    store.add("a.bin", 5000)
    url = store.write()
    mode = os.stat("/dev/fuse").st_mode & 0o777
    os.chmod("/dev/fuse", 0o666)
    try:
        user = pwd.getpwnam(USER)
        job = runner(8, user=user)
        bin_dir = os.path.join(job.tmp, "bin")
        os.makedirs(bin_dir)
        shutil.copy(SPOOLFS, bin_dir)
        os.chmod(bin_dir, 0o755)
        as_user = (lambda cmd: ["setpriv", "--reuid=%d" % user.pw_uid,
                                "--regid=%d" % user.pw_gid, "--clear-groups"] + cmd)
        assert writable_job(job, url, os.path.join(bin_dir, "spoolfs"), as_user) == \
            expected(store, "a.bin")
        assert len(runner.cache.order) == 1
    finally:
        os.chmod("/dev/fuse", mode)


def test_a_bad_source_fails_the_mount_step_and_finish_still_runs(upstream, runner):
    job = runner(5)
    with pytest.raises(StepFailed) as e:
        job.run_action(MAIN, {"source": upstream.url("missing.json"), "spoolfs": SPOOLFS})
    assert "step mount failed" in str(e.value)
    assert "404" in str(e.value)  # the daemon's own line says why
    job.run_action(FINISH, {})  # if: always()
    assert "nothing was mounted" in job.log[-1]
    assert job.summary_text() == ""
    assert runner.cache.order == []


def readme_workflow():
    """The steps of README's GitHub Actions example."""
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"```yaml\n(- uses: OWNER/spoolfs@v1\n.*?)```", text, re.S)
    assert block, "README has no GitHub Actions example"
    return yaml.safe_load(block.group(1))


def test_the_readme_example_mounts_a_store(store, runner, tmp_path):
    """README's steps as they stand, with the test upstream's manifest as the source and a
    make that copies a file from the store it is given."""
    store.add("tools/ld", 5000)
    url = store.write()
    steps = readme_workflow()
    assert len(steps) == 3 and steps[0]["with"]["source"].startswith("https://")
    steps[0]["with"]["source"] = url
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "make").write_text('#!/bin/sh\nfor a; do case $a in STORE=*) '
                               'cp "${a#STORE=}/tools/ld" "$RUNNER_TEMP/built";; esac; done\n')
    (fake / "make").chmod(0o755)
    job = runner(11, extra_env={"PATH": "%s:%s" % (fake, os.environ["PATH"])})
    done = job.run_steps(steps, {}, ROOT)
    with open(os.path.join(job.temp, "built"), "rb") as f:
        assert f.read() == expected(store, "tools/ld")
    assert done["store"]["outputs"]["path"] == os.path.realpath(os.path.join(job.temp, "spoolfs"))
    assert not is_mounted(done["store"]["outputs"]["path"])
    assert summary_rows(job.summary_text())["objects"] == "1"
    assert len(runner.cache.order) == 1


def test_the_example_workflow_gives_only_inputs_the_action_has():
    with open(os.path.join(ROOT, "mount-helpers", "github-actions.yml")) as f:
        workflow = yaml.safe_load(f)
    with open(MAIN) as f:
        inputs = yaml.safe_load(f)["inputs"]
    steps = workflow["jobs"]["build"]["steps"]
    mount = [s for s in steps if s.get("uses") == "OWNER/spoolfs@v1"]
    assert len(mount) == 1 and set(mount[0]["with"]) <= set(inputs)
    finish = [s for s in steps if s.get("uses") == "OWNER/spoolfs/action/finish@v1"]
    assert len(finish) == 1 and finish[0]["if"] == "always()"
    assert steps[-1] is finish[0]


@pytest.mark.slow  # builds spoolfs (Release) from the sources: a minute or more
def test_the_first_run_builds_spoolfs_and_the_next_restores_the_build(store, runner):
    """The install step as a workflow runs it (no spoolfs input): the first run builds from
    the action's sources with this machine's libraries (all installed: apt is not asked)
    and the build is saved at the job's end under a key of the commit and the OS; the next
    run restores it and builds nothing."""
    store.add("a.bin", 5000)
    url = store.write()
    keys = []
    for run_id in (21, 22):
        job = runner(run_id)
        out = job.run_action(MAIN, {"source": url})
        with open(os.path.join(out["path"], "a.bin"), "rb") as f:
            assert f.read() == expected(store, "a.bin")
        job.run_action(FINISH, {})
        job.end()
        assert not is_mounted(out["path"])
        log = "".join(job.log)
        assert ("building from %s" % ROOT in log) == (run_id == 21), log
        assert "installing" not in log, log
        keys.append([k for k in runner.cache.order if k.startswith("spoolfs-build-")])
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    assert len(keys[0]) == 1 and keys[1] == keys[0], keys
    assert keys[0][0].startswith("spoolfs-build-%s-" % commit) and keys[0][0].endswith(
        "-" + os.uname().machine), keys


def test_inputs_that_cannot_work_are_refused_clearly(store, runner):
    url = store.write()
    job = runner(31)
    cases = [({"source": ""}, "prepare", "the source input is empty"),
             ({"path": "full"}, "mount", "path: %s/full is not empty; give an empty directory"
              % os.path.realpath(job.temp))]
    os.makedirs(os.path.join(job.temp, "full"))
    open(os.path.join(job.temp, "full", "x"), "w").close()
    for inputs, step, says in cases:
        with pytest.raises(StepFailed) as e:
            job.run_action(MAIN, dict({"source": url, "spoolfs": SPOOLFS}, **inputs))
        assert "step %s failed" % step in str(e.value) and says in str(e.value), str(e.value)
    assert "SPOOLFS_ACTION_MOUNT" not in job.env
    # A second mount in one job: the finish step would leave the first one up.
    first = job.run_action(MAIN, {"source": url, "spoolfs": SPOOLFS})["path"]
    with pytest.raises(StepFailed) as e:
        job.run_action(MAIN, {"source": url, "spoolfs": SPOOLFS, "path": "second"})
    assert "one mount per job" in str(e.value)
    job.run_action(FINISH, {})
    assert not is_mounted(first)
