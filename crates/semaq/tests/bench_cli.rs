//! The level benches end to end: each starts its own semaq-server, publishes to streams of every
//! level it compares, and prints its table (small runs: these check the benches work, not figures).

mod support;

use std::process::Command;

use support::{ok, server_path, stdout_of, SemaqServer};

const SEMAQ: &str = env!("CARGO_BIN_EXE_semaq");

/// Runs `semaq bench ARGS --semaq-server <the built one>`, or `None` when it is not built.
fn bench(test: &str, args: &[&str]) -> Option<String> {
    let server = server_path();
    if !server.is_file() {
        eprintln!("skipping {test}: {} is not built (cargo build -p semaq-server)", server.display());
        return None;
    }
    let output = Command::new(SEMAQ).arg("bench").args(args).arg("--semaq-server").arg(server).output();
    Some(stdout_of(&ok(output.expect("semaq runs"))))
}

#[test]
fn js_pub_levels_prints_every_level_with_cpu_per_message_and_the_target_line() {
    let args = ["js-pub-levels", "--rounds", "1", "--msgs", "2000", "--quiet"];
    let Some(table) = bench("js_pub_levels_prints_every_level", &args) else { return };
    for level in ["L1 ", "L1+h", "L2 ", "L3 "] {
        assert!(table.lines().any(|line| line.trim_start().starts_with(level)), "no {level} row: {table}");
    }
    assert!(table.contains("server µs") && table.contains("client µs"), "{table}");
    assert!(table.contains("L3 / L1 with the same messages: "), "{table}");
}

#[test]
fn provenance_compares_l4_with_l1_and_verifies_a_filled_stream_online_and_offline() {
    let args = ["provenance", "--rounds", "1", "--msgs", "2000", "--verify-msgs", "3000"];
    let Some(output) = bench("provenance_compares_l4_with_l1", &args) else { return };
    assert!(output.contains("L4/L1"), "{output}");
    assert!(output.contains("verify: filled 3,000 messages"), "{output}");
    for how in ["verify online : 3,000 messages", "verify offline: 3,000 messages"] {
        assert!(output.contains(how), "no {how:?}: {output}");
    }
}

#[test]
fn js_pipeline_consumes_every_message_while_publishing_and_reports_latency() {
    let Some(server) = SemaqServer::start("js_pipeline_consumes_every_message") else { return };
    let report = stdout_of(&ok(server.semaq(&["bench", "js-pipeline", "--msgs", "3000", "--quiet"])));
    assert!(report.contains("p99"), "{report}");
    assert!(!report.contains("PROBLEM"), "{report}");
    assert!(report.contains("published 3,000"), "{report}");
}
