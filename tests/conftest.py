"""For every suite under tests/ (integration, upstream, s3): a test's tmp_path is removed
once the test has passed, and kept when any of its phases failed, for the post-mortem.

pytest keeps the whole tree of each of its last three runs in /tmp/pytest-of-USER: about
5 GB a run here (spool files, stores, logs), times every sanitizer pass. pytest 7.2, which
Debian 12 ships, has no tmp_path_retention_policy (pytest 7.3 does), hence this hook.

Nothing is removed while anything is mounted under the directory (a test that left a mount
behind has failed its teardown anyway): a removal through a live mount would reach into
whatever the mount serves.

(tests/integration/conftest.py, loaded after this file, is the `conftest` its tests import.)
"""

import os
import re
import shutil

import pytest


def mounted_under(path):
    """Mount points at or below path (/proc/self/mountinfo, octal escapes undone)."""
    path = os.path.realpath(path)
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
            if point == path or point.startswith(path + "/"):
                found.append(point)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        item._spoolfs_tmp_failed = True
    if report.when != "teardown" or getattr(item, "_spoolfs_tmp_failed", False):
        return
    tmp = (getattr(item, "funcargs", None) or {}).get("tmp_path")
    if tmp is None or not os.path.isdir(tmp) or mounted_under(tmp):
        return
    shutil.rmtree(tmp, ignore_errors=True)
    # pytest's "<name>current" link to the latest directory of that name, now dangling
    name = re.sub(r"\d+$", "", os.path.basename(tmp)) + "current"
    link = os.path.join(os.path.dirname(tmp), name)
    if os.path.islink(link) and os.readlink(link) == str(tmp):
        os.unlink(link)
