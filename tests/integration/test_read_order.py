"""Read orders: `spoolfs publish --read-order [NAME=]FILE` writes what earlier runs of a job
opened, in first-read order, into the manifest ("read_orders"), and a mount fetches its
order from mount time, before any program asks: in order as far as the speculative slots
allow, within --prefetch-budget, skipping what is local, cancelled by unmount. A name picks
its own order, --no-read-order none; a bad "read_orders" mounts the tree without it and says
why (doc/prefetch.md, doc/manifest.md)."""

import json
import os
import re
import subprocess
import time

import pytest

from conftest import SLOW, SPOOLFS, read_file
from client import Upstream
from helpers import publish_tree, refused_mount, wait_until

KiB = 1 << 10
NAMES = ["lib/m%02d.py" % i for i in range(12)] + ["data/blob.bin"]
ORDER = ["lib/m05.py", "lib/m01.py", "lib/m07.py", "lib/m09.py", "lib/m03.py"]


def stats(m):
    with open(m.p(".spoolfs/stats")) as f:
        text = f.read()
    return {k: float(v) for k, v in re.findall(r"^spoolfs_(\w+) (\S+)$", text, re.M)}


def order_done(m):
    return stats(m).get("prefetch_list_done") == 1


def object_gets(up):
    """{object URL path: gets} of the objects (not the manifest) the upstream served."""
    return {p: s["gets"] for p, s in up.stats()["paths"].items()
            if p.startswith("objects/") and s["gets"]}


def urls(out):
    """{tree path: object URL path} from the published manifest."""
    with open(out / "manifest.json") as f:
        man = json.load(f)
    return {e["path"]: e["url"] for e in man["entries"] if "url" in e}


@pytest.fixture
def tree(tmp_path):
    """A published tree of 13 files, each an object of its own (no packs), and records of
    two jobs' runs: (src, out, records dir)."""
    src = tmp_path / "src"
    for i, name in enumerate(NAMES):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(os.urandom(8 * KiB + i))
    rec = tmp_path / "rec"
    rec.mkdir()
    (rec / "test").write_text("\n".join(["lib/m05.py", "lib/m01.py", "lib/m09.py",
                                         "lib/m03.py", "not/in/tree.py"]) + "\n")
    (rec / "test2").write_text("lib/m01.py\nlib/m07.py\nlib/m05.py\n")
    (rec / "build").write_text("lib/m10.py\ndata/blob.bin\n")
    return src, tmp_path / "out", rec


def publish(tree, *orders):
    src, out, rec = tree
    args = ["--pack-under", "0"]
    for o in orders:
        args += ["--read-order", o]
    return publish_tree(src, out, *args)


@pytest.fixture
def served(tree):
    """The tree published with the default order merged from two runs, and a "build" one."""
    _, out, rec = tree
    _, _, err = publish(tree, str(rec / "test"), "default=%s" % (rec / "test2"),
                        "build=%s" % (rec / "build"))
    up = Upstream(out)
    yield out, up, err
    up.stop()


def test_publish_merges_runs_by_rank_and_drops_paths_not_in_the_tree(served):
    out, _, err = served
    with open(out / "manifest.json") as f:
        orders = json.load(f)["read_orders"]
    # test: m05 m01 m09 m03; test2: m01 m07 m05. By rank: m05 m01 | (m01) m07 | m09 (m05) |
    # m03: each path at its earliest place, the runs taking turns.
    assert orders == {"default": ORDER,
                      "build": ["lib/m10.py", "data/blob.bin"]}
    # The line by its number only: a record's text is never echoed (it may be anything).
    assert "line 5: not a file of the tree: dropped" in err, err
    assert "not/in/tree.py" not in err, err


