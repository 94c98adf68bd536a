"""Prefetch: a walk of a cold directory has the files it will open next fetched ahead of
it, many at once, in speculative flights that never take a reader's slot and back off when
the store throttles; a sparse reader and a bare `find` cost (almost) nothing extra; and what
a session opened can be recorded and fetched ahead by the next one."""

import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

from conftest import SLOW, SPOOLFS, read_file
from helpers import expected, flight_records, readlink_or_empty, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "upstream"))
import chunklist  # noqa: E402

KiB = 1 << 10
MiB = 1 << 20


def stats(m):
    with open(m.p(".spoolfs/stats")) as f:
        text = f.read()
    return {k: float(v) for k, v in re.findall(r"^spoolfs_(\w+) (\S+)$", text, re.M)}


def object_gets(up, skip=("manifest.json",)):
    return {p: s for p, s in up.stats()["paths"].items() if p not in skip and s["gets"]}


def walk_tree(store, dirs=("d",), files=60, size=4 * KiB):
    names = []
    for d in dirs:
        for i in range(files):
            names.append(store.add("%s/f%03d.bin" % (d, i), size))
    return names


def test_walk_fetches_the_rest_of_the_directory_many_at_once(store, mount, upstream):
    names = walk_tree(store)
    url = store.write()
    for name in names[3:]:
        upstream.fault(name, gate=True)
    m = mount(url)
    for name in names[:3]:
        assert read_file(m.p(name)) == expected(store, name)
    # Files not opened yet are asked for, several at once, while the walker has not come.
    wait_until(lambda: sum(s["gated"] for s in upstream.stats()["paths"].values()) >= 4,
               lambda: upstream.stats()["paths"])
    specs = [r for r in flight_records(m).values() if r["speculative"]]
    assert len(specs) >= 4 and not any(r["opened"] for r in specs), specs
    for name in names[3:]:
        upstream.release(name)
    for name in names[3:]:
        assert read_file(m.p(name)) == expected(store, name)
    st = stats(m)
    assert st["prefetch_walks_total"] >= 1 and st["speculative_flights_total"] >= 8, st
    assert st["prefetch_walk_hits_total"] >= 8, st
    # One request per object, however it started.
    assert all(s["gets"] == 1 for s in object_gets(upstream).values())


def test_speculation_never_has_more_requests_out_than_its_bound(store, mount, upstream):
    """--prefetch-requests N bounds the speculative requests at the store at once, whatever
    the walk's window (4 x N files). Every walked file waits at the upstream's gate, so a
    request sent stays in the store's count until the test lets it through; the files are
    let through as they arrive, and the most the store ever held at once is N."""
    names = walk_tree(store, files=40)
    url = store.write()
    for name in names[3:]:
        upstream.fault(name, gate=True)
    m = mount(url, "--prefetch-requests", "2")
    assert stats(m)["speculative_requests_limit"] == 2
    for name in names[:3]:
        assert read_file(m.p(name)) == expected(store, name)

    def specs():
        return [r for r in flight_records(m).values() if r["speculative"]]

    def at_gate():
        return [p for p, s in upstream.stats()["paths"].items() if s["gated"]]

    # The window's 8 files are all handed to the engine, and the bound's 2 are sent.
    wait_until(lambda: len(specs()) >= 8 and upstream.stats()["gated"] >= 2,
               lambda: (specs(), upstream.stats()["gated"]))
    let_through = set()
    while True:
        wait_until(lambda: at_gate() or all(r["state"] == "complete" for r in specs()),
                   lambda: (specs(), upstream.stats()))
        gated = at_gate()
        if not gated:
            break
        for name in gated:
            upstream.release(name)
            let_through.add(name)
    assert len(let_through) >= 8, let_through
    st = upstream.stats()
    assert st["peak_gated"] == 2, "%d speculative requests at once with --prefetch-requests 2" \
        % st["peak_gated"]
    assert stats(m)["speculative_requests_limit"] == 2
    upstream.clear()
    for name in names[3:]:
        assert read_file(m.p(name)) == expected(store, name)
    assert all(s["gets"] == 1 for s in object_gets(upstream).values())


