//! nats-server's WebSocket transport (`websocket { }`): a second listener whose clients speak
//! the same NATS client protocol inside binary WebSocket messages, so nats.ws / nats.js,
//! nats-py and async-nats (`ws://`, `wss://`) connect unchanged.
//!
//! The HTTP upgrade is read and checked here ([`handshake`]); frames are parsed, checked and
//! written as nats-server does ([`frame`]), with permessage-deflate when configured and offered
//! ([`deflate`]); [`io`] turns the frames back into bytes, so each connection then runs through
//! [`connection::serve_via`], exactly as a TCP client does. Framing is by hand because the
//! WebSocket crates either lack permessage-deflate or frame each write on its own.

pub mod deflate;
pub mod frame;
pub mod handshake;
pub mod io;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsAcceptor;

use crate::auth::certificate::CertificateNames;
use crate::connection::{self, Context, Via};
use crate::limits;
use crate::options::WebsocketOptions;
use crate::tls::{self, TlsError};

/// Why the WebSocket listener could not start.
#[derive(Debug, thiserror::Error)]
pub enum WebsocketError {
    /// The port could not be bound.
    #[error("unable to listen for websocket connections on {address}: {source}")]
    Bind {
        /// Address asked for.
        address: String,
        /// Why.
        source: std::io::Error,
    },
    /// The `websocket.tls` block could not be loaded.
    #[error("websocket tls: {0}")]
    Tls(#[from] TlsError),
}

/// The bound WebSocket listener with what each of its connections needs.
pub struct Listener {
    listener: TcpListener,
    shared: Arc<Shared>,
}

/// Per-listener settings every connection reads.
struct Shared {
    options: WebsocketOptions,
    tls: Option<TlsAcceptor>,
    addr: SocketAddr,
    message_bytes_max: usize,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("addr", &self.shared.addr).finish_non_exhaustive()
    }
}

impl Listener {
    /// Binds `options.host:options.port` and loads its TLS, if any.
    pub async fn bind(options: &WebsocketOptions, payload_bytes_max: usize) -> Result<Self, WebsocketError> {
        let tls = options.tls.as_ref().map(tls::acceptor).transpose()?;
        let address = format!("{}:{}", options.host, options.port);
        let listener = TcpListener::bind(&address).await.map_err(|source| WebsocketError::Bind { address, source })?;
        let addr =
            listener.local_addr().map_err(|source| WebsocketError::Bind { address: options.host.clone(), source })?;
        let message_bytes_max = payload_bytes_max
            .saturating_mul(limits::WEBSOCKET_MESSAGE_PAYLOADS_MAX)
            .min(limits::WEBSOCKET_MESSAGE_BYTES_MAX);
        let shared = Arc::new(Shared { options: options.clone(), tls, addr, message_bytes_max });
        Ok(Self { listener, shared })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.addr
    }

    /// `ws://host:port` or `wss://host:port`.
    pub fn url(&self) -> String {
        let scheme = if self.shared.tls.is_some() { "wss" } else { "ws" };
        format!("{scheme}://{}", self.shared.addr)
    }

    /// The next accepted socket.
    pub async fn accept(&self) -> std::io::Result<(TcpStream, SocketAddr)> {
        self.listener.accept().await
    }

    /// Serves one accepted socket: TLS, the upgrade, then the NATS connection until it closes;
    /// or, for a socket over `max_connections`, nats-server's `-ERR` in a binary message after
    /// the upgrade, then a close.
    pub fn serve(
        &self,
        context: Arc<Context>,
        (socket, addr): (TcpStream, SocketAddr),
        admission: Admission,
    ) -> impl std::future::Future<Output = ()> {
        let shared = self.shared.clone();
        async move { shared.serve(context, socket, addr, admission).await }
    }
}

/// Waits for the next socket on `listener`, or forever when there is none.
pub async fn accept(listener: Option<&Listener>) -> std::io::Result<(TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Whether a WebSocket client is served or refused (over `max_connections`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Served like any client.
    Admitted,
    /// Told `maximum connections exceeded` after the upgrade, then closed.
    Refused,
}

impl Shared {
    async fn serve(self: Arc<Self>, context: Arc<Context>, socket: TcpStream, addr: SocketAddr, admission: Admission) {
        let _ = socket.set_nodelay(true);
        let deadline = Instant::now() + self.options.handshake_timeout;
        let Some(acceptor) = self.tls.clone() else {
            return self.upgrade(context, socket, addr, deadline, (admission, None)).await;
        };
        match timeout_at(deadline, acceptor.accept(socket)).await {
            Ok(Ok(stream)) => {
                let maps = self.options.tls.as_ref().is_some_and(|tls| tls.map);
                let certificate = if maps { connection::peer_names(stream.get_ref().1) } else { None };
                self.upgrade(context, stream, addr, deadline, (admission, certificate)).await
            }
            Ok(Err(error)) => tracing::debug!(%addr, %error, "websocket TLS handshake failed"),
            Err(_) => tracing::debug!(%addr, "websocket TLS handshake timed out"),
        }
    }

    async fn upgrade<S>(
        &self,
        context: Arc<Context>,
        mut stream: S,
        addr: SocketAddr,
        deadline: Instant,
        (admission, certificate): (Admission, Option<CertificateNames>),
    ) where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let tls = self.tls.is_some();
        let upgrade = match timeout_at(deadline, handshake::read(&mut stream, &self.options, tls)).await {
            Ok(Ok(upgrade)) => upgrade,
            Ok(Err(handshake::ReadError::Refused(refusal))) => {
                tracing::warn!(%addr, "{refusal}");
                let answer = async {
                    if handshake::send(&mut stream, &refusal.response()).await.is_ok() {
                        handshake::linger(&mut stream).await;
                    }
                };
                let _ = timeout_at(deadline, answer).await;
                return;
            }
            Ok(Err(error)) => return tracing::debug!(%addr, %error, "websocket handshake failed"),
            Err(_) => return tracing::debug!(%addr, "websocket handshake timed out"),
        };
        if !matches!(timeout_at(deadline, handshake::send(&mut stream, &upgrade.response)).await, Ok(Ok(()))) {
            return;
        }
        let addr = upgrade.forwarded_for.map_or(addr, |ip| SocketAddr::new(ip, addr.port()));
        let (reader, mut writer) = io::split(stream, upgrade.compression, self.message_bytes_max);
        if admission == Admission::Refused {
            return refuse(&mut writer).await;
        }
        let via = Via {
            tls_required: tls,
            tls_verify: self.options.tls.as_ref().is_some_and(|tls| tls.verify),
            host: self.options.host.clone(),
            port: self.addr.port(),
            cookies: upgrade.cookies,
            auth_timeout: self.options.auth.timeout,
            certificate,
            ping_interval: self.options.ping_interval,
        };
        connection::serve_via(context, addr, via, reader, writer).await;
    }
}

async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(writer: &mut io::Writer<S>) {
    let _ = tokio::time::timeout(limits::WEBSOCKET_HANDSHAKE_TIMEOUT, async {
        writer.write_all(b"-ERR 'maximum connections exceeded'\r\n").await?;
        writer.shutdown().await
    })
    .await;
}
