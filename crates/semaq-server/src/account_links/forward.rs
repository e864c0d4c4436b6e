//! Imports at work: internal subscriptions that carry messages from one account's subject space
//! into another's.
//!
//! - A stream import subscribes in the exporting account to the imported subject and publishes
//!   what it receives in the importing account, under the mapped subject.
//! - A service import subscribes in the importing account to the local subject and publishes
//!   the request in the exporting account under the export's subject, its reply subject swapped
//!   for an `_R_.` one ([`Responses`]); one subscription to `_R_.>` in each exporting account
//!   sends the responses back to the requesters.
//!
//! Forwarding runs on the publisher's thread, inside its fan-out; a thread-local hop count
//! bounds how far one publish may travel from account to account.
//!
//! A service request carries its requester's details to the responder in `Nats-Request-Info`
//! (detailed when the import shares them), and is measured when its export tracks latency
//! ([`super::tracking`]).
//!
//! An import admitted by an activation token that expires ends then ([`super::expiry`]): it
//! stays subscribed but forwards nothing, as nats-server keeps an import it marks invalid.

use std::cell::Cell;
use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::expiry::{Expiries, Validity};
use super::responses::Responses;
use super::tracking::{self, ClientInfo, Request, ServiceLatency, Tracked, REQUEST_INFO};
use crate::bus::Bus;
use crate::client::Clients;
use crate::delivery::{self, FlushSet, InternalSink, Message, SubscriberRef};
use crate::imports::{Kind, Latency, Link, Mapping, ResponseType, REPLY_PREFIX};
use crate::limits;
use crate::mappings::{AccountMappings, SubjectMappings};
use crate::router::{Router, RouterError};
use crate::trace::msgtrace::{TRACE_DEST, TRACE_DISABLED};
use crate::trace::{self, Crossing};

type AccountRouter = Router<SubscriberRef>;

thread_local! {
    /// Imports the message being delivered on this thread has crossed.
    static HOPS: Cell<usize> = const { Cell::new(0) };
}

/// Why imports could not be put in place.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// An account named by an import has no subject space.
    #[error("account {0:?} has no subject space")]
    NoAccount(String),
    /// An internal subscription was refused.
    #[error("import subscription: {0}")]
    Subscribe(#[from] RouterError),
}

/// What every service import of a server shares: who its clients are, the server's name (in
/// client details), the reply mappings and the requests being measured.
#[derive(Debug)]
struct Services {
    clients: Arc<Clients>,
    server: String,
    responses: Arc<Responses>,
    tracked: Tracked,
    /// Wakes the timer when a new request's deadline comes first.
    rearm: Arc<tokio::sync::Notify>,
}

impl Services {
    /// The details of client `id`, detailed or not; `None` for the server's own messages.
    fn client_info(&self, id: Option<u64>, detailed: bool) -> Option<ClientInfo> {
        self.clients.get(id?).map(|client| ClientInfo::of(&client, &self.server, detailed))
    }

    /// Measures `request`, whose response comes on `reply`, waking the timer when its deadline
    /// comes first.
    fn track(&self, reply: &str, request: Request) {
        if self.tracked.insert(reply, request) {
            self.rearm.notify_one();
        }
    }

    /// Publishes `result` of `request` on its results subject in the exporting account.
    fn report(&self, request: &Request, result: &ServiceLatency, flush: &mut FlushSet) {
        let Some(exporter) = request.exporter.upgrade() else { return };
        let payload = result.to_json();
        let message =
            Message { subject: &request.results, reply: None, headers: None, payload: &payload, publisher: None };
        publish_hop(&exporter, &message, flush);
    }

    /// Reports the measured requests past their deadline (`504`) and, when `interest`, those
    /// whose requester stopped listening (`408`), forgetting their reply mappings so a late
    /// response goes nowhere, as nats-server drops them.
    fn check_tracked(&self, now: Instant, interest: bool) {
        let mut flush = FlushSet::default();
        for (key, request) in self.tracked.expired(now) {
            self.responses.forget(&key);
            self.report(&request, &ServiceLatency::timed_out(&request), &mut flush);
        }
        let lost = if interest { self.tracked.interest_lost() } else { Vec::new() };
        for (key, request) in lost {
            self.responses.forget(&key);
            self.report(&request, &ServiceLatency::interest_lost(&request), &mut flush);
        }
        flush.flush();
    }
}

