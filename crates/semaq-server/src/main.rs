//! `semaq-server`: the broker binary. Reads nats-server's flags and config file, logs the
//! lines nats-server's client test harnesses wait for, shuts down cleanly on SIGTERM/SIGINT and
//! enters lame duck mode on SIGUSR2; `--signal` sends those signals to a running server.

use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;
use semaq_server::flags::{self, SignalCommand};
use semaq_server::identity::SEMAQ_VERSION;
use semaq_server::limits;
use semaq_server::options::Options;
use semaq_server::server::{Control, Server};
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
        return print_to_stdout(flags::usage());
    }
    if flags.version {
        return print_to_stdout(&format!("semaq-server version {SEMAQ_VERSION}"));
    }
    if let Some(request) = &flags.signal {
        return send_signal(request);
    }
    let (options, warnings) = flags.resolve()?;
    init_logging(&options)?;
    for warning in warnings {
        tracing::warn!("{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(serve(options))
}

/// Prints `text` and a newline; a reader that closed early (`semaq-server --help | head`) is
/// not an error worth a panic, as `println!` would make it.
fn print_to_stdout(text: &str) -> anyhow::Result<()> {
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(error) if error.kind() != std::io::ErrorKind::BrokenPipe => Err(error.into()),
        _ => Ok(()),
    }
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
    // Installed before the server can be seen ready: a SIGTERM sent the moment it is would
    // otherwise find the default action (death by the signal) while a task had not yet run.
    let signals = Signals::install();
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
    let (sender, control) = tokio::sync::mpsc::channel(limits::SIGNALS_QUEUED_MAX);
    tokio::spawn(forward_signals(signals, sender));
    server.run_controlled(control).await;
    Ok(())
}

fn program_name() -> String {
    std::env::args()
        .next()
        .and_then(|arg0| Path::new(&arg0).file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "semaq-server".to_string())
}

/// The handlers of SIGTERM, SIGINT and SIGUSR2, or none when they could not be installed.
struct Signals(Option<[tokio::signal::unix::Signal; 3]>);

impl Signals {
    fn install() -> Self {
        use tokio::signal::unix::{signal, SignalKind};
        match (signal(SignalKind::terminate()), signal(SignalKind::interrupt()), signal(SignalKind::user_defined2())) {
            (Ok(terminate), Ok(interrupt), Ok(lame_duck)) => Signals(Some([terminate, interrupt, lame_duck])),
            _ => {
                tracing::error!("cannot install signal handlers; stop the server with SIGKILL");
                Signals(None)
            }
        }
    }
}

/// Forwards SIGINT, SIGTERM and SIGUSR2 to the server, logging each as nats-server does.
async fn forward_signals(signals: Signals, sender: tokio::sync::mpsc::Sender<Control>) {
    let Some([mut terminate, mut interrupt, mut lame_duck]) = signals.0 else { return };
    loop {
        let control = tokio::select! {
            _ = terminate.recv() => ("terminated", Control::Terminate),
            _ = interrupt.recv() => ("interrupt", Control::Interrupt),
            _ = lame_duck.recv() => ("user defined signal 2", Control::LameDuck),
        };
        tracing::info!("Trapped {:?} signal", control.0);
        if sender.send(control.1).await.is_err() {
            return;
        }
    }
}

/// `--signal`: sends the command's signal to the server named by pid, pid file, or the one
/// `semaq-server` running, as nats-server's `--signal` does.
fn send_signal(request: &flags::SignalRequest) -> anyhow::Result<()> {
    use rustix::process::{kill_process, Pid, Signal};
    let (signal, name) = match request.command {
        SignalCommand::LameDuck => (Signal::USR2, "ldm"),
        SignalCommand::Stop => (Signal::KILL, "stop"),
        SignalCommand::Quit => (Signal::INT, "quit"),
        SignalCommand::Term => (Signal::TERM, "term"),
    };
    let pid = match &request.pid {
        Some(given) => {
            // A pid file's contents, else the text itself (nats-server's maybeReadPidFile).
            let text = std::fs::read_to_string(given).unwrap_or_else(|_| given.clone());
            text.trim().parse::<i32>().map_err(|_| anyhow::anyhow!("invalid pid: {}", text.trim()))?
        }
        None => running_server_pid()?,
    };
    let pid = Pid::from_raw(pid).ok_or_else(|| anyhow::anyhow!("invalid pid: {pid}"))?;
    kill_process(pid, signal).with_context(|| format!("signal {name:?} {}", pid.as_raw_pid()))?;
    Ok(())
}

/// The pid of the one other `semaq-server` process, read from `/proc`.
fn running_server_pid() -> anyhow::Result<i32> {
    let own = std::process::id();
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .context("unable to resolve pid, try providing one")?
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()))
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim() == "semaq-server")
        })
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect();
    pids.sort_unstable();
    match pids.as_slice() {
        [] => anyhow::bail!("no semaq-server processes running"),
        [pid] => Ok(*pid),
        many => {
            let listed: Vec<String> = many.iter().map(i32::to_string).collect();
            anyhow::bail!("multiple semaq-server processes running:\n{}", listed.join("\n"))
        }
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
