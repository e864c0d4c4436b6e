//! Integration tests against a real `semaq-server` process over TCP.
//! One test binary keeps link time down; each module is one area of behaviour. Servers are
//! started with `semaq-testkit`.

mod account_limits;
mod accounts;
mod agents;
mod agents_durable;
mod agents_services;
mod auth;
mod auth_nkeys;
mod commit;
mod conformance;
mod counters;
mod crash;
mod disk_faults;
mod exactly_once;
mod filter;
mod fuzz_api;
mod harness;
mod imports;
mod jetstream;
mod jetstream_api;
mod jetstream_api_210;
mod jetstream_consumers;
mod kv;
mod l4_batch;
mod lame_duck;
mod latency;
mod lineage;
mod lossy;
mod metrics;
mod object_store;
mod priority;
mod provenance;
mod pubsub;
mod purge_seq;
mod raw_protocol;
mod registry;
mod schedules;
mod slow_consumer;
mod sources;
mod sources_remote;
mod system;
mod tls;
mod tokens;
mod tracing;
mod websocket;