/// Checks `services`' measured requests until the server (its imports) goes: at the first
/// deadline, when a client unsubscribes or disconnects (`interest_dropped`, as nats-server
/// notices an unsubscribe at once), and every `TRACKED_RECHECK_INTERVAL` for interest lost
/// otherwise; nothing without a runtime (unit tests that send nothing).
fn start_timer(services: Weak<Services>, interest_dropped: Arc<tokio::sync::Notify>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        let Some(rearm) = services.upgrade().map(|held| held.rearm.clone()) else { return };
        let mut recheck = tokio::time::Instant::now() + limits::TRACKED_RECHECK_INTERVAL;
        loop {
            let Some(deadline) = services.upgrade().map(|held| held.tracked.next_deadline()) else { return };
            let wake_at = deadline.map_or(recheck, |d| tokio::time::Instant::from_std(d).min(recheck));
            let (interest, dropped) = tokio::select! {
                _ = tokio::time::sleep_until(wake_at) => (tokio::time::Instant::now() >= recheck, false),
                _ = interest_dropped.notified() => (true, true),
                _ = rearm.notified() => (false, false),
            };
            if interest {
                recheck = tokio::time::Instant::now() + limits::TRACKED_RECHECK_INTERVAL;
            }
            let Some(held) = services.upgrade() else { return };
            if !held.tracked.is_empty() {
                held.check_tracked(Instant::now(), interest);
            }
            drop(held);
            if dropped {
                // Under a storm of unsubscribes, one linear search per spacing, not per unsubscribe.
                tokio::time::sleep(limits::TRACKED_INTEREST_CHECK_SPACING).await;
            }
        }
    });
}

/// Puts `links` in place on `bus`, naming the server `server` in client details; returns the
/// response table of its service imports and the imports that end when their activation
/// expires. Service requests take the exporting account's `mappings`, as in nats-server.
pub fn install(
    bus: &Bus,
    links: &[Link],
    server: &str,
    mappings: &AccountMappings,
) -> Result<(Arc<Responses>, Expiries), InstallError> {
    // Mappings live at least as long as the longest response threshold.
    let thresholds = links.iter().map(|link| link.response_threshold);
    let timeout = thresholds.fold(limits::SERVICE_RESPONSE_TIMEOUT, Duration::max);
    let responses = Arc::new(Responses::new(limits::SERVICE_RESPONSES_PENDING_MAX, timeout));
    let services = Arc::new(Services {
        clients: bus.clients.clone(),
        server: server.to_string(),
        responses: responses.clone(),
        tracked: Tracked::new(limits::TRACKED_REQUESTS_MAX),
        rearm: Arc::default(),
    });
    if links.iter().any(|link| link.latency.is_some()) {
        start_timer(Arc::downgrade(&services), bus.interest_dropped.clone());
    }
    let router = |name: &str| bus.account_router(name).ok_or_else(|| InstallError::NoAccount(name.to_string()));
    let mut answering: HashSet<&str> = HashSet::new();
    let mut expiries = Expiries::default();
    for link in links {
        let (exporter, importer) = (router(&link.exporter)?, router(&link.importer)?);
        let validity = match link.expires {
            Some(at) => expiries.add(at, format!("{} {} of {}", link.kind.word(), link.mapping.from(), link.importer)),
            None => Arc::new(Validity::default()),
        };
        match link.kind {
            Kind::Stream => {
                let sink = Arc::new(StreamImport {
                    target: Arc::downgrade(importer),
                    importer: link.importer.clone(),
                    mapping: link.mapping.clone(),
                    allow_trace: link.allow_trace,
                    validity,
                });
                Bus::subscribe_internal_in(exporter, link.mapping.from(), None, sink)?;
            }
            Kind::Service => {
                let sink = Arc::new(ServiceImport {
                    target: Arc::downgrade(exporter),
                    exporter: link.exporter.clone(),
                    exporter_mappings: mappings.get(&link.exporter).cloned(),
                    source: Arc::downgrade(importer),
                    importer: link.importer.as_str().into(),
                    allow_trace: link.allow_trace,
                    mapping: link.mapping.clone(),
                    singleton: link.response == ResponseType::Singleton,
                    threshold: link.response_threshold,
                    responses: responses.clone(),
                    latency: link.latency.clone(),
                    share: link.share,
                    services: services.clone(),
                    validity,
                });
                Bus::subscribe_internal_in(importer, link.mapping.from(), None, sink)?;
                if answering.insert(&link.exporter) {
                    let sink = Arc::new(ServiceResponses { responses: responses.clone(), services: services.clone() });
                    Bus::subscribe_internal_in(exporter, &format!("{REPLY_PREFIX}>"), None, sink)?;
                }
            }
        }
        tracing::debug!(kind = link.kind.word(), from = %link.importer, to = %link.exporter, "import in place");
    }
    Ok((responses, expiries))
}