def test_publish_refuses_a_bad_order_name(tree):
    _, _, rec = tree
    src, out, _ = tree
    rc, _, err = publish_tree(src, out, "--read-order", "bad!name=%s" % (rec / "test"),
                              check=False)
    assert rc == 2 and "a NAME is 1 to 64 of" in err, err
    rc, _, err = publish_tree(src, out, "--read-order", str(rec / "missing"), check=False)
    assert rc == 1 and "missing: No such file or directory" in err, err
    assert not (out / "manifest.json").exists()


def test_publish_refuses_a_read_order_that_is_a_link_or_a_fifo(tree, tmp_path):
    """--read-order is opened by the trusted-path rule, as --prefetch-list is: a record that
    is a symlink (to another's secret, say) or a FIFO is refused, and nothing of what it
    points at reaches stderr."""
    src, out, rec = tree
    secret = tmp_path / "secret"
    secret.write_text("root:$6$SECRETHASH:19000\nsecond:SECRETLINE\n")
    os.chmod(secret, 0o600)
    os.symlink(secret, rec / "linked")
    os.mkfifo(rec / "fifo")
    for name in ("linked", "fifo"):
        rc, _, err = publish_tree(src, out, "--read-order", str(rec / name), check=False,
                                  timeout=60)
        assert rc == 1 and "--read-order: refused" in err, err
        assert "SECRET" not in err, err
        assert not (out / "manifest.json").exists()


def test_the_order_is_fetched_at_mount_before_any_open(served, mount):
    out, up, _ = served
    u = urls(out)
    order = ORDER
    m = mount(up.url("manifest.json"), "--prefetch-requests", "0")
    wait_until(lambda: order_done(m), lambda: (stats(m), m.stderr()))
    # Nothing was opened: the mount started its order itself, that order and no other.
    assert object_gets(up) == {u[p]: 1 for p in order}
    st = stats(m)
    assert st["prefetch_list_entries"] == 5 and st["prefetch_list_started"] == 5, st
    status = subprocess.run([SPOOLFS, "status", m.p()], check=True, capture_output=True,
                            text=True).stdout
    assert 'read order: "default" from the manifest' in status, status
    assert "prefetch list: done; 5 entries: 5 of 5 started finished" in status, status
    # What was fetched ahead is read with no request; a find fetches no content.
    for p in order:
        assert read_file(m.p(p)) == (served[0].parent / "src" / p).read_bytes()
    subprocess.run(["find", m.p(""), "-ls"], capture_output=True, check=True, timeout=60)
    assert object_gets(up) == {u[p]: 1 for p in order}


def test_the_order_starts_in_its_order_one_slot_at_a_time(served, mount):
    out, up, _ = served
    u = urls(out)
    order = ORDER
    for p in order:
        up.fault(u[p], gate=True)
    m = mount(up.url("manifest.json"), "--prefetch-requests", "1")
    # One speculative slot: each object of the order is asked for only once the one before
    # it is answered.
    for k, p in enumerate(order):
        up.wait_for(lambda s: s["gated"] == 1, timeout=20 * SLOW, path=u[p])
        gated = {q for q in order if up.stats(u[q])["gated"]}
        assert gated == {p}, (k, gated)
        up.release(u[p])
    wait_until(lambda: order_done(m), lambda: stats(m))
    assert object_gets(up) == {u[p]: 1 for p in order}


def test_a_name_picks_its_own_order_and_the_budget_bounds_it(served, mount):
    out, up, _ = served
    u = urls(out)
    m = mount(up.url("manifest.json"), "--read-order-name", "build", "--prefetch-requests",
              "0", "--prefetch-budget", "9K")
    wait_until(lambda: order_done(m), lambda: stats(m))
    # build: m10 (8 KiB + 10 bytes) fits 9K; data/blob.bin after it does not.
    assert object_gets(up) == {u["lib/m10.py"]: 1}
    assert stats(m)["prefetch_list_over_budget"] == 1
    assert m.unmount() == 0
    # A name the manifest has not: the tree mounts, nothing is fetched, the log says so.
    up.reset()
    m = mount(up.url("manifest.json"), "--read-order-name", "nosuch", name="mnt2")
    assert sorted(os.listdir(m.p("lib")))[:2] == ["m00.py", "m01.py"]
    assert 'no read order named "nosuch"' in m.stderr(), m.stderr()
    assert "prefetch_list_entries" not in stats(m)
    assert object_gets(up) == {}


