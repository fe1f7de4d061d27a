#!/usr/bin/env python3
# bench/accesslog_gen.py N > access.log — the synthetic nginx combined log BENCHMARKS.md's from-log
# section reads ("Workload from an access log"): Zipf-popular paths, lognormal sizes, CGI-like
# lines with $request_time, 404s, junk request lines, IPv4/IPv6 clients, escaped user agents.
# A synthetic nginx combined log: Zipf-popular paths, lognormal sizes, many clients.
import random, sys, time
random.seed(1)
n = int(sys.argv[1])
paths = ["/static/%s/f%05d.%s" % (random.choice(["css","js","img"]), i, random.choice(["css","js","png","jpg","html"])) for i in range(20000)]
sizes = [int(random.lognormvariate(9.357, 1.318)) for _ in paths]
w = [1.0/(r+1) for r in range(len(paths))]
cum = []; acc = 0
for x in w: acc += x; cum.append(acc)
import bisect
uas = ['Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/%d.0 Safari/537.36' % v for v in range(90, 130)] + ['curl/8.%d.0' % v for v in range(10)] + ['say \\x22hi\\x22 bot']
ips = ['10.%d.%d.%d' % (random.randrange(256), random.randrange(256), random.randrange(256)) for _ in range(5000)] + ['2001:db8::%x' % i for i in range(500)]
t0 = 1700000000
out = sys.stdout
months = ["Jan","Feb","Mar","Apr","May","Jun","Jul","Aug","Sep","Oct","Nov","Dec"]
buf = []
for i in range(n):
    t = t0 + i // 2000
    tm = time.gmtime(t)
    stamp = "%02d/%s/%04d:%02d:%02d:%02d +0000" % (tm.tm_mday, months[tm.tm_mon-1], tm.tm_year, tm.tm_hour, tm.tm_min, tm.tm_sec)
    k = bisect.bisect_left(cum, random.random() * acc)
    r = random.random()
    if r < 0.03:
        line = '%s - - [%s] "GET /search.php?q=%d HTTP/1.1" 200 %d "-" "%s" 0.0%02d' % (random.choice(ips), stamp, k, 900, random.choice(uas), random.randrange(100))
    elif r < 0.05:
        line = '%s - - [%s] "GET /missing/%d HTTP/1.1" 404 153 "-" "%s" 0.000' % (random.choice(ips), stamp, k, random.choice(uas))
    elif r < 0.051:
        line = '%s - - [%s] "\\x16\\x03\\x01" 400 157 "-" "-" 0.000' % (random.choice(ips), stamp)
    else:
        line = '%s - - [%s] "GET %s HTTP/1.1" 200 %d "https://example.org/" "%s" 0.001' % (random.choice(ips), stamp, paths[k], sizes[k], random.choice(uas))
    buf.append(line)
    if len(buf) >= 10000:
        out.write("\n".join(buf) + "\n"); buf = []
out.write("\n".join(buf) + ("\n" if buf else ""))