/// Publishes `message` in `router`'s account as one more hop; returns the deliveries, 0 once
/// the hop bound is reached.
fn publish_hop(router: &AccountRouter, message: &Message<'_>, flush: &mut FlushSet) -> usize {
    let hops = HOPS.with(Cell::get);
    if hops >= limits::IMPORT_HOPS_MAX {
        tracing::debug!(subject = message.subject, "import hop bound reached, not forwarded");
        return 0;
    }
    HOPS.with(|cell| cell.set(hops + 1));
    let matches = router.matches(message.subject);
    let delivered = delivery::fan_out(router, &matches, message, None, flush);
    HOPS.with(|cell| cell.set(hops));
    delivered
}

/// Delivers an exported stream's messages to the importing account.
#[derive(Debug)]
struct StreamImport {
    target: Weak<AccountRouter>,
    importer: String,
    mapping: Mapping,
    allow_trace: bool,
    validity: Arc<Validity>,
}

impl InternalSink for StreamImport {
    fn receive(&self, message: &Message<'_>) -> bool {
        delivery::receive_unbatched(self, message)
    }

    fn receive_batched(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let Some(target) = self.target.upgrade().filter(|_| !self.validity.ended()) else { return false };
        let subject = self.mapping.apply(message.subject);
        let crossing = trace::Import::Stream { account: &self.importer, to: &subject };
        let _set_aside = match trace::cross_import(crossing, self.allow_trace) {
            // nats-server counts the skipped delivery as made.
            Crossing::Skip => return true,
            Crossing::Traced => None,
            Crossing::Go(set_aside) => set_aside,
        };
        let mapped = Message { subject: &subject, publisher: None, ..*message };
        // Not delivered when nobody in the importing account listens, so a request in the
        // exporting account still learns it has no responders.
        publish_hop(&target, &mapped, flush) > 0
    }
}

/// Sends an importer's requests to the exporting account's responders.
#[derive(Debug)]
struct ServiceImport {
    target: Weak<AccountRouter>,
    exporter: String,
    /// The exporting account's subject mappings, which a request takes on entering it.
    exporter_mappings: Option<Arc<SubjectMappings>>,
    source: Weak<AccountRouter>,
    importer: Arc<str>,
    allow_trace: bool,
    mapping: Mapping,
    singleton: bool,
    threshold: Duration,
    responses: Arc<Responses>,
    latency: Option<Latency>,
    share: bool,
    services: Arc<Services>,
    validity: Arc<Validity>,
}

impl ServiceImport {
    /// The measurement `message` gets, if sampled and there is room for it.
    fn measure(&self, message: &Message<'_>, requestor: Option<&ClientInfo>) -> Option<Request> {
        let (latency, requestor) = (self.latency.as_ref()?, requestor?);
        let header = tracking::sample(latency.sampling, message.headers)?;
        let request = Request::new(requestor.clone(), header, &latency.subject, self.target.clone(), self.threshold);
        self.services.tracked.has_room().then(|| request.replying_to(message.reply, self.source.clone()))
    }
}

impl InternalSink for ServiceImport {
    fn receive(&self, message: &Message<'_>) -> bool {
        delivery::receive_unbatched(self, message)
    }