def test_a_readers_miss_goes_ahead_of_gated_speculation(store, mount, upstream):
    names = walk_tree(store, files=60)
    other = store.add("other/x.bin", 64 * KiB)
    url = store.write()
    for name in names[3:40]:
        upstream.fault(name, gate=True)
    m = mount(url, "--max-transfers", "2")
    for name in names[:3]:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: sum(s["gated"] for s in upstream.stats()["paths"].values()) >= 4,
               lambda: upstream.stats()["paths"])
    # Speculation is stuck at the gates, and the reader's own misses are answered.
    assert read_file(m.p(other)) == expected(store, other)
    assert read_file(m.p(names[59])) == expected(store, names[59])
    assert sum(s["gated"] for s in upstream.stats()["paths"].values()) >= 4
    upstream.clear()


def test_slowdown_makes_speculation_back_off(store, mount, upstream):
    names = walk_tree(store, files=80)
    url = store.write()
    for name in names[3:]:
        upstream.fault(name, fail_status=503, fail_count=1)
    m = mount(url, "--prefetch-requests", "32")
    assert stats(m)["speculative_requests_limit"] == 32
    for name in names[:3]:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: stats(m)["upstream_throttled_total"] >= 1, lambda: stats(m))
    assert stats(m)["speculative_requests_limit"] <= 16
    for name in names[3:]:
        assert read_file(m.p(name)) == expected(store, name)
    st = stats(m)
    assert st["read_failures_total"] == 0 and st["upstream_failures_total"] == 0, st
    # It grows back slowly: far from its bound after a walk's worth of successes.
    assert st["speculative_requests_limit"] < 32, st
    assert "at most 16 speculative requests at once now" in m.stderr()


def test_a_sparse_reader_costs_at_most_2_mib_more(store, mount, upstream):
    names = walk_tree(store, dirs=["d%d" % i for i in range(10)], files=40, size=64 * KiB)
    url = store.write()
    m = mount(url)
    picked = random.Random(22).sample(names, 20)
    for name in picked:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: stats(m)["flights_in_progress"] == 0, lambda: stats(m))
    sent = sum(s["bytes"] for s in object_gets(upstream).values())
    assert sent - 20 * 64 * KiB <= 2 * MiB, (sent, stats(m))


def test_find_and_ls_fetch_no_content(store, mount, upstream):
    walk_tree(store, dirs=["a", "a/b", "c"], files=20)
    url = store.write()
    m = mount(url)
    subprocess.run(["find", m.p()], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["ls", "-lR", m.p()], check=True, stdout=subprocess.DEVNULL)
    assert object_gets(upstream) == {}
    assert stats(m)["speculative_flights_total"] == 0


def test_record_reads_writes_paths_in_first_open_order(store, mount, upstream, tmp_path):
    names = walk_tree(store, dirs=["x", "y"], files=5)
    url = store.write()
    record = tmp_path / "reads.txt"
    m = mount(url, "--record-reads", str(record), "--prefetch-requests", "0")
    order = [names[7], names[0], names[7], names[3], names[9], names[0]]
    for name in order:
        read_file(m.p(name))
    assert m.unmount() == 0
    assert record.read_text().splitlines() == [names[7], names[0], names[3], names[9]]


def prefetch_done(m):
    return stats(m).get("prefetch_list_done") == 1


