//! The level benches end to end: each starts its own semaq-server, publishes to streams of every
//! level it compares, and prints its table (small runs: these check the benches work, not figures).

mod support;

use semaq_testkit::{nats_server_path, semaq_server_path, SemaqServer};
use support::{ok, run, semaq_command, stdout_of, Semaq};

/// Runs `semaq bench ARGS --semaq-server <the built one>` (a missing one fails the test).
fn bench(args: &[&str]) -> String {
    let mut command = semaq_command(&[&["bench"], args].concat());
    command.arg("--semaq-server").arg(semaq_server_path());
    stdout_of(&ok(run(command)))
}

#[test]
fn js_pub_levels_prints_every_level_with_cpu_per_message_and_the_target_line() {
    let args = ["js-pub-levels", "--rounds", "1", "--msgs", "2000", "--quiet"];
    let table = bench(&args);
    for level in ["L1 ", "L1+h", "L2 ", "L3 "] {
        assert!(table.lines().any(|line| line.trim_start().starts_with(level)), "no {level} row: {table}");
    }
    assert!(table.contains("server µs") && table.contains("client µs"), "{table}");
    assert!(table.contains("L3 / L1 with the same messages: "), "{table}");
}

#[test]
fn observe_runs_both_servers_sends_traces_scrapes_metrics_and_prints_the_ratios() {
    let args = ["observe", "--rounds", "1", "--msgs", "3000", "--sample", "1", "--scrape-interval", "100ms"];
    let output = bench(&args);
    for scenario in ["pubsub", "js-pub"] {
        let line = output.lines().find(|l| l.trim_start().starts_with(scenario) && l.contains("observed / plain"));
        assert!(line.is_some_and(|l| l.contains("PASS") || l.contains("FAIL")), "no {scenario} verdict: {output}");
    }
    let exported = output.lines().find(|l| l.contains("OTLP requests")).unwrap_or_default();
    assert!(!exported.trim_start().starts_with("observed side: 0 OTLP"), "{output}");
    assert!(exported.contains(", 0 failed"), "every /metrics scrape answered: {output}");
}

#[test]
fn provenance_compares_l4_with_l1_and_verifies_a_filled_stream_online_and_offline() {
    let args = ["provenance", "--rounds", "1", "--msgs", "2000", "--verify-msgs", "3000"];
    let output = bench(&args);
    assert!(output.contains("L4/L1"), "{output}");
    assert!(output.contains("verify: filled 3,000 messages"), "{output}");
    for how in ["verify online : 3,000 messages", "verify offline: 3,000 messages"] {
        assert!(output.contains(how), "no {how:?}: {output}");
    }
}

#[test]
fn ws_runs_four_arrangements_on_both_servers_with_both_clients_cpu_figures_and_a_verdict() {
    let nats = nats_server_path();
    let args = ["ws", "--rounds", "1", "--msgs", "3000", "--nats-server", nats.to_str().unwrap_or("nats-server")];
    let output = bench(&args);
    for client in ["with the lean wire client", "with async-nats clients"] {
        let table = output.split(client).nth(1).unwrap_or_default();
        for arrangement in ["tcp → tcp", "tcp → ws", "ws → tcp", "ws → ws"] {
            let row = table.lines().find(|line| line.trim_start().starts_with(arrangement));
            let figures = row.map(|line| line.split_whitespace().filter(|word| word.ends_with('×')).count());
            assert_eq!(figures, Some(2), "{client}: no {arrangement} row with both servers' ratios: {output}");
        }
    }
    let verdict = output.lines().find(|line| line.contains("pubsub over WebSocket / TCP"));
    assert!(verdict.is_some_and(|line| line.contains("PASS") || line.contains("FAIL")), "{output}");
}

#[test]
fn js_pipeline_consumes_every_message_while_publishing_and_reports_latency() {
    let server = SemaqServer::start();
    let report = stdout_of(&ok(server.semaq(&["bench", "js-pipeline", "--msgs", "3000", "--quiet"])));
    assert!(report.contains("p99"), "{report}");
    assert!(!report.contains("PROBLEM"), "{report}");
    assert!(report.contains("published 3,000"), "{report}");
}

#[test]
fn intent_rr_prints_both_sides_the_ratios_and_the_target_lines() {
    let table = bench(&["intent-rr", "--rounds", "1", "--duration", "500ms", "--concurrency", "8"]);
    assert!(table.contains("(plain async-nats agents)"), "plain agents by default: {table}");
    assert_intent_rr_table(&table);
}

#[test]
fn intent_rr_runs_sdk_agents_when_asked() {
    let args = ["intent-rr", "--sdk-agents", "--rounds", "1", "--duration", "500ms", "--concurrency", "8"];
    let table = bench(&args);
    assert!(table.contains("(SDK agents)"), "{table}");
    assert_intent_rr_table(&table);
}

