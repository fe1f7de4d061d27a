#!/usr/bin/env python3
# bench/accesslog_ref.py access.log — the reference parse BENCHMARKS.md compares `modus workload
# from-log` with: the usual combined-format regex, building the same tables.
# Reference parse of the same log: the usual combined-format regex, and the
# same tables from-log keeps (distinct 2xx GET paths with their largest size,
# requests per client + user agent, skipped lines by reason).
import re, sys, collections
LINE = re.compile(rb'^(\S+) \S+ \S+ \[([^\]]+)\] "((?:[^"\\]|\\.)*)" (\d{3}) (\d+|-)(?: "((?:[^"\\]|\\.)*)" "((?:[^"\\]|\\.)*)")?')
docs = {}; users = collections.Counter(); skipped = collections.Counter(); n = 0
with open(sys.argv[1], 'rb') as f:
    for line in f:
        n += 1
        m = LINE.match(line)
        if not m:
            skipped['malformed'] += 1; continue
        parts = m.group(3).split(b' ')
        if len(parts) != 3:
            skipped['request line'] += 1; continue
        if parts[0] != b'GET':
            skipped['not GET'] += 1; continue
        status = int(m.group(4))
        if not 200 <= status < 300:
            skipped['status %dxx' % (status // 100)] += 1; continue
        size = 0 if m.group(5) == b'-' else int(m.group(5))
        docs[parts[1]] = max(docs.get(parts[1], 0), size)
        users[(m.group(1), m.group(7))] += 1
print(n, "lines,", len(docs), "documents,", len(users), "users, skipped", dict(skipped))
