"""AWS config and credentials files from the attacker's side (fetch/s3/s3_creds.c).

The daemon runs as root and reads the profile files the environment names. One `nobody`
wrote, one group or others may write, or one in a directory nobody owns, could make root
run their credential_process or sign with their keys: each is refused with a message saying
why, as ssh refuses such a config, and the credential_process never runs. Root's own files
(0600 in root's directories) work, as test_s3_creds.py shows.
"""

import os
import shutil
import subprocess
import tempfile

import pytest

from test_s3 import BUCKET, failed_mount
from test_s3_creds import env, s3  # noqa: F401 (fixtures)

NOBODY = 65534


@pytest.fixture
def arena():
    """/tmp/spoolfs-hostile-X (root's, 0755) with evil/ (nobody's) and mine/ (root's, 0755)."""
    base = tempfile.mkdtemp(prefix="spoolfs-hostile-", dir="/tmp")
    os.chmod(base, 0o755)
    for name, owner in (("evil", NOBODY), ("mine", 0)):
        os.mkdir(os.path.join(base, name), 0o755)
        os.chown(os.path.join(base, name), owner, owner)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def config_running(marker):
    """A config whose credential_process leaves a marker when it runs."""
    return "[default]\ncredential_process = /usr/bin/touch %s\nregion = us-east-1\n" % marker


def write_as(path, text, uid, mode):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    os.chown(path, uid, uid)
    return path


def refused(tmp_path, s3, marker, *parts):
    rc, err = failed_mount(tmp_path, "s3://" + BUCKET, "--endpoint", s3.endpoint)
    assert rc != 0, err
    for part in parts:
        assert part in err, err
    assert not os.path.exists(marker), "the credential_process ran:\n" + err
    return err


def test_config_nobody_wrote_is_refused_and_its_process_never_runs(s3, env, tmp_path, arena):
    marker = os.path.join(arena, "mine", "ran")
    cfg = write_as(os.path.join(arena, "mine", "config"), config_running(marker), NOBODY,
                   0o644)
    env.setenv("AWS_CONFIG_FILE", cfg)
    refused(tmp_path, s3, marker, "refused " + cfg, "owned by another user")


def test_config_others_may_write_is_refused(s3, env, tmp_path, arena):
    marker = os.path.join(arena, "mine", "ran")
    for mode in (0o664, 0o646):
        cfg = write_as(os.path.join(arena, "mine", "config"), config_running(marker), 0, mode)
        env.setenv("AWS_CONFIG_FILE", cfg)
        refused(tmp_path, s3, marker, "writable by group or others")


def test_config_in_nobodys_directory_is_refused(s3, env, tmp_path, arena):
    """Root's own file, 0600, but nobody may rename it away and put theirs there."""
    marker = os.path.join(arena, "mine", "ran")
    cfg = write_as(os.path.join(arena, "evil", "config"), config_running(marker), 0, 0o600)
    env.setenv("AWS_CONFIG_FILE", cfg)
    refused(tmp_path, s3, marker, "owned by uid 65534")


def test_config_nobody_linked_is_refused(s3, env, tmp_path, arena):
    """nobody's link in a directory of root's that nobody may write in (here made by root
    and handed over): the link's owner counts, not only its target's."""
    marker = os.path.join(arena, "mine", "ran")
    real = write_as(os.path.join(arena, "mine", "real-config"), config_running(marker), 0,
                    0o600)
    link = os.path.join(arena, "mine", "config")
    subprocess.run(["ln", "-s", real, link], check=True)
    os.lchown(link, NOBODY, NOBODY)
    env.setenv("AWS_CONFIG_FILE", link)
    refused(tmp_path, s3, marker, "symbolic link owned by uid 65534")


def test_credentials_file_nobody_wrote_is_refused(s3, env, tmp_path, arena):
    creds = write_as(os.path.join(arena, "mine", "credentials"),
                     "[default]\naws_access_key_id = AKIDNOBODY\naws_secret_access_key = x\n",
                     NOBODY, 0o600)
    env.setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
    refused(tmp_path, s3, os.path.join(arena, "none"), "refused " + creds,
            "owned by another user")
