//! The bus: the one way any part of the server publishes, subscribes internally and reaches
//! the connections. Subsystems (JetStream, the schema registry's NATS API, filters) hold an
//! `Arc<Bus>` or, from sinks the router itself holds, a `Weak<Bus>` — never the whole server.

use std::collections::HashMap;
use std::sync::Arc;

use crate::client::{Client, Clients};
use crate::delivery::{self, FlushSet, InternalSink, Message, Sink, SubscriberRef, Subscription};
use crate::limits;
use crate::options::GLOBAL_ACCOUNT;
use crate::outbound::CloseReason;
use crate::router::{Router, RouterError, RouterStats};
use crate::stats::{bump, AccountTotals, ServerStats};

/// Subject routing, the connection table and the server's counters.
///
/// Each account is its own subject space with its own router. The broker's services live in
/// the home account, whose router is [`Bus::router`]; a connection resolves its account's router
/// once, when it authenticates, and holds it. [`Bus::account_view`] is the same bus seen from
/// another account, for the services every JetStream account has.
#[derive(Debug)]
pub struct Bus {
    /// Subject → subscriptions of the home account, where the broker's own services live.
    pub router: Arc<Router<SubscriberRef>>,
    /// Open and recently closed connections (shared with the account views).
    pub clients: Arc<Clients>,
    /// Server-wide counters (shared with the account views).
    pub stats: Arc<ServerStats>,
    /// Signalled when a client unsubscribes or disconnects, so the latency timer looks at once
    /// for requesters that stopped listening (shared with the account views).
    pub interest_dropped: Arc<tokio::sync::Notify>,
    /// The name of the account [`Bus::router`] routes: the home account, or a view's.
    home: Arc<str>,
    /// Every account's router by name, the home account's and `$G`'s included; fixed at start.
    accounts: Arc<HashMap<Arc<str>, Arc<Router<SubscriberRef>>>>,
    /// Every account's closed connections' totals, by name; the same accounts as `accounts`.
    closed_totals: Arc<HashMap<Arc<str>, AccountTotals>>,
}

impl Default for Bus {
    fn default() -> Self {
        Self::with_accounts(GLOBAL_ACCOUNT, [])
    }
}

