//! `semaq chaos crash` end to end: a short crash loop on a real semaq-server passes, and the same
//! loop on nats-server 2.9, which confirms double acks before saving them, is caught forgetting
//! confirmed acks (so the check can fail).

mod support;

use semaq_testkit::{nats_server_path, semaq_server_path};
use support::{ok, run, semaq_command, stdout_of};

#[test]
fn a_short_crash_loop_on_semaq_loses_duplicates_and_forgets_nothing() {
    let mut command = semaq_command(&["chaos", "crash", "--cycles", "4", "--cycle-ms-max", "600"]);
    command.arg("--semaq-server").arg(semaq_server_path());
    let report = stdout_of(&ok(run(command)));
    assert!(report.contains("lost: 0, duplicates: 0, confirmed-ack regressions: 0"), "{report}");
    assert!(report.contains("chaos crash on semaq, L1: 4 cycles"), "{report}");
}

#[test]
fn a_short_crash_loop_on_an_exactly_once_stream_with_a_schema_passes_too() {
    let mut command = semaq_command(&["chaos", "crash", "--level", "3", "--cycles", "4", "--cycle-ms-max", "600"]);
    command.arg("--semaq-server").arg(semaq_server_path());
    let report = stdout_of(&ok(run(command)));
    assert!(report.contains("lost: 0, duplicates: 0, confirmed-ack regressions: 0"), "{report}");
    assert!(report.contains("chaos crash on semaq, L3: 4 cycles"), "{report}");
}

#[test]
fn the_loop_catches_a_server_that_forgets_confirmed_acks() {
    let mut command = semaq_command(&["chaos", "crash", "--nats", "--cycles", "6", "--cycle-ms-max", "1500"]);
    command.arg("--nats-server").arg(nats_server_path());
    let output = run(command);
    let report = stdout_of(&output);
    assert!(!output.status.success(), "nats-server passed the crash loop: {report}");
    assert!(!report.contains("confirmed-ack regressions: 0"), "{report}");
}
