//! Lame duck mode, as nats-server does it: with the listener already closed, tell every client
//! (an async INFO with `"ldm":true`) so it can find another server, wait the grace period, then
//! close the connections one by one, spread over what is left of `lame_duck_duration` at no
//! more than a second apart, so their reconnects do not arrive at the other servers at once.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use semaq_wire::encode;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::client::Client;
use crate::connection::Context;
use crate::limits;
use crate::outbound::CloseReason;

/// What a signal asks of a running server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// SIGINT: shut down now, lame duck mode or not.
    Interrupt,
    /// SIGTERM: shut down now, unless already in lame duck mode (nats-server ignores it then).
    Terminate,
    /// SIGUSR2: enter lame duck mode, then shut down.
    LameDuck,
}

/// Runs lame duck mode after the listener is closed; returns when every connection has been
/// told to close, or early on SIGINT. The caller then shuts down.
pub async fn run(context: &Context, connections: &mut JoinSet<()>, control: &mut mpsc::Receiver<Control>) {
    tracing::info!("Entering lame duck mode, stop accepting new clients");
    let clients = context.bus.clients.open();
    if clients.is_empty() {
        return;
    }
    let options = &context.options;
    let grace = options.lame_duck_grace_period;
    let spread = options.lame_duck_duration.saturating_sub(grace).max(Duration::from_secs(1));
    let (interval, batch) = pacing(spread, clients.len());
    for client in &clients {
        announce(context, client);
    }
    if !wait(grace, connections, control).await {
        return;
    }
    tracing::info!("Closing existing clients");
    let last = clients.len() - 1;
    for (index, client) in clients.iter().enumerate() {
        client.outbound.close(CloseReason::ServerShutdown);
        if index == last {
            break;
        }
        if (batch == 1 || index % batch == 0) && !wait(pause(interval), connections, control).await {
            return;
        }
    }
}

/// The pause between two closes and how many close per pause: the spread shared out, at most
/// a second each (nats-server's rule); when that is under a nanosecond, batches.
fn pacing(spread: Duration, clients: usize) -> (Duration, usize) {
    let spread_ns = spread.as_nanos().max(1);
    let count = clients.max(1) as u128;
    let interval_ns = spread_ns / count;
    if interval_ns < 1 {
        let batch = usize::try_from(count / spread_ns).unwrap_or(usize::MAX).max(1);
        return (Duration::from_nanos(1), batch);
    }
    let interval = Duration::from_nanos(u64::try_from(interval_ns).unwrap_or(u64::MAX));
    (interval.min(limits::LAME_DUCK_CLOSE_INTERVAL_MAX), 1)
}

/// A random pause between half the interval and the interval, as nats-server picks.
fn pause(interval: Duration) -> Duration {
    let most = interval.as_nanos().max(1) as u64;
    let picked = rand::random::<u64>() % most;
    Duration::from_nanos(picked.max(most / 2))
}

/// Sends the lame duck INFO to a client that understands async INFO (it sent CONNECT with
/// protocol 1 or above), as nats-server only sends it to those.
fn announce(context: &Context, client: &Arc<Client>) {
    if client.details().is_none_or(|details| details.options.protocol < 1) {
        return;
    }
    let mut info = context.client_info(client.id, client.addr);
    info.nonce = None;
    info.ldm = true;
    let mut bytes = BytesMut::new();
    encode::info(&mut bytes, &info);
    client.outbound.send(&bytes);
}

/// Waits `duration` while reaping finished connections; false when SIGINT cut it short.
async fn wait(duration: Duration, connections: &mut JoinSet<()>, control: &mut mpsc::Receiver<Control>) -> bool {
    let deadline = tokio::time::sleep(duration);
    tokio::pin!(deadline);
    let mut signals_open = true;
    loop {
        tokio::select! {
            () = &mut deadline => return true,
            next = control.recv(), if signals_open => match next {
                Some(Control::Interrupt) => return false,
                Some(_) => {}
                None => signals_open = false,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pacing_spreads_closes_at_most_a_second_apart() {
        assert_eq!(pacing(Duration::from_secs(110), 10), (Duration::from_secs(1), 1));
        assert_eq!(pacing(Duration::from_secs(10), 100), (Duration::from_millis(100), 1));
        assert_eq!(pacing(Duration::from_nanos(10), 100), (Duration::from_nanos(1), 10));
    }

    #[test]
    fn a_pause_is_between_half_and_all_of_the_interval() {
        for _ in 0..100 {
            let picked = pause(Duration::from_millis(100));
            assert!(picked >= Duration::from_millis(50) && picked < Duration::from_millis(100), "{picked:?}");
        }
    }
}
