//! The system account's subscriber counts, side by side with nats-server 2.9: the interest count
//! `$SYS.REQ.ACCOUNT.NSUBS` (body `{"acc", "subject", "queue"}`, the queue base64 as Go encodes
//! bytes) and `$SYS.DEBUG.SUBSCRIBERS` (body `<subject> [<queue>]`, about the asker's account);
//! both answer a bare number.

use async_nats::Client;

use crate::system_config::{ask, both_servers_agree, login, SYS_CONFIG};

/// Subscribes `client` to each `(subject, queue)`, returning the subscriptions to keep them.
async fn subscribe_all(client: &Client, subscriptions: &[(&str, Option<&str>)]) -> Vec<async_nats::Subscriber> {
    let mut kept = Vec::new();
    for (subject, queue) in subscriptions {
        let subscriber = match queue {
            Some(queue) => client.queue_subscribe(subject.to_string(), queue.to_string()).await,
            None => client.subscribe(subject.to_string()).await,
        };
        kept.push(subscriber.expect("subscribe"));
    }
    semaq_testkit::sync(client).await;
    kept
}

/// What `$SYS.REQ.ACCOUNT.NSUBS` counts in A, where a client subscribed to `orders`, `orders`
/// in queue `q`, `*`, `orders.new` and `orders.>` in queue `w` (and to its reply inbox: `>`
/// counts that too).
async fn interest_counts(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let a = login(&url, "a").await;
    let subscriptions =
        [("orders", None), ("orders", Some("q")), ("*", None), ("orders.new", None), ("orders.>", Some("w"))];
    let _kept = subscribe_all(&a, &subscriptions).await;
    let bodies = [
        r#"{"acc":"A","subject":"orders"}"#,
        r#"{"acc":"A","subject":"orders","queue":"cQ=="}"#,
        r#"{"acc":"A","subject":"orders.>"}"#,
        r#"{"acc":"A","subject":"orders.>","queue":"dw=="}"#,
        r#"{"acc":"A","subject":">"}"#,
    ];
    let mut seen = Vec::new();
    for body in bodies {
        seen.push(format!("{body}: {}", ask(&sys, "$SYS.REQ.ACCOUNT.NSUBS", body).await));
    }
    seen
}

#[tokio::test]
async fn the_interest_count_request_counts_an_accounts_client_subscriptions_as_nats_server_does() {
    let expected = [
        r#"{"acc":"A","subject":"orders"}: 3"#,
        r#"{"acc":"A","subject":"orders","queue":"cQ=="}: 1"#,
        r#"{"acc":"A","subject":"orders.>"}: 2"#,
        r#"{"acc":"A","subject":"orders.>","queue":"dw=="}: 1"#,
        r#"{"acc":"A","subject":">"}: 6"#,
    ];
    both_servers_agree(SYS_CONFIG, expected, interest_counts).await;
}

/// What `$SYS.DEBUG.SUBSCRIBERS` counts for the system user, who subscribed to `orders` and
/// to `orders` in queue `q`, while a client of A subscribed to `orders` too.
async fn debug_counts(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let a = login(&url, "a").await;
    let _theirs = subscribe_all(&a, &[("orders", None)]).await;
    let _own = subscribe_all(&sys, &[("orders", None), ("orders", Some("q"))]).await;
    let mut seen = Vec::new();
    // `>` also counts the one subscription async-nats answers its requests on.
    for body in ["orders", "orders q", "orders nobody", "orders.*", "nothing", ">"] {
        seen.push(format!("{body}: {}", ask(&sys, "$SYS.DEBUG.SUBSCRIBERS", body).await));
    }
    seen
}

#[tokio::test]
async fn the_debug_subscribers_request_counts_the_askers_own_accounts_subscriptions() {
    let expected = ["orders: 2", "orders q: 1", "orders nobody: 0", "orders.*: 0", "nothing: 0", ">: 3"];
    both_servers_agree(SYS_CONFIG, expected, debug_counts).await;
}

/// `$SYS` exporting the debug service (nats-server 2.9 refuses the import otherwise, though it
/// adds the export itself later) and A importing it.
const IMPORT_CONFIG: &str = "accounts {\n  $SYS { users [ {user: sys, password: sys} ], \
     exports [ {service: \"$SYS.DEBUG.SUBSCRIBERS\"} ] }\n  A { users [ {user: a, password: a} ], \
     imports [ {service: {account: \"$SYS\", subject: \"$SYS.DEBUG.SUBSCRIBERS\"}} ] }\n}\n";

/// What a client of A learns through the import, having subscribed to `orders` twice, while the
/// system user subscribed to `orders` once.
async fn imported_debug_counts(url: String) -> Vec<String> {
    let sys = login(&url, "sys").await;
    let a = login(&url, "a").await;
    let _own = subscribe_all(&sys, &[("orders", None)]).await;
    let _theirs = subscribe_all(&a, &[("orders", None), ("orders", Some("q"))]).await;
    let mut seen = Vec::new();
    for body in ["orders", "orders q"] {
        seen.push(format!("{body}: {}", ask(&a, "$SYS.DEBUG.SUBSCRIBERS", body).await));
    }
    seen
}

#[tokio::test]
async fn an_account_importing_the_debug_subscribers_service_counts_its_own_subscriptions() {
    both_servers_agree(IMPORT_CONFIG, ["orders: 2", "orders q: 1"], imported_debug_counts).await;
}