def test_prefetch_list_fetches_ahead_and_skips_local_objects(store, mount, upstream, tmp_path):
    names = walk_tree(store, dirs=["p"], files=6, size=32 * KiB)
    url = store.write()
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", name="first")
    assert read_file(m.p(names[0])) == expected(store, names[0])
    wait_until(lambda: flight_records(m).get(names[0], {}).get("durable"), "durable")
    assert m.unmount() == 0
    upstream.reset()
    plist = tmp_path / "list.txt"
    with open(plist, "wb") as f:
        f.write(b"\n".join([
            names[0].encode(),             # local already
            ("/" + names[1]).encode(),     # absolute: taken as relative
            b"p/missing.bin",              # not in the source
            b"p",                          # a directory
            b"../etc/passwd",              # not a path of the source
            b"a\x00b",                     # garbage
            b"x" * 100000,                 # a huge line
            ("./" + names[2]).encode() + b"\r",
            names[3].encode(),
        ]) + b"\n")
    # (No walk prefetch: reading four files of p below would start the rest.)
    m = mount(url, "--cache-dir", str(cache), "--prefetch-list", str(plist),
              "--prefetch-requests", "0", name="second")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    gets = object_gets(upstream)
    assert set(gets) == {names[1], names[2], names[3]}, gets
    st = stats(m)
    assert st["prefetch_list_local"] == 1 and st["prefetch_list_started"] == 3, st
    assert st["prefetch_list_skipped"] == 5, st
    log = m.stderr()
    for why in ("not in the source", "a directory", "longer than 4096 bytes", "NUL byte",
                '".."'):
        assert why in log, log
    # What was fetched ahead is read with no request.
    for name in names[:4]:
        assert read_file(m.p(name)) == expected(store, name)
    assert set(object_gets(upstream)) == {names[1], names[2], names[3]}
    out = subprocess.run([SPOOLFS, "status", m.p()], check=True, capture_output=True,
                         text=True).stdout
    assert "prefetch list: done; 9 entries: 3 of 3 started finished" in out, out
    assert "1 local already, 5 skipped" in out, out


def test_prefetch_list_is_bounded_by_its_budget(store, mount, upstream, tmp_path):
    names = walk_tree(store, dirs=["p"], files=6, size=256 * KiB)
    url = store.write()
    plist = tmp_path / "list.txt"
    plist.write_text("\n".join(names) + "\n")
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-budget", "600K",
              "--prefetch-requests", "0")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    assert set(object_gets(upstream)) == set(names[:2])
    assert stats(m)["prefetch_list_over_budget"] == 4


def test_keep_cache_record_makes_the_next_mount_fetch_ahead(store, mount, upstream, tmp_path):
    names = walk_tree(store, dirs=["k"], files=10)
    url = store.write()
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", "--prefetch-requests", "0",
              name="first")
    for name in (names[5], names[1], names[8]):
        assert read_file(m.p(name)) == expected(store, name)
    assert m.unmount() == 0
    kept = [n for n in os.listdir(cache) if n.startswith("reads-")]
    assert len(kept) == 1
    # An ephemeral runner's cache: the objects are gone, the record stays.
    shutil.rmtree(cache / "spool")
    for n in os.listdir(cache):
        if n.startswith("index.db"):
            os.unlink(cache / n)
    upstream.reset()
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", "--prefetch-requests", "0",
              name="second")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    assert set(object_gets(upstream)) == {names[5], names[1], names[8]}
    assert "prefetching what the last mount of this source opened" in m.stderr()


def test_a_reader_under_a_low_fd_limit_never_fails_for_a_walk(store, mount, upstream):
    """Speculation holds spool fds and connections of its own; under a low RLIMIT_NOFILE it
    must leave the fds to readers (it backs off on EMFILE as on 503), so a reader's open
    never fails because a walk is in progress."""
    import resource
    names = walk_tree(store, files=80)
    others = walk_tree(store, dirs=["o"], files=30)
    url = store.write()
    for name in names[3:]:
        upstream.fault(name, gate=True)  # speculation stays in flight, holding its fds
    m = mount(url)
    pid = m.serving_pid()
    os.listdir(m.p("d"))
    os.listdir(m.p("o"))
    # Spool files made ahead (16 at first) may still be on their way: leave room for the
    # ones not yet open, or they take the room speculation was meant to get.
    fds = os.listdir("/proc/%d/fd" % pid)
    made_ahead = sum(1 for fd in fds if "#" in readlink_or_empty("/proc/%d/fd/%s" % (pid, fd)))
    limit = len(fds) + 40 + max(0, 16 - made_ahead)
    old = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, old[1]))
    failed = []
    try:
        for name in names[:3]:
            assert read_file(m.p(name)) == expected(store, name)
        wait_until(lambda: sum(s["gated"] for s in upstream.stats()["paths"].values()) >= 2,
                   lambda: upstream.stats()["paths"])
        # A walk of d is in flight, stuck at the gates: another walk's reader reads on.
        for name in others:
            try:
                if read_file(m.p(name)) != expected(store, name):
                    failed.append((name, "wrong bytes"))
            except OSError as e:
                failed.append((name, e))
        upstream.clear()
        for name in names[3:]:
            try:
                if read_file(m.p(name)) != expected(store, name):
                    failed.append((name, "wrong bytes"))
            except OSError as e:
                failed.append((name, e))
    finally:
        upstream.clear()
        resource.prlimit(pid, resource.RLIMIT_NOFILE, old)
    assert not failed, (failed[:5], len(failed), stats(m))
    st = stats(m)
    assert st["read_failures_total"] == 0, st
    assert "download failed" not in m.stderr(), m.stderr()[-3000:]


