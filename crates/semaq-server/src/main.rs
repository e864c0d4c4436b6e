//! `semaq-server`: the broker binary. Reads nats-server's flags and config file, logs the
//! lines nats-server's client test harnesses wait for, and shuts down cleanly on SIGTERM/SIGINT.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use semaq_server::flags;
use semaq_server::identity::SEMAQ_VERSION;
use semaq_server::options::Options;
use semaq_server::server::Server;
use semaq_wire::clock;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

fn main() {
    if let Err(error) = run() {
        eprintln!("semaq-server: {error:#}");
        std::process::exit(1);
    }
}

fn run() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flags = flags::parse(&args)?;
    if flags.help {
        println!("{}", flags::usage());
        return Ok(());
    }
    if flags.version {
        println!("semaq-server version {SEMAQ_VERSION}");
        return Ok(());
    }
    let (options, warnings) = flags.resolve()?;
    init_logging(&options)?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve(options))
}

async fn serve(options: Options) -> anyhow::Result<()> {
    tracing::info!("Starting semaq-server");
    tracing::info!("  Version:  {SEMAQ_VERSION} (NATS protocol compatible with nats-server 2.10)");
    if let Some(path) = &options.pid_file {
        std::fs::write(path, std::process::id().to_string())
            .with_context(|| format!("cannot write pid file {}", path.display()))?;
    }
    if options.jetstream {
        std::fs::create_dir_all(&options.store_dir)
            .with_context(|| format!("cannot create store directory {}", options.store_dir.display()))?;
        tracing::info!("Starting JetStream");
        tracing::info!("    Store Directory: \"{}\"", options.store_dir.display());
    }
    let ports_file_dir = options.ports_file_dir.clone();
    let server = Server::bind(options).await?;
    if let Some(addr) = server.http_addr() {
        tracing::info!("Starting http monitor on {addr}");
    }
    if let Some(addr) = server.client_addr() {
        tracing::info!("Listening for client connections on {addr}");
    }
    if let Some(url) = server.websocket_url() {
        tracing::info!("Listening for websocket clients on {url}");
        if url.starts_with("ws:") {
            tracing::warn!("Websocket not configured with TLS. DO NOT USE IN PRODUCTION!");
        }
    }
    if let Some(dir) = ports_file_dir {
        let program = program_name();
        let path = server.write_ports_file(&dir, &program)?;
        tracing::debug!("ports file written to {}", path.display());
    }
    tracing::info!("Server is ready");
    server.run(shutdown_signal()).await;
    Ok(())
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|arg0| Path::new(&arg0).file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "semaq-server".to_string())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut terminate), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
    else {
        tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = terminate.recv() => tracing::info!("Trapped \"terminated\" signal"),
        _ = interrupt.recv() => tracing::info!("Trapped \"interrupt\" signal"),
    }
}

/// Log lines in nats-server's shape: `[pid] 2026/11/29 08:56:48.123456 [INF] message`.
struct NatsStyle;

impl<S, N> FormatEvent<S, N> for NatsStyle
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "ERR",
            Level::WARN => "WRN",
            Level::INFO => "INF",
            Level::DEBUG => "DBG",
            Level::TRACE => "TRC",
        };
        let stamp = clock::log_stamp(std::time::SystemTime::now());
        write!(writer, "[{}] {stamp} [{level}] ", std::process::id())?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

fn init_logging(options: &Options) -> anyhow::Result<()> {
    let level = if options.trace {
        "semaq_server=trace"
    } else if options.debug {
        "semaq_server=debug"
    } else {
        "semaq_server=info"
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("SEMAQ_LOG").unwrap_or_else(|_| level.into());
    let builder = tracing_subscriber::fmt().event_format(NatsStyle).with_env_filter(filter);
    match &options.log_file {
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            builder.with_writer(Mutex::new(file)).init();
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
    std::io::stderr().flush().ok();
    Ok(())
}
