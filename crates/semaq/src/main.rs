//! `semaq`: the SemaQ command-line client.
//!
//! Layout: `main.rs` parses the command line and dispatches; `connect.rs` holds the options every command
//! shares and turns connect failures into one line; `pubsub.rs` has `pub`, `sub` and `req`, printing through
//! `output.rs`; `parse.rs` has the pure value parsers; `bench/` drives load against any NATS URL and
//! compares semaq-server with nats-server; `schema.rs` talks to the schema registry over `$SEMAQ.API.SCHEMA`
//! (`infer` uses semaq-registry's inference, the one L4 auto-evolution uses); `stream.rs` has streams and
//! consumers; `trace.rs` prints lineage graphs; `verify.rs` checks a level 4 stream's hash chain (online or on
//! a stopped server's files). New command groups (`agent`) get a module of their own and one arm in [`Command`].

mod agent;
mod bench;
mod chaos;
mod connect;
mod http;
mod output;
mod parse;
mod pubsub;
mod schema;
mod stream;
mod top;
mod trace;
mod verify;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

use crate::connect::{GlobalArgs, Target};

/// The SemaQ client: publish, subscribe, request, manage streams, consumers and schemas, trace
/// lineage, verify L4 hash chains and benchmark, against SemaQ or any NATS-compatible server.
#[derive(Parser, Debug)]
#[command(name = "semaq", version, about, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Publish a message (body from the argument or stdin)
    Pub(pubsub::PubArgs),
    /// The agent network: ls (agents, weights, in flight, sessions), watch (live)
    Agent(agent::AgentArgs),
    /// Subscribe to a subject and print what arrives
    Sub(pubsub::SubArgs),
    /// Send a request and print the reply
    Req(pubsub::ReqArgs),
    /// Measure throughput and latency, or compare semaq-server with nats-server
    Bench(bench::BenchArgs),
    /// The server's schema registry: register, list, show, check, delete, config, mode, infer
    Schema(schema::SchemaArgs),
    /// JetStream streams: add (with a schema binding), ls, info, rm
    Stream(stream::StreamArgs),
    /// Durable JetStream consumers: add (with a CEL filter), ls, rm
    Consumer(stream::ConsumerArgs),
    /// The lineage of a message (its Semaq-Parent ancestry across streams), as a tree or JSON
    Trace(trace::TraceArgs),
    /// The key figures, live in the terminal: traffic, streams, latency objective, token load, agents
    Top(top::TopArgs),
    /// Check a level 4 stream's hash chain and checkpoint signatures, online or on a stopped server's files
    Verify(verify::VerifyArgs),
    /// Fault injection against a real server: `crash` SIGKILLs it at random moments under load
    Chaos(chaos::ChaosArgs),
}

fn main() -> ExitCode {
    let mut cli = Cli::parse();
    if let Command::Bench(args) = &mut cli.command {
        if let Err(error) = bench::before_runtime(args, cli.global.server.is_some()) {
            return fail(&error);
        }
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => return fail(&anyhow::Error::new(error).context("cannot start the async runtime")),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

async fn run(cli: Cli) -> Result<()> {
    let target = Target::from_args(&cli.global)?;
    match cli.command {
        Command::Pub(args) => pubsub::publish(&target, args).await,
        Command::Agent(args) => agent::run(&target, args).await,
        Command::Sub(args) => pubsub::subscribe(&target, args).await,
        Command::Req(args) => pubsub::request(&target, args).await,
        Command::Bench(args) => bench::run(&target, args).await,
        Command::Schema(args) => schema::run(&target, args).await,
        Command::Stream(args) => stream::run_stream(&target, args).await,
        Command::Consumer(args) => stream::run_consumer(&target, args).await,
        Command::Trace(args) => trace::run(&target, args).await,
        Command::Top(args) => top::run(args, cli.global.timeout).await,
        Command::Verify(args) => verify::run(&target, args).await,
        Command::Chaos(args) => chaos::run(args).await,
    }
}

fn fail(error: &anyhow::Error) -> ExitCode {
    eprintln!("semaq: {}", one_line(error));
    ExitCode::FAILURE
}

/// Joins an error and its causes into one line, skipping causes the outer message already quotes
/// (async-nats errors print their source themselves).
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace(['\r', '\n'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_chain_is_one_line_without_repeats() {
        let inner = std::io::Error::other("connection refused");
        let error = anyhow::Error::new(inner).context("IO error: connection refused").context("cannot publish");
        assert_eq!(one_line(&error), "cannot publish: IO error: connection refused");
    }

    #[test]
    fn command_line_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