    fn receive_batched(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        if self.validity.ended() {
            // nats-server's invalid import takes the request and drops it: no "no responders".
            return true;
        }
        let Some(target) = self.target.upgrade() else { return false };
        let subject = self.mapping.apply(message.subject);
        let mapped = self.exporter_mappings.as_ref().and_then(|mappings| mappings.select(&subject));
        let subject = mapped.map_or(subject, std::borrow::Cow::Owned);
        let crossing = trace::Import::Service { account: &self.exporter, from: message.subject, to: &subject };
        let crossed = trace::cross_import(crossing, self.allow_trace);
        let (set_aside, traced) = match crossed {
            Crossing::Skip => return true,
            Crossing::Traced => (None, true),
            Crossing::Go(set_aside) => (set_aside, false),
        };
        // A client's own request gets its details; one forwarded by another import keeps those
        // it carries, as nats-server does not let a client speak for another.
        let requestor = self.services.client_info(message.publisher, self.share);
        let mut headers =
            requestor.as_ref().map(|info| tracking::with_header(message.headers, REQUEST_INFO, &info.to_json()));
        let trace_dest = match (&set_aside, traced) {
            // As nats-server, so a responder's own forwarding of it starts no trace either.
            (Some(_), _) => Some(TRACE_DISABLED.to_string()),
            // The requester's destination means nothing in the exporter's subject space.
            (None, true) => Some(self.responses.unmapped()),
            (None, false) => None,
        };
        if let Some(dest) = trace_dest {
            let current = headers.as_deref().or(message.headers);
            headers = Some(tracking::with_header(current, TRACE_DEST, &dest));
        }
        let measured = self.measure(message, requestor.as_ref());
        let reply = message.reply.map(|reply| {
            let requester = (self.source.clone(), self.importer.clone());
            self.responses.register(reply, requester, self.singleton, measured.is_some(), self.threshold)
        });
        match (&reply, measured) {
            (Some(reply), Some(request)) => self.services.track(reply, request),
            (None, Some(request)) => self.services.report(&request, &ServiceLatency::bad_request(&request), flush),
            _ => {}
        }
        let headers = headers.as_deref().or(message.headers);
        let request = Message { subject: &subject, reply: reply.as_deref(), headers, publisher: None, ..*message };
        let delivered = publish_hop(&target, &request, flush);
        if let (0, Some(reply)) = (delivered, &reply) {
            self.responses.forget(reply);
            if let Some(request) = self.services.tracked.take(reply) {
                self.services.report(&request, &ServiceLatency::unavailable(&request), flush);
            }
        }
        delivered > 0
    }
}

/// Sends responders' answers on `_R_.` subjects back to the requesters, reporting the latency
/// of measured requests first, as nats-server does; a measured request whose requester no
/// longer listens is reported `408` and its response dropped, as nats-server has dropped its
/// mapping by then.
#[derive(Debug)]
struct ServiceResponses {
    responses: Arc<Responses>,
    services: Arc<Services>,
}

impl InternalSink for ServiceResponses {
    fn receive(&self, message: &Message<'_>) -> bool {
        delivery::receive_unbatched(self, message)
    }

