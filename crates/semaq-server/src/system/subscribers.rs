//! Subscriber counts, as nats-server gives them: `$SYS.REQ.ACCOUNT.NSUBS` (`nsubsRequest`, the
//! interest count one server asks the others for, body `{"acc", "subject", "queue"}`) and
//! `$SYS.DEBUG.SUBSCRIBERS` (`debugSubscribers`, body `<subject> [<queue>]`). Both answer a bare
//! JSON number and count client subscriptions only: the server's own are not interest.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use semaq_wire::subject;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::delivery::{Sink, Subscription};
use crate::limits;
use crate::monitor::Monitor;
use crate::sys_events::account_of;

/// nats-server's `accNumSubsReq`; its queue is a Go `[]byte`, so base64 in JSON.
#[derive(Debug, Deserialize)]
struct NsubsRequest {
    #[serde(rename = "acc")]
    account: String,
    subject: String,
    #[serde(default)]
    queue: Option<String>,
}

/// The answer to `$SYS.REQ.ACCOUNT.NSUBS`: how many of the account's client subscriptions the
/// body's subject reaches; `None`, as nats-server gives none, for a body it cannot read or an
/// account without connections here.
pub fn nsubs(monitor: &Monitor, payload: &[u8]) -> Option<Value> {
    let request: NsubsRequest = serde_json::from_slice(payload).ok()?;
    let queue = match request.queue {
        Some(queue) => Some(STANDARD.decode(queue).ok()?),
        None => None,
    };
    monitor.bus.account_router(&request.account)?;
    let connected = monitor.bus.clients.open().iter().any(|client| account_of(client) == request.account);
    connected.then(|| json!(count(monitor, &request.account, &request.subject, queue.as_deref())))
}

/// Where a client asks how many subscriptions a subject reaches in its account.
pub const DEBUG_SUBSCRIBERS: &str = "$SYS.DEBUG.SUBSCRIBERS";

/// The answer to `$SYS.DEBUG.SUBSCRIBERS` about `account`, the asker's (the system account for
/// a client of its own, the importer for a request that came through a service import, as
/// nats-server reads the importer from `Nats-Request-Info`): the subscriptions of that account
/// that `<subject> [<queue>]` reaches.
pub fn debug_subscribers(monitor: &Monitor, account: &str, payload: &[u8]) -> Value {
    let text = String::from_utf8_lossy(payload);
    // Split on each single space, as nats-server does: two spaces make an empty queue name.
    let mut args = text.trim().split(' ');
    let wanted = args.next().unwrap_or_default();
    let queue = args.next().map(str::as_bytes);
    json!(count(monitor, account, wanted, queue))
}

/// Client subscriptions of `account` counted as nats-server's `totalSubs` does: for a literal
/// subject those it reaches (queue subscriptions of `queue` alone when given); for a filter,
/// those whose own filter lies within it (with `queue`, those whose queue, or none, is `queue`).
fn count(monitor: &Monitor, account: &str, wanted: &str, queue: Option<&[u8]>) -> usize {
    let Some(router) = monitor.bus.account_router(account) else { return 0 };
    let literal = !subject::has_wildcard(wanted);
    if literal && !subject::is_routable(wanted) {
        return 0;
    }
    let counted = |subscription: &Subscription| {
        let reached = match literal {
            true => subject::matches(&subscription.subject, wanted),
            false => subject::is_subset(&subscription.subject, wanted),
        };
        let own_queue = subscription.queue.as_deref().map(str::as_bytes);
        let in_queue = match queue {
            None => true,
            Some(_) if literal && own_queue.is_none() => false,
            Some(queue) => own_queue.unwrap_or_default() == queue,
        };
        reached && in_queue && matches!(subscription.sink, Sink::Client(_))
    };
    router.subscribers(limits::SUBSCRIBER_COUNT_SCAN_SUBSCRIPTIONS_MAX).iter().filter(|s| counted(&s.0)).count()
}