def test_speculative_bytes_nobody_read_are_shown(store, mount, upstream):
    """/.spoolfs/flights marks speculative flights, and the stats count the bytes they
    brought that no reader has opened (yet): what speculation cost for nothing so far."""
    names = walk_tree(store, files=40)
    url = store.write()
    m = mount(url)
    for name in names[:3]:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: stats(m)["speculative_flights_total"] >= 8 and
               stats(m)["flights_in_progress"] == 0, lambda: stats(m))
    recs = flight_records(m)
    unread = sum(r["size"] for r in recs.values() if r["speculative"] and not r["opened"])
    assert unread >= 8 * 4 * KiB, recs
    assert stats(m)["speculative_unread_bytes"] == unread, (stats(m), recs)
    for name in names[3:]:
        assert read_file(m.p(name)) == expected(store, name)
    assert stats(m)["speculative_unread_bytes"] == 0, stats(m)


def test_a_walk_beside_a_list_fetches_nothing_the_list_foresaw(store, mount, upstream, tmp_path):
    """Opens the list foresaw start no walk (a walk would fetch files no run read); an open
    it did not foresee still may."""
    listed = walk_tree(store, dirs=["d"], files=40)
    other = walk_tree(store, dirs=["e"], files=40)
    url = store.write()
    plist = tmp_path / "list.txt"
    plist.write_text("\n".join(listed[:10]) + "\n")
    m = mount(url, "--prefetch-list", str(plist))
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    for name in listed[:10]:
        assert read_file(m.p(name)) == expected(store, name)
    # Opens the list did not foresee: a walk in e. The thread takes opens in order, so once
    # it is seen, d's opens were heard before it.
    for name in other[:3]:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: stats(m)["prefetch_walks_total"] >= 1, lambda: stats(m))
    wait_until(lambda: any(n in object_gets(upstream) for n in other[3:]),
               lambda: object_gets(upstream))
    gets = object_gets(upstream)
    assert not set(gets) & set(listed[10:]), sorted(set(gets) & set(listed[10:]))
    assert stats(m)["prefetch_walks_total"] == 1, stats(m)


def test_a_warm_mount_starts_no_walk(store, mount, upstream, tmp_path):
    """A mount whose kept record is all local fetches nothing when the job reads it again."""
    names = walk_tree(store, dirs=["w"], files=40)
    url = store.write()
    cache = tmp_path / "cache"
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", "--prefetch-requests", "0",
              name="first")
    for name in names[:10]:
        assert read_file(m.p(name)) == expected(store, name)
    wait_until(lambda: all(flight_records(m).get(n, {}).get("durable") for n in names[:10]),
               "durable")
    assert m.unmount() == 0
    upstream.reset()
    m = mount(url, "--cache-dir", str(cache), "--keep-cache", name="warm")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    for name in names[:10]:
        assert read_file(m.p(name)) == expected(store, name)
    # An open nothing foresaw (another file of w): heard after the ten, and no walk alone.
    assert read_file(m.p(names[20])) == expected(store, names[20])
    wait_until(lambda: names[20] in object_gets(upstream), lambda: object_gets(upstream))
    assert m.unmount() == 0
    assert set(object_gets(upstream)) == {names[20]}, sorted(object_gets(upstream))


def chunked_list(store, tmp_path, size=1536 * KiB):
    """A store with one chunked file (what `spoolfs publish` gives a file over 1 MiB) and a
    prefetch list naming it: (url, its path, its hash list's path, the list)."""
    name = store.add("c/big.bin", size)
    url = store.write()
    manifest = chunklist.add_chunks(store.root, paths=[name])
    entry = next(e for e in manifest["entries"] if e["path"] == name)
    plist = tmp_path / "list.txt"
    plist.write_text(name + "\n")
    return url, name, entry["chunks"]["url"], plist