    fn receive_batched(&self, message: &Message<'_>, flush: &mut FlushSet) -> bool {
        let Some(pending) = self.responses.take(message.subject) else { return false };
        let measured = message.subject.ends_with(".T").then(|| self.services.tracked.take(message.subject)).flatten();
        if let Some(request) = measured {
            if !request.requester_listens() {
                self.responses.forget(message.subject);
                self.services.report(&request, &ServiceLatency::interest_lost(&request), flush);
                return false;
            }
            let responder = self.services.client_info(message.publisher, true);
            self.services.report(&request, &ServiceLatency::answered(&request, responder), flush);
        }
        let Some(target) = pending.target.upgrade() else { return false };
        // nats-server's response import never allows a trace back across it.
        let crossing = trace::Import::Service { account: &pending.importer, from: message.subject, to: &pending.reply };
        let (_set_aside, headers) = match trace::cross_import(crossing, false) {
            Crossing::Skip => {
                self.responses.forget(message.subject);
                return true;
            }
            Crossing::Go(Some(set_aside)) => {
                (Some(set_aside), Some(tracking::with_header(message.headers, TRACE_DEST, TRACE_DISABLED)))
            }
            Crossing::Go(None) | Crossing::Traced => (None, None),
        };
        let headers = headers.as_deref().or(message.headers);
        let response = Message { subject: &pending.reply, headers, publisher: None, ..*message };
        publish_hop(&target, &response, flush) > 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts what it receives.
    #[derive(Debug, Default)]
    struct Count(AtomicUsize);

    impl InternalSink for Count {
        fn receive(&self, _: &Message<'_>) -> bool {
            self.0.fetch_add(1, Ordering::Relaxed);
            true
        }
    }

    fn stream(exporter: &str, importer: &str) -> Link {
        Link {
            kind: Kind::Stream,
            exporter: exporter.into(),
            importer: importer.into(),
            mapping: Mapping::new("foo.>", "foo.>").unwrap(),
            response: ResponseType::Singleton,
            latency: None,
            share: false,
            response_threshold: limits::SERVICE_RESPONSE_TIMEOUT,
            allow_trace: false,
            expires: None,
        }
    }

    #[test]
    fn an_import_whose_activation_expired_forwards_nothing() {
        let bus = Bus::with_accounts("A", ["A", "B"]);
        let service = Link {
            kind: Kind::Service,
            exporter: "A".into(),
            importer: "B".into(),
            mapping: Mapping::new("help", "help").unwrap(),
            ..stream("A", "B")
        };
        let links = [Link { expires: Some(1_000), ..stream("A", "B") }, Link { expires: Some(1_000), ..service }];
        let (_, mut expiries) = install(&bus, &links, "test", &AccountMappings::default()).unwrap();
        let (in_b, in_a) = (Arc::new(Count::default()), Arc::new(Count::default()));
        Bus::subscribe_internal_in(bus.account_router("B").unwrap(), "foo.>", None, in_b.clone()).unwrap();
        Bus::subscribe_internal_in(bus.account_router("A").unwrap(), "help", None, in_a.clone()).unwrap();
        let (a, b) = (bus.account_router("A").unwrap(), bus.account_router("B").unwrap());
        let message = |subject| Message { subject, reply: None, headers: None, payload: b"x", publisher: None };
        let publish =
            |router: &AccountRouter, subject| publish_hop(router, &message(subject), &mut FlushSet::default());
        assert_eq!((publish(a, "foo.x"), publish(b, "help")), (1, 1), "in force before");
        assert_eq!(expiries.end_due(1_000), None);
        assert_eq!(publish(a, "foo.x"), 0, "the stream import delivers nothing");
        assert_eq!(publish(b, "help"), 1, "the service import takes the request, as nats-server's invalid one does");
        assert_eq!((in_b.0.load(Ordering::Relaxed), in_a.0.load(Ordering::Relaxed)), (1, 1), "nothing after the end");
    }

    #[test]
    fn a_loop_the_load_time_check_did_not_catch_ends_at_the_hop_bound() {
        let bus = Bus::with_accounts("A", ["A", "B"]);
        // A → B and B → A on the same subjects: the loop `resolve` refuses.
        install(&bus, &[stream("A", "B"), stream("B", "A")], "test", &AccountMappings::default()).unwrap();
        let (in_a, in_b) = (Arc::new(Count::default()), Arc::new(Count::default()));
        Bus::subscribe_internal_in(bus.account_router("A").unwrap(), "foo.>", None, in_a.clone()).unwrap();
        Bus::subscribe_internal_in(bus.account_router("B").unwrap(), "foo.>", None, in_b.clone()).unwrap();
        bus.publish("foo.x", None, b"x");
        let (a, b) = (in_a.0.load(Ordering::Relaxed), in_b.0.load(Ordering::Relaxed));
        assert_eq!(a + b, limits::IMPORT_HOPS_MAX + 1, "the publish and one delivery per hop, then it stops");
        assert_eq!(HOPS.with(Cell::get), 0, "the count is back to zero after the publish");
    }
}