impl Bus {
    /// A bus with a subject space for `$G`, `home` and each of `others` (names listed twice
    /// share one). The caller bounds how many accounts there are.
    pub fn with_accounts<'a>(home: &'a str, others: impl IntoIterator<Item = &'a str>) -> Self {
        let new_router = || Arc::new(Router::new(limits::ROUTER_CACHE_ENTRIES_MAX));
        let mut accounts: HashMap<Arc<str>, Arc<Router<SubscriberRef>>> = HashMap::new();
        for name in [GLOBAL_ACCOUNT, home].into_iter().chain(others) {
            accounts.entry(Arc::from(name)).or_insert_with(new_router);
        }
        let router = accounts.get(home).cloned().unwrap_or_else(new_router);
        let (clients, stats) = (Arc::default(), Arc::default());
        let closed_totals = Arc::new(accounts.keys().map(|name| (name.clone(), AccountTotals::default())).collect());
        let interest_dropped = Arc::default();
        let (home, accounts) = (Arc::from(home), Arc::new(accounts));
        Self { router, clients, stats, interest_dropped, home, accounts, closed_totals }
    }

    /// This bus as seen from `account`: the same connections, counters and accounts, with
    /// `account`'s router as [`Bus::router`], so what publishes and subscribes through it
    /// (a JetStream of that account) stays in that account's subjects. `None` for an account
    /// the server does not know.
    pub fn account_view(&self, account: &str) -> Option<Bus> {
        let (name, router) = self.accounts.get_key_value(account)?;
        Some(Self {
            router: router.clone(),
            clients: self.clients.clone(),
            stats: self.stats.clone(),
            interest_dropped: self.interest_dropped.clone(),
            home: name.clone(),
            accounts: self.accounts.clone(),
            closed_totals: self.closed_totals.clone(),
        })
    }

    /// The name of the account [`Bus::router`] routes: where the broker's services live, or
    /// for an [`account view`](Bus::account_view), its account.
    pub fn home_account(&self) -> &str {
        &self.home
    }

    /// The router of `account`, or `None` for an account the server does not know.
    pub fn account_router(&self, account: &str) -> Option<&Arc<Router<SubscriberRef>>> {
        self.accounts.get(account)
    }

    /// What the closed connections of `account` received and sent, for nats-server's account
    /// statistics; `None` for an account the server does not know.
    pub fn closed_totals(&self, account: &str) -> Option<&AccountTotals> {
        self.closed_totals.get(account)
    }

    /// The accounts' names and routers, in no particular order.
    pub fn account_routers(&self) -> impl Iterator<Item = (&str, &Arc<Router<SubscriberRef>>)> {
        self.accounts.iter().map(|(name, router)| (&**name, router))
    }

    /// The routers' figures summed over every account.
    pub fn router_stats(&self) -> RouterStats {
        let mut total = RouterStats::default();
        for router in self.accounts.values() {
            total.add(&router.stats());
        }
        total
    }

    /// Subscriptions in every account.
    pub fn subscription_count(&self) -> usize {
        self.accounts.values().map(|router| router.count()).sum()
    }

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
        Self::subscribe_internal_in(&self.router, filter, queue, sink)
    }

    /// Subscribes a server component to `filter` in the account of `router` (one of
    /// [`Bus::account_routers`]), for the few services every account has.
    pub fn subscribe_internal_in(
        router: &Router<SubscriberRef>,
        filter: &str,
        queue: Option<&str>,
        sink: Arc<dyn InternalSink>,
    ) -> Result<Arc<Subscription>, RouterError> {
        let subscription =
            Arc::new(Subscription::new(Sink::Internal(sink), filter.into(), queue.map(Into::into), "internal".into()));
        router.insert(filter, queue, SubscriberRef(subscription.clone()))?;
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
        let slow = matches!(reason, CloseReason::SlowConsumer | CloseReason::WriteTimeout);
        if slow {
            bump(&self.stats.slow_consumers);
        }
        let account = client.details().and_then(|details| details.account.as_deref()).unwrap_or(GLOBAL_ACCOUNT);
        if let Some(totals) = self.closed_totals.get(account) {
            totals.received.record_many(in_msgs, in_bytes);
            totals.sent.record_many(out_msgs, out_bytes);
            if slow {
                bump(&totals.slow_consumers);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Nothing;

    impl InternalSink for Nothing {
        fn receive(&self, _: &Message<'_>) -> bool {
            true
        }
    }

    #[test]
    fn each_account_has_its_own_router_and_the_home_accounts_is_the_bus_router() {
        let bus = Bus::with_accounts("A", ["A", "B", "B"]);
        let names = |bus: &Bus| {
            let mut names: Vec<String> = bus.account_routers().map(|(name, _)| name.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(names(&bus), ["$G", "A", "B"], "`$G` always; a name listed twice is one account");
        assert_eq!(bus.home_account(), "A");
        assert!(Arc::ptr_eq(bus.account_router("A").unwrap(), &bus.router));
        bus.subscribe_internal("orders.>", None, Arc::new(Nothing)).unwrap();
        let b = bus.account_router("B").unwrap();
        Bus::subscribe_internal_in(b, "orders.>", None, Arc::new(Nothing)).unwrap();
        Bus::subscribe_internal_in(b, "orders.new", None, Arc::new(Nothing)).unwrap();
        assert_eq!(bus.router.matches("orders.new").fanout(), 1, "A's subscription only");
        assert_eq!(b.matches("orders.new").fanout(), 2, "B's two only");
        assert_eq!(bus.account_router("$G").unwrap().matches("orders.new").fanout(), 0);
        assert_eq!(bus.subscription_count(), 3);
        assert_eq!(bus.router_stats().num_subscriptions, 3);
        assert!(bus.account_router("C").is_none());
        assert_eq!(names(&Bus::default()), ["$G"]);
    }

    #[test]
    fn an_account_view_routes_in_its_account_and_shares_the_connections_and_counters() {
        let bus = Bus::with_accounts("A", ["A", "B"]);
        let view = bus.account_view("B").unwrap();
        assert_eq!(view.home_account(), "B");
        assert!(Arc::ptr_eq(&view.router, bus.account_router("B").unwrap()));
        assert!(Arc::ptr_eq(&view.clients, &bus.clients) && Arc::ptr_eq(&view.stats, &bus.stats));
        view.subscribe_internal("orders.>", None, Arc::new(Nothing)).unwrap();
        assert_eq!(bus.router.matches("orders.new").fanout(), 0, "not in the home account");
        assert_eq!(bus.account_router("B").unwrap().matches("orders.new").fanout(), 1);
        assert_eq!(bus.subscription_count(), 1, "the view's subscription counts in the server's total");
        assert!(bus.account_view("C").is_none());
    }
}
