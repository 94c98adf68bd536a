"""The user's three descriptions of the options agree: `spoolfs --help`, the man page
(doc/spoolfs.1) and README's option table. No mount: these read text only."""
import os
import re
import subprocess

import pytest

from conftest import ROOT, SPOOLFS

pytestmark = pytest.mark.nosan  # text against text: nothing for a sanitizer to see


def help_text():
    proc = subprocess.run([SPOOLFS, "--help"], capture_output=True, timeout=30)
    assert proc.returncode == 0
    return proc.stdout.decode()


def help_options(text):
    """The options --help describes: the first word of each option line."""
    return {m.group(1) for m in re.finditer(r"^ {2}(-[-a-zA-Z]+)", text, re.M)}


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def test_every_help_option_is_in_the_man_page():
    with open(os.path.join(ROOT, "doc", "spoolfs.1"), encoding="utf-8") as f:
        man = f.read().replace("\\-", "-")
    missing = sorted(o for o in help_options(help_text()) if o not in man)
    assert not missing, "in --help but not in doc/spoolfs.1: %s" % missing


def test_every_readme_option_is_in_help():
    rows = [line for line in readme().splitlines() if line.startswith("| `-")]
    assert rows, "README has no option table"
    named = set()
    for row in rows:
        named.update(re.findall(r"`(--?[a-zA-Z][-a-zA-Z]*)", row.split("|")[1]))
    unknown = sorted(named - help_options(help_text()))
    assert not unknown, "README's option table names options --help lacks: %s" % unknown


def test_debug_flag_says_the_same_everywhere():
    # -d once read "every FUSE request" in --help and "every transfer" in README.
    what = "log every FUSE request and every upstream object request"
    flat = " ".join(help_text().split())
    assert what in flat
    row = next(line for line in readme().splitlines() if line.startswith("| `-d`"))
    assert what in row