def test_a_list_fetches_a_chunked_files_hash_list_then_its_object(store, mount, upstream,
                                                                   tmp_path):
    """Before any open: the hash list, then the object with its digests, ahead of the
    reader, whose open and reads then ask nothing more."""
    url, name, listed, plist = chunked_list(store, tmp_path)
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-requests", "0")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    gets = object_gets(upstream)
    assert set(gets) == {name, listed}, gets
    assert gets[listed]["gets"] == 1 and gets[name]["bytes"] == 1536 * KiB, gets
    st = stats(m)
    assert st["prefetch_list_started"] == 1 and st["prefetch_list_finished"] == 1, st
    assert read_file(m.p(name)) == expected(store, name)
    assert object_gets(upstream) == gets


def test_a_reader_joins_the_hash_list_a_list_entry_started(store, mount, upstream, tmp_path):
    """The reader opens while the list's hash list waits at the gate: it joins that flight
    and then the object's: one fetch of each."""
    url, name, listed, plist = chunked_list(store, tmp_path)
    upstream.fault(listed, gate=True)
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-requests", "0")
    upstream.wait_for(lambda s: s["gated"] == 1, timeout=20 * SLOW, path=listed)
    got = {}
    reader = threading.Thread(target=lambda: got.update(data=read_file(m.p(name))))
    reader.start()
    # The reader's open has joined the hash list's flight once it holds it.
    wait_until(lambda: flight_records(m).get(name + " (hash list)", {}).get("opened"),
               lambda: flight_records(m))
    upstream.release(listed)
    reader.join(30 * SLOW)
    assert got.get("data") == expected(store, name)
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    gets = object_gets(upstream)
    assert gets[listed]["gets"] == 1, gets
    assert gets[name]["bytes"] == 1536 * KiB, gets
    assert {r for r in flight_records(m) if r.startswith(name)} == {
        name, name + " (hash list)"}, flight_records(m)


def test_unmount_while_a_hash_list_is_pending_is_prompt(store, mount, upstream, tmp_path):
    url, name, listed, plist = chunked_list(store, tmp_path)
    upstream.fault(listed, gate=True)
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-requests", "0")
    upstream.wait_for(lambda s: s["gated"] == 1, timeout=20 * SLOW, path=listed)
    began = time.monotonic()
    assert m.unmount() == 0
    assert time.monotonic() - began < 5 * SLOW
    upstream.release(listed)
    assert name not in object_gets(upstream)


def test_a_chunked_file_over_the_budget_fetches_not_even_its_hash_list(store, mount, upstream,
                                                                       tmp_path):
    url, name, listed, plist = chunked_list(store, tmp_path)
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-budget", "1M",
              "--prefetch-requests", "0")
    wait_until(lambda: prefetch_done(m), lambda: stats(m))
    assert stats(m)["prefetch_list_over_budget"] == 1
    assert object_gets(upstream) == {}


def test_a_reader_takes_a_hash_list_waiting_for_a_speculative_slot(store, mount, upstream,
                                                                    tmp_path):
    """The list's one speculative slot is held at the gate by the entry before; the
    chunked file's hash list waits for it, and its reader's open does not wait behind it
    (a parked reader's miss goes ahead, and the open claims the flight)."""
    url, name, listed, plist = chunked_list(store, tmp_path)
    first = store.add("c/first.bin", 64 * KiB)
    store.write()
    chunklist.add_chunks(store.root, paths=[name])
    plist.write_text(first + "\n" + name + "\n")
    upstream.fault(first, gate=True)
    m = mount(url, "--prefetch-list", str(plist), "--prefetch-requests", "1")
    upstream.wait_for(lambda s: s["gated"] == 1, timeout=20 * SLOW, path=first)
    wait_until(lambda: name + " (hash list)" in flight_records(m), lambda: flight_records(m))
    assert listed not in object_gets(upstream)
    assert read_file(m.p(name)) == expected(store, name)
    assert upstream.stats(listed)["gets"] == 1
    upstream.release(first)
    assert read_file(m.p(first)) == expected(store, first)
