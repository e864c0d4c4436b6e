//! async-nats helpers.

/// Waits until the server has processed everything `client` sent before. async-nats' `flush`
/// only empties the client's socket buffer; a request that nobody answers comes back with a
/// 503 status only after the server has read every earlier op of the connection.
pub async fn sync(client: &async_nats::Client) {
    sync_via(client, "_SEMAQ_TEST.sync").await;
}

/// [`sync`] through a subject of the caller's choosing (one the client may publish to).
pub async fn sync_via(client: &async_nats::Client, subject: &str) {
    let outcome = client.request(subject.to_string(), Default::default()).await;
    assert!(
        matches!(&outcome, Err(error) if error.kind() == async_nats::RequestErrorKind::NoResponders),
        "sync round trip: {outcome:?}"
    );
}
