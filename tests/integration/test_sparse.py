"""Sparse access: a large object read here and there costs only the ranges read (rounded to
256 KiB), while one read through, from the start or from anywhere, is downloaded whole."""

import os
import random

import pytest

from helpers import expected, flight_records, wait_until

MiB = 1 << 20
KiB = 1 << 10
DEMAND = 256 * KiB


def flight_of(m, name):
    return flight_records(m).get(name, {})


def wait_complete(m, name):
    wait_until(lambda: flight_of(m, name).get("state") == "complete",
               lambda: flight_of(m, name), timeout=30)


def scattered_offsets(size, n, seed=7):
    """n 4 KiB offsets, none in the first chunk and no two consecutive ones close enough to
    look like a sequential reader."""
    rng = random.Random(seed)
    offs = []
    while len(offs) < n:
        off = rng.randrange(2 * MiB, size - 4096) // 4096 * 4096
        if not offs or abs(off - offs[-1]) > 4 * MiB:
            offs.append(off)
    return offs


@pytest.mark.parametrize("hashed", [False, True], ids=["unhashed", "hashed"])
def test_random_reads_fetch_only_what_they_miss(store, mount, hashed):
    size = 128 * MiB
    path = store.add("big.bin", size, hashed=hashed)
    m = mount(store.write())
    want = expected(store, path)
    offs = scattered_offsets(size, 40)
    with open(m.p(path), "rb", buffering=0) as f:
        for off in offs:
            assert os.pread(f.fileno(), 4096, off) == want[off:off + 4096], off
    st = store.up.stats(path)
    # each miss costs at most the demand units its read (grown by the kernel's readahead,
    # at most 128 KiB here) touches: two
    assert st["bytes"] <= len(offs) * 2 * DEMAND, st["bytes"]
    assert st["gets"] <= 2 * len(offs), st["gets"]
    assert flight_of(m, path)["access"] == "sparse", flight_of(m, path)
    m.check_clean_exit()
    assert store.up.stats(path)["bytes"] <= len(offs) * 2 * DEMAND, \
        "the download went on after the reader closed"


def test_reading_from_the_start_downloads_whole(store, mount):
    size = 32 * MiB
    path = store.add("seq.bin", size)
    m = mount(store.write())
    with open(m.p(path), "rb", buffering=0) as f:
        assert f.read(4096) == expected(store, path)[:4096]
    # nobody reads on, yet the whole object arrives: the download belongs to the object
    wait_complete(m, path)
    assert store.up.stats(path)["bytes"] <= size + MiB


def test_a_reader_going_through_from_the_middle_gets_the_whole_download(store, mount):
    size = 64 * MiB
    path = store.add("mid.bin", size)
    m = mount(store.write())
    want = expected(store, path)
    start = 20 * MiB
    with open(m.p(path), "rb", buffering=0) as f:
        f.seek(start)
        for i in range(48):  # 3 MiB in a row
            assert f.read(64 * KiB) == want[start + i * 64 * KiB:start + (i + 1) * 64 * KiB]
    wait_complete(m, path)
    st = store.up.stats(path)
    assert st["bytes"] <= size + 2 * MiB, st["bytes"]


def test_scattered_reads_of_a_hashed_object_never_wait_for_a_hash_that_cannot_finish(store, mount):
    """Reading a hashed object here and there until nearly all of it is local: the bytes
    that would complete it wait for the hash, so the rest must be fetched, not waited for."""
    size = 9 * MiB
    path = store.add("h.bin", size)
    m = mount(store.write())
    want = expected(store, path)
    chunks = size // DEMAND
    offs = [(i * 7 % chunks) * DEMAND + 4096 for i in range(chunks)]  # 1.75 MiB apart
    with open(m.p(path), "rb", buffering=0) as f:
        for off in offs:
            assert os.pread(f.fileno(), 4096, off) == want[off:off + 4096], off
    assert flight_of(m, path)["state"] == "complete"
    assert store.up.stats(path)["bytes"] <= size + DEMAND