def test_a_bad_read_order_name_is_refused(served, tmp_path):
    _, up, _ = served
    err = refused_mount(up.url("manifest.json"), tmp_path / "mnt", "--read-order-name", "a b")
    assert "--read-order-name: a name is 1 to 64 of" in err, err


def test_an_order_below_nested_manifests_loads_them_at_mount(tree, mount):
    """lib/ in a manifest of its own: the order's paths there load it from mount time, as a
    list line does, and its files are fetched before any lookup."""
    src, out, rec = tree
    publish_tree(src, out, "--pack-under", "0", "--nest-over", "5", "--read-order",
                 str(rec / "test"))
    with open(out / "manifest.json") as f:
        top = json.load(f)
    nested = [e for e in top["entries"] if "manifest" in e]
    assert [e["path"] for e in nested] == ["lib"]
    assert top["read_orders"]["default"][0] == "lib/m05.py"
    up = Upstream(out)
    try:
        m = mount(up.url("manifest.json"), "--prefetch-requests", "0")
        wait_until(lambda: order_done(m), lambda: (stats(m), m.stderr()))
        gets = object_gets(up)
        assert gets.pop(nested[0]["manifest"]["url"]) == 1
        assert len(gets) == 4 and set(gets.values()) == {1}, gets
        assert stats(m)["prefetch_list_started"] == 4
        assert read_file(m.p("lib/m05.py")) == (src / "lib/m05.py").read_bytes()
        assert m.unmount() == 0
    finally:
        up.stop()


def test_no_read_order_fetches_nothing(served, mount):
    out, up, _ = served
    m = mount(up.url("manifest.json"), "--no-read-order", "--prefetch-requests", "0")
    subprocess.run(["find", m.p(""), "-ls"], capture_output=True, check=True, timeout=60)
    assert "prefetch_list_entries" not in stats(m)
    # The order would have started at once: the log says the mount is up.
    assert object_gets(up) == {}


def test_the_order_and_the_jobs_own_list_fetch_each_path_once(served, mount, tmp_path):
    out, up, _ = served
    u = urls(out)
    plist = tmp_path / "own.txt"
    plist.write_text("lib/m01.py\nlib/m11.py\nlib/m05.py\n")
    m = mount(up.url("manifest.json"), "--prefetch-list", str(plist), "--prefetch-requests",
              "0")
    wait_until(lambda: order_done(m), lambda: stats(m))
    want = ORDER + ["lib/m11.py"]
    assert object_gets(up) == {u[p]: 1 for p in want}
    st = stats(m)
    assert st["prefetch_list_entries"] == 8 and st["prefetch_list_started"] == 6, st


def test_unmount_while_the_order_is_held_at_the_gate_is_prompt(served, mount):
    out, up, _ = served
    u = urls(out)
    for p in u.values():
        up.fault(p, gate=True)
    m = mount(up.url("manifest.json"))
    up.wait_for(lambda s: sum(v["gated"] for v in s["paths"].values()) >= 1,
                timeout=20 * SLOW)
    start = time.monotonic()
    assert m.unmount() == 0, m.stderr()
    assert time.monotonic() - start < 10 * SLOW
    for mark in ("AddressSanitizer", "LeakSanitizer", "ThreadSanitizer", "runtime error:"):
        assert mark not in m.stderr()


