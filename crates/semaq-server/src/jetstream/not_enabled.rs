//! `$JS.API` in the accounts without JetStream. nats-server imports the JetStream API
//! into every account and answers an account without JetStream with its usual response type
//! and error 10039; some requests (direct gets, pull requests, APIs it does not know) get no
//! answer at all. SemaQ answers the same, from a subscription in each such account's subjects.

use std::sync::{Arc, Weak};

use serde_json::{json, Value};

use super::api::API_PREFIX;
use super::errors::ApiError;
use super::per_account::JetStreams;
use crate::bus::Bus;
use crate::delivery::{self, FlushSet, InternalSink, Message, SubscriberRef};
use crate::router::Router;

/// Answers `$JS.API` requests in one account without JetStream.
#[derive(Debug)]
struct NotEnabled {
    /// The account's subjects, where the answer goes; weak, as the router holds this sink.
    router: Weak<Router<SubscriberRef>>,
}

/// Subscribes every account without a JetStream in `jetstreams` to `$JS.API.>`, answering as above.
pub fn start(bus: &Bus, jetstreams: &JetStreams) {
    for (name, router) in bus.account_routers().filter(|(name, _)| jetstreams.get(name).is_none()) {
        let sink = Arc::new(NotEnabled { router: Arc::downgrade(router) });
        if let Err(error) = Bus::subscribe_internal_in(router, &format!("{API_PREFIX}.>"), None, sink) {
            tracing::error!(account = %name, %error, "cannot answer JetStream requests in the account");
        }
    }
}

impl InternalSink for NotEnabled {
    fn receive(&self, message: &Message<'_>) -> bool {
        crate::delivery::receive_unbatched(self, message)
    }

    fn receive_batched(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let (Some(reply), Some(router)) = (message.reply, self.router.upgrade()) else { return true };
        let tokens: Vec<&str> = message.subject.split('.').skip(2).collect();
        let Some(body) = answer(&tokens, message.payload) else { return true };
        let body = body.to_string();
        let answer = Message { subject: reply, reply: None, headers: None, payload: body.as_bytes(), publisher: None };
        // Synchronous, as nats-server's: the answer is queued before the requester's next op.
        let matches = router.matches_uncached(reply);
        delivery::fan_out(&router, &matches, &answer, None, flush);
        true
    }
}

/// nats-server's answer to the request `$JS.API.<tokens>` in an account without JetStream.
fn answer(tokens: &[&str], payload: &[u8]) -> Option<Value> {
    let (kind, extra) = match tokens {
        ["INFO"] => ("account_info", json!({})),
        ["STREAM", "CREATE", _] => ("stream_create", json!({})),
        ["STREAM", "UPDATE", _] => ("stream_update", json!({})),
        ["STREAM", "INFO", _] => ("stream_info", json!({ "total": 0, "offset": 0, "limit": 0 })),
        ["STREAM", "DELETE", _] => ("stream_delete", json!({})),
        ["STREAM", "PURGE", _] => ("stream_purge", json!({ "purged": 0 })),
        ["STREAM", "NAMES"] => ("stream_names", json!({ "total": 0, "offset": 0, "limit": 0, "streams": null })),
        ["STREAM", "LIST"] => ("stream_list", json!({ "total": 0, "offset": 0, "limit": 0, "streams": [] })),
        ["STREAM", "MSG", "GET", _] => ("stream_msg_get", json!({})),
        ["STREAM", "MSG", "DELETE", _] => ("stream_msg_delete", json!({})),
        ["CONSUMER", "CREATE", _, ..] | ["CONSUMER", "DURABLE", "CREATE", _, _] => {
            // nats-server reads the request before it looks for JetStream.
            if let Err(error) = serde_json::from_slice::<Value>(payload) {
                return Some(ApiError::invalid_json(error).to_json(&response_type("consumer_create")));
            }
            ("consumer_create", json!({}))
        }
        ["CONSUMER", "INFO", _, _] => ("consumer_info", json!({})),
        ["CONSUMER", "DELETE", _, _] => ("consumer_delete", json!({})),
        ["CONSUMER", "PAUSE", _, _] => ("consumer_pause", json!({})),
        ["CONSUMER", "UNPIN", _, _] => ("consumer_unpin", json!({})),
        ["CONSUMER", "NAMES", _] => ("consumer_names", json!({ "total": 0, "offset": 0, "limit": 0, "consumers": [] })),
        ["CONSUMER", "LIST", _] => ("consumer_list", json!({ "total": 0, "offset": 0, "limit": 0, "consumers": [] })),
        _ => return None,
    };
    let error = ApiError { code: 503, err_code: 10039, description: "JetStream not enabled for account".into() };
    let mut body = error.to_json(&response_type(kind));
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    Some(body)
}

fn response_type(kind: &str) -> String {
    format!("io.nats.jetstream.api.v1.{kind}_response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_requests_get_error_10039_with_their_type_and_the_rest_no_answer() {
        let info = answer(&["INFO"], b"").unwrap();
        assert_eq!(info["type"], "io.nats.jetstream.api.v1.account_info_response");
        assert_eq!(info["error"]["err_code"], 10039);
        assert_eq!(answer(&["STREAM", "NAMES"], b"").unwrap()["streams"], Value::Null);
        let bad = answer(&["CONSUMER", "CREATE", "s"], b"").unwrap();
        assert_eq!(bad["error"]["err_code"], 10025, "the body is read first");
        assert_eq!(answer(&["CONSUMER", "CREATE", "s"], b"{}").unwrap()["error"]["err_code"], 10039);
        assert!(answer(&["DIRECT", "GET", "s"], b"").is_none());
        assert!(answer(&["CONSUMER", "MSG", "NEXT", "s", "c"], b"").is_none());
        assert!(answer(&["NOT", "AN", "API"], b"").is_none());
    }
}
