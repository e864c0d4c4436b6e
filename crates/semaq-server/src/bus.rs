//! The bus: the one way any part of the server publishes, subscribes internally and reaches
//! the connections. Subsystems (JetStream, the schema registry's NATS API, filters) hold an
//! `Arc<Bus>` or, from sinks the router itself holds, a `Weak<Bus>` — never the whole server.

use std::sync::Arc;

use crate::client::{Client, Clients};
use crate::delivery::{self, FlushSet, InternalSink, Message, Sink, SubscriberRef, Subscription};
use crate::limits;
use crate::outbound::CloseReason;
use crate::router::{Router, RouterError};
use crate::stats::{bump, ServerStats};

/// Subject routing, the connection table and the server's counters.
#[derive(Debug)]
pub struct Bus {
    /// Subject → subscriptions.
    pub router: Router<SubscriberRef>,
    /// Open and recently closed connections.
    pub clients: Clients,
    /// Server-wide counters.
    pub stats: ServerStats,
}

impl Default for Bus {
    fn default() -> Self {
        Self {
            router: Router::new(limits::ROUTER_CACHE_ENTRIES_MAX),
            clients: Clients::default(),
            stats: ServerStats::default(),
        }
    }
}

impl Bus {
    /// Publishes a message from the server itself (API replies, acks, consumer deliveries):
    /// routed by `route_subject`, delivered showing `message.subject`. Returns the deliveries.
    pub fn publish_as(&self, route_subject: &str, message: &Message<'_>) -> usize {
        let mut flush = FlushSet::default();
        let delivered = self.publish_batched(route_subject, message, &mut flush);
        flush.flush();
        delivered
    }

    /// Like [`Bus::publish_as`], leaving the writers' wake-up to the caller's `flush`, so a
    /// batch of server messages (acks, consumer deliveries) wakes each writer once.
    pub fn publish_batched(&self, route_subject: &str, message: &Message<'_>, flush: &mut FlushSet) -> usize {
        // Server messages mostly go to one-off inboxes: look them up without filling the cache.
        let matches = self.router.matches_uncached(route_subject);
        delivery::fan_out(&self.router, &matches, message, None, flush)
    }

    /// Publishes a message from the server itself to `subject`.
    pub fn publish(&self, subject: &str, headers: Option<&[u8]>, payload: &[u8]) -> usize {
        self.publish_as(subject, &Message { subject, reply: None, headers, payload, publisher: None })
    }

    /// Subscribes a server component to `filter`.
    pub fn subscribe_internal(
        &self,
        filter: &str,
        queue: Option<&str>,
        sink: Arc<dyn InternalSink>,
    ) -> Result<Arc<Subscription>, RouterError> {
        let subscription =
            Arc::new(Subscription::new(Sink::Internal(sink), filter.into(), queue.map(Into::into), "internal".into()));
        self.router.insert(filter, queue, SubscriberRef(subscription.clone()))?;
        Ok(subscription)
    }

    /// Removes a subscription made with [`Bus::subscribe_internal`].
    pub fn unsubscribe_internal(&self, subscription: &Arc<Subscription>) {
        let reference = SubscriberRef(subscription.clone());
        self.router.remove(&subscription.subject, subscription.queue.as_deref(), &reference);
    }

    /// Records an open connection.
    pub fn register(&self, client: &Arc<Client>) {
        self.clients.insert(client);
    }

    /// Forgets an open connection, keeping it among the recently closed and its traffic in the totals.
    pub fn unregister(&self, client: &Arc<Client>, reason: CloseReason) {
        let (in_msgs, in_bytes) = client.inbound.snapshot();
        let (out_msgs, out_bytes) = client.outbound.traffic.snapshot();
        self.clients.close(client, reason);
        self.stats.inbound.record_many(in_msgs, in_bytes);
        self.stats.outbound.record_many(out_msgs, out_bytes);
        if matches!(reason, CloseReason::SlowConsumer | CloseReason::WriteTimeout) {
            bump(&self.stats.slow_consumers);
        }
    }

    /// Messages and bytes received and delivered since start: closed connections' totals plus
    /// the open ones'. Counting per connection keeps publishers off one shared cache line.
    pub fn traffic_totals(&self) -> ((u64, u64), (u64, u64)) {
        let (in_msgs, in_bytes) = self.stats.inbound.snapshot();
        let (out_msgs, out_bytes) = self.stats.outbound.snapshot();
        let ((open_in_msgs, open_in_bytes), (open_out_msgs, open_out_bytes)) = self.clients.open_traffic();
        ((in_msgs + open_in_msgs, in_bytes + open_in_bytes), (out_msgs + open_out_msgs, out_bytes + open_out_bytes))
    }
}
