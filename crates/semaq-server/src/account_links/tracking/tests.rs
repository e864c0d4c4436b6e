use super::*;

fn block(lines: &[&str]) -> Vec<u8> {
    let mut out = b"NATS/1.0\r\n".to_vec();
    for line in lines {
        out.extend_from_slice(line.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn a_full_percentage_samples_every_request_without_trigger_headers() {
    for _ in 0..100 {
        assert_eq!(sample(Sampling::Percent(100), None), Some(TriggerHeaders::new()));
    }
}

#[test]
fn a_percentage_samples_about_that_share_of_requests() {
    let sampled = (0..4000).filter(|_| sample(Sampling::Percent(25), None).is_some()).count();
    assert!((700..1300).contains(&sampled), "{sampled} of 4000 at 25%");
}

#[test]
fn header_sampling_follows_the_traceparent_flag_and_reports_the_trigger() {
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let sampled = block(&[&format!("traceparent: {parent}"), "tracestate: a=b", "App: x"]);
    let header = sample(Sampling::Headers, Some(&sampled)).expect("sampled");
    let expected: TriggerHeaders =
        [("Traceparent".to_string(), vec![parent.to_string()]), ("Tracestate".to_string(), vec!["a=b".to_string()])]
            .into();
    assert_eq!(header, expected, "only the tracing headers, by canonical name");
    let unsampled = block(&["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"]);
    assert_eq!(sample(Sampling::Headers, Some(&unsampled)), None);
    assert_eq!(sample(Sampling::Headers, Some(&block(&["App: x"]))), None);
    assert_eq!(sample(Sampling::Headers, None), None);
}

#[test]
fn a_percentage_that_passes_a_request_by_still_samples_it_when_its_headers_ask() {
    let sampled = block(&["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"]);
    assert!((0..200).all(|_| sample(Sampling::Percent(1), Some(&sampled)).is_some()));
}

#[test]
fn b3_and_uber_headers_sample_as_nats_server_reads_them() {
    let b3 = block(&["X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7", "X-B3-SpanId: e457b5a2e4d86bd1"]);
    let header = sample(Sampling::Headers, Some(&b3)).expect("a trace id leaves sampling to the recipient");
    assert_eq!(header.keys().collect::<Vec<_>>(), ["X-B3-Spanid", "X-B3-Traceid"]);
    assert_eq!(sample(Sampling::Headers, Some(&block(&["X-B3-Sampled: 0", "X-B3-TraceId: 1"]))), None);
    assert_eq!(sample(Sampling::Headers, Some(&block(&["B3: 0"]))), None);
    assert_eq!(sample(Sampling::Headers, Some(&block(&["B3: 80f1-e457-0-05e3"]))), None);
    assert!(sample(Sampling::Headers, Some(&block(&["B3: 80f1-e457-1-05e3"]))).is_some());
    assert!(sample(
        Sampling::Headers,
        Some(&block(&["Uber-Trace-Id: 479fefe9525eddb:5adb976bfc1f95c1:479fefe9525eddb:1"]))
    )
    .is_some());
    assert_eq!(sample(Sampling::Headers, Some(&block(&["Uber-Trace-Id: 479fefe9525eddb:5adb976bfc1f95c1:0:0"]))), None);
}

#[test]
fn canonical_names_are_gos() {
    assert_eq!(canonical("x-b3-traceid"), "X-B3-Traceid");
    assert_eq!(canonical("TRACEPARENT"), "Traceparent");
}

#[test]
fn the_request_info_header_replaces_a_forged_one_and_keeps_the_rest() {
    let forged = block(&["Nats-Request-Info: {\"acc\":\"SYS\"}", "App: kept"]);
    let out = with_header(Some(&forged), REQUEST_INFO, "{\"acc\":\"B\"}");
    let headers = Headers::new(&out);
    assert_eq!(headers.get(REQUEST_INFO), Some("{\"acc\":\"B\"}"));
    assert_eq!(headers.get("App"), Some("kept"));
    assert_eq!(headers.iter().filter(|(name, _)| *name == REQUEST_INFO).count(), 1);
    assert_eq!(Headers::new(&with_header(None, REQUEST_INFO, "{}")).get(REQUEST_INFO), Some("{}"));
}

fn request() -> Request {
    request_within(Duration::from_secs(60))
}

fn request_within(threshold: Duration) -> Request {
    let requestor = ClientInfo { acc: "B".into(), ..ClientInfo::default() };
    Request::new(requestor, TriggerHeaders::new(), "latency.svc", Weak::new(), threshold)
}

fn json(result: &ServiceLatency) -> serde_json::Value {
    serde_json::from_slice(&result.to_json()).expect("JSON")
}

fn keys(value: &serde_json::Value) -> Vec<&str> {
    let mut keys: Vec<&str> = value.as_object().expect("an object").keys().map(String::as_str).collect();
    keys.sort_unstable();
    keys
}

#[test]
fn an_answered_request_reports_nats_servers_fields() {
    let responder = ClientInfo { acc: "A".into(), id: Some(6), ..ClientInfo::default() };
    let result = json(&ServiceLatency::answered(&request(), Some(responder)));
    assert_eq!(
        keys(&result),
        ["id", "requestor", "responder", "service", "start", "status", "system", "timestamp", "total", "type"]
    );
    assert_eq!(result["type"], SERVICE_LATENCY_TYPE);
    assert_eq!(result["status"], 200);
    assert_eq!(result["requestor"], serde_json::json!({"acc": "B"}), "only the account unless shared");
    assert_eq!(result["responder"], serde_json::json!({"acc": "A", "id": 6}));
    assert_eq!(result["id"].as_str().map(str::len), Some(22));
    assert!(result["total"].as_i64() >= result["service"].as_i64());
}

#[test]
fn errors_carry_nats_servers_status_and_description_and_no_responder() {
    let request = request();
    for (result, status, description) in [
        (ServiceLatency::unavailable(&request), 503, "Service Unavailable"),
        (ServiceLatency::timed_out(&request), 504, "Service Timeout"),
        (ServiceLatency::interest_lost(&request), 408, "Request Timeout"),
        (ServiceLatency::bad_request(&request), 400, "Bad Request"),
    ] {
        let result = json(&result);
        assert_eq!((result["status"].as_u64(), result["description"].as_str()), (Some(status), Some(description)));
        assert!(result.get("responder").is_none());
        assert_eq!((result["service"].as_i64(), result["total"].as_i64()), (Some(0), Some(0)));
    }
}

#[test]
fn the_tracked_table_is_bounded_and_gives_up_requests_past_their_deadline_in_order() {
    let tracked = Tracked::new(2);
    let start = Instant::now();
    assert!(tracked.insert("late", request_within(Duration::from_millis(200))), "the first deadline wakes the timer");
    assert!(tracked.insert("soon", request_within(Duration::from_millis(100))), "an earlier one wakes it again");
    let first = tracked.next_deadline().expect("a deadline");
    assert!(first >= start + Duration::from_millis(100) && first < start + Duration::from_millis(200), "soon's");
    assert!(!tracked.insert("over", request()));
    assert_eq!(tracked.len(), 2, "past the bound new requests go unmeasured");
    assert!(!tracked.has_room());
    assert!(tracked.expired(start).is_empty(), "none is past its deadline yet");
    let expired = tracked.expired(start + Duration::from_millis(150));
    assert_eq!(expired.iter().map(|(key, _)| &**key).collect::<Vec<_>>(), ["soon"]);
    assert!(tracked.take("soon").is_none(), "an expired request is answered no more");
    assert!(tracked.take("late").is_some() && tracked.take("late").is_none());
    assert!(tracked.expired(start + Duration::from_secs(1)).is_empty(), "a taken request has no deadline left");
    assert!(tracked.is_empty());
}

#[test]
fn a_request_whose_requester_stops_listening_is_given_up() {
    let tracked = Tracked::new(10);
    let importer = std::sync::Arc::new(Router::<SubscriberRef>::default());
    let listener = crate::bus::Bus::subscribe_internal_in(&importer, "inbox.b", None, std::sync::Arc::new(Nothing));
    let listener = listener.expect("subscribed");
    tracked.insert("_R_.x.T", request().replying_to(Some("inbox.b"), std::sync::Arc::downgrade(&importer)));
    tracked.insert("_R_.y.T", request());
    let unheard = request().replying_to(Some("inbox.nobody"), std::sync::Arc::downgrade(&importer));
    assert!(unheard.requester.is_none(), "nobody listened, so no interest can be lost");
    tracked.insert("_R_.z.T", unheard);
    assert!(tracked.interest_lost().is_empty(), "the requester listens; requests without one are kept");
    importer.remove("inbox.b", None, &SubscriberRef(listener));
    let lost = tracked.interest_lost();
    assert_eq!(lost.iter().map(|(key, _)| &**key).collect::<Vec<_>>(), ["_R_.x.T"]);
    assert_eq!(tracked.len(), 2);
}

/// A sink that takes everything and keeps nothing.
#[derive(Debug)]
struct Nothing;

impl crate::delivery::InternalSink for Nothing {
    fn receive(&self, _: &crate::delivery::Message<'_>) -> bool {
        true
    }
}