HOSTILE = [
    ({"x%d" % i: [] for i in range(65)}, "more than 64 orders"),
    ({"bad name": ["lib/m01.py"]}, "not an order's name"),
    ({"default": "lib/m01.py"}, "not an array of paths"),
    ({"default": ["lib/m01.py", 7]}, 'read_orders["default"][1]: not a string'),
    ({"default": ["lib/../etc/passwd"]}, '".."'),
    ({"default": ["/etc/passwd"]}, "absolute"),
    ({"default": ["lib/a\nb"]}, "line break"),
    ([["lib/m01.py"]], "read_orders: not an object"),
    ({"x" * 65: []}, "not an order's name"),
]


@pytest.mark.parametrize("orders,why", HOSTILE, ids=[w for _, w in HOSTILE])
def test_a_bad_read_orders_mounts_the_tree_without_it(tree, mount, orders, why):
    src, out, _ = tree
    publish(tree)
    with open(out / "manifest.json") as f:
        man = json.load(f)
    man["read_orders"] = orders
    with open(out / "manifest.json", "w") as f:
        json.dump(man, f)
    up = Upstream(out)
    try:
        m = mount(up.url("manifest.json"), "--prefetch-requests", "0")
        log = m.stderr()
        assert "no read order fetched ahead" in log and why in log, log
        assert sorted(os.listdir(m.p("lib"))) == sorted(os.listdir(src / "lib"))
        assert "prefetch_list_entries" not in stats(m)
        assert object_gets(up) == {}
        assert m.unmount() == 0
    finally:
        up.stop()


def test_a_path_of_the_order_not_in_the_tree_is_skipped_with_a_reason(tree, mount):
    src, out, _ = tree
    publish(tree)
    with open(out / "manifest.json") as f:
        man = json.load(f)
    man["read_orders"] = {"default": ["lib/gone.py", "lib/m02.py"]}
    with open(out / "manifest.json", "w") as f:
        json.dump(man, f)
    up = Upstream(out)
    try:
        m = mount(up.url("manifest.json"), "--prefetch-requests", "0")
        wait_until(lambda: order_done(m), lambda: stats(m))
        # Line number and reason, never the line itself (a list file may be anyone's).
        assert 'read order "default": line 1: not in the source: skipped' in m.stderr()
        assert "gone.py" not in m.stderr()
        assert object_gets(up) == {urls(out)["lib/m02.py"]: 1}
        assert m.unmount() == 0
    finally:
        up.stop()


def test_a_chunked_file_in_the_order_is_fetched_before_its_open(tmp_path, mount):
    """A file over 1 MiB, which `spoolfs publish` gives chunk hashes: the order fetches its
    hash list, then the object with its digests, before any open; the reader asks nothing."""
    src, out = tmp_path / "src", tmp_path / "out"
    (src / "lib").mkdir(parents=True)
    big = os.urandom(1536 * KiB)
    (src / "lib" / "big.so").write_bytes(big)
    (src / "lib" / "small.py").write_bytes(os.urandom(4 * KiB))
    (tmp_path / "rec").write_text("lib/big.so\n")
    publish_tree(src, out, "--pack-under", "0", "--read-order", str(tmp_path / "rec"))
    with open(out / "manifest.json") as f:
        entry = next(e for e in json.load(f)["entries"] if e["path"] == "lib/big.so")
    assert "chunks" in entry, entry
    up = Upstream(out)
    try:
        m = mount(up.url("manifest.json"), "--prefetch-requests", "0")
        wait_until(lambda: order_done(m), lambda: (stats(m), m.stderr()))
        gets = {p: s["gets"] for p, s in up.stats()["paths"].items()
                if p != "manifest.json" and s["gets"]}
        assert set(gets) == {entry["url"], entry["chunks"]["url"]}, gets
        assert gets[entry["chunks"]["url"]] == 1, gets
        assert read_file(m.p("lib/big.so")) == big
        assert {p: s["gets"] for p, s in up.stats()["paths"].items()
                if p != "manifest.json" and s["gets"]} == gets
        assert m.unmount() == 0
    finally:
        up.stop()
