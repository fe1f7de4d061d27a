use super::*;

#[test]
fn rounds_interleave_servers_and_shuffle_with_the_seed() {
    let mut spec = crate::spec::load("tiny").unwrap();
    spec.repeats = 3;
    spec.sweep.clients = vec![1, 2, 4, 8];
    spec.sweep.paths = vec!["/500b.bin".into(), "/50k.bin".into()];
    let plan = schedule(&spec);
    let pairs = spec.servers.len() * 4 * 2;
    assert_eq!(plan.len(), pairs * 3);
    for (round, chunk) in plan.chunks(pairs).enumerate() {
        assert!(chunk.iter().all(|p| p.repeat == round as u32 + 1), "one round per repeat");
        let mut seen: Vec<(usize, usize, usize)> =
            chunk.iter().map(|p| (p.server, p.clients, p.path)).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), pairs, "every pair once per round");
    }
    assert_eq!(schedule(&spec), plan, "the same seed, the same order");
    spec.seed = 2;
    assert_ne!(schedule(&spec), plan, "another seed, another order");
}

#[test]
fn the_connection_axis_doubles_the_points_and_names_their_records() {
    let mut spec = crate::spec::load("tiny").unwrap();
    let plain: Vec<Coords> = schedule(&spec).iter().map(|p| p.coords(&spec)).collect();
    assert!(plain.iter().all(|c| c.connection.is_empty()), "not swept: keep-alive, unnamed");
    spec.sweep.connection = vec!["keep-alive".into(), "close".into()];
    let plan = schedule(&spec);
    assert_eq!(plan.len(), 2 * plain.len());
    let close: Vec<&Planned> = plan.iter().filter(|p| p.coords(&spec).connection == "close").collect();
    assert_eq!(close.len(), plain.len());
    let raw = raw_path(Path::new("/r"), &spec, close[0]);
    assert!(raw.to_str().unwrap().ends_with("-k1-r1.json"), "{}", raw.display());
}

#[test]
fn the_2xx_latency_leaves_the_other_answers_out() {
    let report = json!({
        "latency_us": { "p50": 300, "p99": 9000, "max": 9500 },
        "latency_2xx_us": { "p50": 4000, "p99": 9000, "max": 9500 },
    });
    assert_eq!(latency_2xx_ms(&report), [4.0, 9.0]);
    // Nothing 2xx (the empty histogram reads 0), or an older report.
    let none = json!({ "latency_2xx_us": { "p50": 0, "p99": 0, "max": 0 } });
    assert!(latency_2xx_ms(&none).iter().all(|v| v.is_nan()));
    assert!(latency_2xx_ms(&json!({ "latency_us": { "p50": 1 } })).iter().all(|v| v.is_nan()));
}

/// `held_load` from a synthetic load report: Little's law's users over
/// the clients in the closed loop, the throughput over the rate in the
/// open loop.
#[test]
fn held_load_is_the_load_held_over_the_load_named() {
    let at = crate::results::at;
    // 500 req/s at 2 ms, 16 ms think: 9 of 10 users held.
    let closed = json!({ "throughput_rps": 500.0, "held_users": 9.0, "in_flight_mean": 1.0 });
    assert!((held_load(&closed, &at(10)) - 0.9).abs() < 1e-12);
    assert!((held_load(&closed, &at(9)) - 1.0).abs() < 1e-12);
    let open = crate::results::Coords { rate: 1000, ..at(10) };
    assert!((held_load(&json!({ "throughput_rps": 450.0, "held_users": null }), &open) - 0.45).abs() < 1e-12);
    assert!(held_load(&json!({ "throughput_rps": 10.0 }), &at(4)).is_nan(), "a report before held_users");
}

#[test]
fn a_failed_point_is_nan_but_failed_and_kept_for_resume() {
    let server = crate::spec::load("tiny").unwrap().servers[0].clone();
    let (values, record) =
        failed_record(&server, &crate::results::at(4), "modus load: no request was sent", json!({}));
    let failed = METRICS.iter().position(|(m, _)| *m == "failed").unwrap();
    assert_eq!(values[failed], 1.0);
    assert!(values.iter().enumerate().all(|(i, v)| i == failed || v.is_nan()), "{values:?}");
    assert_eq!(record["failure"], "modus load: no request was sent");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    std::fs::write(&path, record.to_string()).unwrap();
    let back = read_raw(&path).unwrap();
    assert_eq!(back[failed], 1.0);
    assert!(back[0].is_nan(), "throughput: not a measured zero");
    let raw = Path::new("/r/raw/pool-c4-p0-u0-r1.json");
    assert_eq!(access_log_path(raw), Path::new("/r/raw/pool-c4-p0-u0-r1-access.log"));
}

#[test]
fn a_measured_point_is_kept_for_resume() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    let named: serde_json::Map<String, Value> =
        METRICS.iter().enumerate().map(|(i, (m, _))| (m.to_string(), json!(i as f64))).collect();
    std::fs::write(&path, json!({ "point": named }).to_string()).unwrap();
    assert_eq!(read_raw(&path), Some((0..METRICS.len()).map(|i| i as f64).collect()));
    std::fs::write(&path, "{\"point\": {}}").unwrap();
    assert_eq!(read_raw(&path), None, "an incomplete record is measured again");
}