fn assert_intent_rr_table(table: &str) {
    for side in ["queue group", "intent     "] {
        let rows =
            table.lines().map(str::trim_start).filter(|line| line.starts_with("1 ") || line.starts_with("median"));
        let with_figures = rows.filter(|line| line.contains(side) && (line.contains("µs") || line.contains(" ms")));
        assert_eq!(with_figures.count(), 2, "a round row and a median row for {side:?}: {table}");
    }
    assert!(table.contains("intent / queue group: p50 "), "{table}");
    assert!(table.contains("(target ≤ 1.10×)") && table.contains("(target ≥ 0.90×)"), "{table}");
    assert!(!table.contains("failed"), "{table}");
}

#[test]
fn adapt_prints_the_share_curve_a_verdict_per_target_and_saves_the_plot() {
    let dir = tempfile::tempdir().unwrap();
    let plot = dir.path().join("adapt.png");
    let short = ["--warm-seconds", "1", "--sick-seconds", "2", "--heal-seconds", "2", "--rate", "200"];
    let output = bench(&[&["adapt"], &short[..], &["--plot", plot.to_str().unwrap()]].concat());
    assert!(output.contains("phase A: adapt-1 errors on half its requests"), "{output}");
    assert!(output.contains("phase B: adapt-4 10× slower"), "{output}");
    let rows = output.lines().filter(|line| line.contains('%') && line.contains("FAULT")).count();
    assert_eq!(rows, 4, "two fault seconds per phase, each a row of shares: {output}");
    let verdicts = output.lines().filter(|line| line.starts_with("PASS ") || line.starts_with("FAIL ")).count();
    assert_eq!(verdicts, 4, "a drop and a recovery line per phase: {output}");
    let png = std::fs::read(&plot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG was saved");
}

#[test]
fn scale_quick_draws_every_curve_for_both_servers_with_verdicts_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let nats = nats_server_path();
    let args = ["scale", "--quick", "--plot-dir", plots.to_str().unwrap(), "--nats-server", nats.to_str().unwrap()];
    let output = bench(&args);
    for curve in ["subs:", "stored:", "idle:", "filters:"] {
        assert!(output.lines().any(|line| line.starts_with(curve)), "no {curve} curve: {output}");
    }
    // Every row of every table: a size, a figure from each server, their ratio. A CPU time
    // below the clock's resolution (10 ms over a quick run) reads 0.00 and has no ratio, nor
    // has an RSS growth too small to see over a quick run's few messages.
    let mut figure = "";
    let mut rows = Vec::new();
    for line in output.lines() {
        if line.starts_with("  ") && !line.starts_with("    ") {
            figure = line.trim();
        } else if line.split_whitespace().next().is_some_and(|n| n.replace(',', "").parse::<u64>().is_ok()) {
            rows.push((figure, line.trim_end()));
        }
    }
    let expected_rows = 2 * (2 + 5 + 2 + 1);
    assert_eq!(rows.len(), expected_rows, "two sizes for each of 10 figures: {output}");
    let unmeasurable = |figure: &str| figure.contains("CPU") || figure.contains("per stored message");
    let complete = |(figure, row): &(&str, &str)| row.ends_with('×') || (unmeasurable(figure) && row.ends_with(" -"));
    assert!(rows.iter().all(complete), "a figure missing: {output}");
    assert!(output.contains("semaq-server: pubsub at 100 subs / at 1: "), "{output}");
    assert!(output.contains("RSS per idle connection at 50: semaq-server / nats-server: "), "{output}");
    assert!(output.contains("semaq-server: restart → first PubAck at 4,000 / at 1,000"), "{output}");
    assert!(output.contains("semaq-server: RSS growth per stored message at 4,000: "), "{output}");
    assert!(output.contains("restart → first PubAck at 4,000: semaq-server / nats-server: "), "{output}");
    let saved = std::fs::read_dir(&plots).unwrap().filter_map(|entry| entry.ok()).collect::<Vec<_>>();
    assert_eq!(saved.len(), 10, "a PNG per figure");
    for entry in saved {
        assert!(std::fs::read(entry.path()).unwrap().starts_with(b"\x89PNG"), "{}", entry.path().display());
    }
}

#[test]
fn compare_with_split_cpus_runs_kv_on_both_servers_and_says_which_cpus_each_side_had() {
    let nats = nats_server_path();
    let nats = nats.to_str().unwrap_or("nats-server");
    let args = ["compare", "--split-cpus", "--scenarios", "kv", "--rounds", "1", "--quiet", "--nats-server", nats];
    let table = bench(&args);
    assert!(table.contains("server on CPU ") && table.contains(", clients on CPU "), "{table}");
    let ratio = |line: &str| line.split_whitespace().last().and_then(|word| word.parse::<f64>().ok());
    let kv_rows = table.lines().filter(|line| line.starts_with("kv ") && ratio(line).is_some());
    assert_eq!(kv_rows.count(), 2, "put and get rows with a ratio: {table}");
}
