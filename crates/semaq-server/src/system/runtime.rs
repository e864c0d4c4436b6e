//! The `$SYS.REQ.SERVER` services about the server's insides, `PROFILEZ`, `EXPVARZ`, `IPQUEUESZ`
//! and `RAFTZ`, answered as nats-server answers them where the thing does not exist here: SemaQ
//! is neither a Go program (no pprof profiles, no Go `memstats`) nor clustered (no Raft groups).

use serde_json::{json, Value};

use semaq_wire::clock::go_duration_text;

use crate::{limits, monitor};

/// The one internal queue SemaQ reports: the `$SYS` requests waiting for the task that answers
/// them (nats-server reports its system receive queue among its own).
pub const SYSTEM_REQUESTS_QUEUE: &str = "$SYS requests";

/// nats-server's `ProfilezStatus` for the body's profile `name`: none is named, a CPU profile's
/// `duration` (Go nanoseconds) is out of nats-server's range, or none of that name exists
/// (SemaQ has no Go profiles, CPU or other); `profile` is then Go's nil bytes.
pub fn profilez(options: &Value) -> Value {
    let duration_ns = options.get("duration").and_then(Value::as_i64).unwrap_or(0);
    let max_ns = i64::try_from(limits::PROFILEZ_CPU_DURATION_MAX.as_nanos()).unwrap_or(i64::MAX);
    let error = match options.get("name").and_then(Value::as_str).unwrap_or_default() {
        "" => "Profile name not specified".to_string(),
        "cpu" if duration_ns <= 0 || duration_ns > max_ns => {
            format!("Duration {} should be between 0s and {}", go_duration_text(duration_ns), go_duration_text(max_ns))
        }
        name => format!("Profile {name:?} not found"),
    };
    json!({ "profile": null, "error": error })
}

/// nats-server's `ExpvarzStatus`: `cmdline` is the command line, as Go's expvar gives it;
/// `memstats` holds the one memory figure SemaQ has, its resident set size, instead of Go's
/// runtime statistics.
pub fn expvarz() -> Value {
    let cmdline: Vec<String> = std::env::args_os().map(|arg| arg.to_string_lossy().into_owned()).collect();
    json!({ "memstats": { "rss_bytes": monitor::resident_memory_bytes() }, "cmdline": cmdline })
}

/// nats-server's `IpqueueszStatus` of the `$SYS` request queue, which holds `pending` requests
/// besides the one in progress, this one: busy, so listed with or without the body's `all`,
/// unless its name does not contain the body's `filter`.
pub fn ipqueuesz(options: &Value, pending: usize) -> Value {
    let filter = options.get("filter").and_then(Value::as_str).unwrap_or_default();
    let mut queues = json!({});
    if SYSTEM_REQUESTS_QUEUE.contains(filter) {
        queues[SYSTEM_REQUESTS_QUEUE] = json!({ "pending": pending, "in_progress": 1 });
    }
    queues
}

/// nats-server's `RaftzStatus` (account → group → detail) of a server without Raft groups.
pub fn raftz() -> Value {
    json!({})
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NS_PER_S: i64 = 1_000_000_000;

    #[test]
    fn profilez_names_the_missing_profile_as_nats_server_words_it() {
        assert_eq!(profilez(&json!({}))["error"], "Profile name not specified");
        assert_eq!(
            profilez(&json!({ "name": "heap" })),
            json!({ "profile": null, "error": "Profile \"heap\" not found" })
        );
    }

    #[test]
    fn a_cpu_profile_duration_out_of_range_is_refused_in_gos_duration_words() {
        assert_eq!(profilez(&json!({ "name": "cpu" }))["error"], "Duration 0s should be between 0s and 15s");
        let long = json!({ "name": "cpu", "duration": 20 * NS_PER_S });
        assert_eq!(profilez(&long)["error"], "Duration 20s should be between 0s and 15s");
        assert_eq!(profilez(&json!({ "name": "cpu", "duration": NS_PER_S }))["error"], "Profile \"cpu\" not found");
    }

    #[test]
    fn ipqueuesz_lists_the_request_queue_unless_the_filter_leaves_it_out() {
        let listed = json!({ SYSTEM_REQUESTS_QUEUE: { "pending": 2, "in_progress": 1 } });
        assert_eq!(ipqueuesz(&json!({}), 2), listed);
        assert_eq!(ipqueuesz(&json!({ "filter": "requests" }), 2), listed);
        assert_eq!(ipqueuesz(&json!({ "all": true, "filter": "recvQ" }), 0), json!({}));
    }
}
