//! Stopping, and the status snapshot.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;

impl Director {
    pub(super) fn begin_stop(&mut self) {
        let _ = self.poller.delete(self.shutdown.wake_fd());
        if !self.finish.begin(Some(Instant::now() + self.cfg.shutdown_timeout)) {
            return;
        }
        self.listener = None;
        // Idle connections close now; requests in flight finish.
        for token in self.clients.tokens() {
            let idle = self
                .clients
                .get(token)
                .is_some_and(|c| c.state == ClientState::Request && c.io.inbuf.is_empty());
            if idle {
                self.close_client(token);
            }
        }
    }

    /// Responses completed.
    pub(super) fn answered(&self) -> u64 {
        self.stats.responses.values().sum()
    }

    /// Everything `--admin` shows, as JSON.
    pub(super) fn status_json(&self) -> Value {
        let mut phases = [0usize; 5];
        for t in self.clients.tokens() {
            if let Some(c) = self.clients.get(t) {
                phases[c.state.index()] += 1;
            }
        }
        let now = Instant::now();
        let answered = self.answered();
        let rate = match self.rate_samples.front() {
            Some(&(t, n)) if now.duration_since(t) >= Duration::from_millis(100) => {
                (answered - n) as f64 / now.duration_since(t).as_secs_f64()
            }
            _ => 0.0,
        };
        let s = &self.stats;
        let max = self.cfg.max_backend_conns;
        let backends: Vec<Value> = self
            .backends
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let h = &self.latencies.per_backend[i];
                json!({
                    "name": b.name,
                    "addr": b.addr.to_string(),
                    "health": if b.up { "up" } else { "down" },
                    "down_reason": if b.up { Value::Null } else { Value::from(b.down_reason) },
                    "monitor": b.monitor.as_str(),
                    "monitor_detail": b.monitor_detail,
                    "inflight": b.inflight,
                    "limit": b.limit(max),
                    "adaptive_limit": b.limiter.limit(),
                    "monitor_limit": b.monitor_limit(max),
                    "window_latency_us": b.limiter.last_rtt().map(|d| d.as_micros() as u64),
                    "latency_us": if h.is_empty() { Value::Null } else { Value::from(h.value_at_quantile(0.5)) },
                    "latency_p99_us": if h.is_empty() { Value::Null } else { Value::from(h.value_at_quantile(0.99)) },
                    "idle": b.idle.len(),
                    "conns": b.conns,
                    "served": b.served,
                    "server_errors": b.server_errors,
                    "errors": b.errors,
                    "connect_failures": b.connect_failures,
                    "recent_failures": b.failures.recent(now, self.cfg.fail_window),
                    "health_check_failures": b.probe_failures,
                })
            })
            .collect();
        let in_flight: usize = self.backends.iter().map(|b| b.inflight).sum();
        let idle: usize = self.backends.iter().map(|b| b.idle.len()).sum();
        let connections: serde_json::Map<String, Value> = ClientState::NAMES
            .iter()
            .zip(phases)
            .map(|(name, n)| (name.to_string(), Value::from(n)))
            .collect();
        let responses: serde_json::Map<String, Value> =
            s.responses.iter().map(|(code, n)| (code.to_string(), Value::from(*n))).collect();
        json!({
            "model": "direct",
            "pid": std::process::id(),
            "uptime_s": self.started.elapsed().as_secs(),
            "requests_total": answered,
            "requests_received": s.requests,
            "requests_per_s": rate,
            "connections_accepted": s.accepted,
            "connections_open": self.clients.len(),
            "connections": connections,
            "responses": responses,
            "responses_buffered_to_file": s.buffered_to_file,
            "requests_buffered_to_file": s.requests_to_file,
            "latency_us": summary(&self.latencies.request),
            "phases_us": {
                "queue": summary(&self.latencies.queue),
                "backend": summary(&self.latencies.backend),
            },
            "queues": {"pending": self.queue.len()},
            "workers": {"busy": in_flight, "idle": idle},
            "admission": {
                "in_flight": in_flight,
                "queued": self.queue.len(),
                "queue_capacity": self.cfg.queue,
                "queued_total": s.queued_total,
                "refused": {
                    "queue_timeout": s.busy_pages - s.queue_full,
                    "queue_full": s.queue_full,
                    "max_conns": s.refused_total,
                    "per_ip": s.refused_per_ip,
                    "bad_request": s.bad_requests,
                    "body_timeout": s.body_timeouts,
                    "no_backend": s.bad_gateway,
                    "gateway_timeout": s.gateway_timeout,
                },
            },
            "adaptive": self.cfg.adaptive.as_str(),
            "max_backend_conns": max,
            "backends": backends,
        })
    }

    pub(super) fn status_page(&self) -> String {
        let mut phases = [0usize; 5];
        for t in self.clients.tokens() {
            if let Some(c) = self.clients.get(t) {
                phases[c.state.index()] += 1;
            }
        }
        let s = &self.stats;
        let mut out = format!(
            "modus director\nuptime_s: {}\nconnections: {}\n",
            self.started.elapsed().as_secs(),
            self.clients.len()
        );
        for (name, n) in ClientState::NAMES.iter().zip(phases) {
            out.push_str(&format!("state {name}: {n}\n"));
        }
        out.push_str(&format!(
            "queued: {}\naccepted: {}\nrequests: {}\nqueued_total: {}\nbusy_pages: {}\nbad_requests: {}\n\
             bad_gateway: {}\ngateway_timeout: {}\nrefused_per_ip: {}\nrefused_total: {}\n",
            self.queue.len(),
            s.accepted,
            s.requests,
            s.queued_total,
            s.busy_pages,
            s.bad_requests,
            s.bad_gateway,
            s.gateway_timeout,
            s.refused_per_ip,
            s.refused_total,
        ));
        for b in &self.backends {
            out.push_str(&format!(
                "backend {} health={} monitor={} inflight={} limit={} idle={} conns={} served={} \
                 connect_failures={} errors={} report=[{}]\n",
                b.name,
                if b.up { "up" } else { "down" },
                b.monitor.as_str(),
                b.inflight,
                b.limit(self.cfg.max_backend_conns),
                b.idle.len(),
                b.conns,
                b.served,
                b.connect_failures,
                b.errors,
                b.monitor_detail,
            ));
        }
        out
    }
}
