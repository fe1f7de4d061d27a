#!/usr/bin/env python3
"""bench/surge_lru.py — how many bytes a whole-file LRU cache reads from the disk for a SURGE stream,
in the stream's own order and in the order a closed loop of C connections replays it, and how much
reordering the requests in flight (SRPT, same-document grouping) could save. The bound behind the
disk case of `bench/srpt.sh disk` (BENCHMARKS.md, "SRPT and same-document grouping on the disk").

A closed loop (`modus load --workload DIR -c C`) sends user u's requests on connection u % C, each
connection at its own pace, so the server sees the connections' scripts interleaved, not the stream's
order. The pace is modelled as a fixed cost per request plus the size at a fixed rate (SERVICE_US,
RATE_MBPS); the conclusions hold across reasonable values of both.

Usage: bench/surge_lru.py DIR [C=64] [CACHE_MB=60,80,95]
  DIR: a `modus workload surge --out DIR` directory.
"""
import collections
import heapq
import sys

SERVICE_US = 50
RATE_MBPS = 200


def lru_read(requests, cache_bytes):
    """Bytes read: each miss reads the whole file; files are evicted least recently used first."""
    capacity = cache_bytes // 4096
    cache = collections.OrderedDict()
    used = read = 0
    for path, size in requests:
        if path in cache:
            cache.move_to_end(path)
            continue
        read += size
        pages = (size + 4095) // 4096
        cache[path] = pages
        used += pages
        while used > capacity:
            _, evicted = cache.popitem(last=False)
            used -= evicted
    return read


def closed_loop_order(rows, connections):
    scripts = collections.defaultdict(list)
    for user, path, size in rows:
        scripts[user % connections].append((path, size))
    at = dict.fromkeys(scripts, 0)
    ready = [(0.0, c) for c in scripts]
    order = []
    while ready:
        now, c = heapq.heappop(ready)
        path, size = scripts[c][at[c]]
        at[c] += 1
        order.append((path, size))
        if at[c] < len(scripts[c]):
            heapq.heappush(ready, (now + SERVICE_US * 1e-6 + size / (RATE_MBPS * 1e6), c))
    return order


def reordered(requests, window, key):
    """Each run of `window` consecutive requests served in `key` order."""
    out = []
    for i in range(0, len(requests), window):
        out.extend(sorted(requests[i:i + window], key=key))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    directory = sys.argv[1]
    connections = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    caches = [int(float(mb) * 1e6) for mb in (sys.argv[3] if len(sys.argv) > 3 else "60,80,95").split(",")]
    rows = []
    with open(f"{directory}/stream.txt") as stream:
        for line in stream:
            if line.startswith("#"):
                continue
            _, user, _, size, path = line.split()
            rows.append((int(user), path, int(size)))
    stream_order = [(path, size) for _, path, size in rows]
    distinct = dict(stream_order)
    print(f"{len(rows)} requests, {len(distinct)} documents, {sum(distinct.values()) / 1e6:.0f} MB "
          f"(the floor: {sum(distinct.values()) / len(rows):.0f} B per request)")
    loop = closed_loop_order(rows, connections)
    for cache in caches:
        print(f"LRU {cache / 1e6:.0f} MB: stream order {lru_read(stream_order, cache) / 1e6:.0f} MB read, "
              f"closed loop of {connections} {lru_read(loop, cache) / 1e6:.0f} MB")
    cache = caches[-1]
    first = {}
    for i, (path, _) in enumerate(loop):
        first.setdefault(path, i)
    print(f"closed loop of {connections}, LRU {cache / 1e6:.0f} MB, each window of requests reordered:")
    for name, window, key in [
        ("SRPT (smallest first)", connections, lambda r: r[1]),
        ("grouped by document", connections, lambda r: first[r[0]]),
        ("grouped by document", 16 * connections, lambda r: first[r[0]]),
        ("grouped by document", 256 * connections, lambda r: first[r[0]]),
    ]:
        print(f"  {name}, {window} at a time: {lru_read(reordered(loop, window, key), cache) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
