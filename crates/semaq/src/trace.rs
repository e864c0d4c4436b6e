//! `semaq trace STREAM:SEQ`: the lineage graph `Semaq-Parent` references build, across streams,
//! from the server's `$SEMAQ.API.LINEAGE.<stream>.<seq>`; printed as a tree (parents below their
//! child, like `cargo tree`; a message reached again is marked `(*)`) or as the JSON graph.

use std::collections::{HashMap, HashSet};

use anyhow::{anyhow, bail, Context as _, Result};
use serde_json::{json, Value};

use crate::connect::Target;

/// `semaq trace ...`
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// The message whose ancestry to show, e.g. ANSWERS:42
    #[arg(value_name = "STREAM:SEQ")]
    target: String,
    /// Print the graph as JSON (nodes and edges) instead of a tree
    #[arg(long)]
    json: bool,
    /// Generations to walk up (the server's bound applies)
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// Nodes to return at most (the server's bound applies)
    #[arg(long, value_name = "N")]
    nodes: Option<usize>,
}

/// Runs `semaq trace`.
pub async fn run(target: &Target, args: TraceArgs) -> Result<()> {
    let (stream, seq) = parse_target(&args.target)?;
    let client = target.connect().await?;
    let mut body = json!({});
    if let Some(depth) = args.depth {
        body["depth"] = json!(depth);
    }
    if let Some(nodes) = args.nodes {
        body["nodes"] = json!(nodes);
    }
    let subject = format!("$SEMAQ.API.LINEAGE.{stream}.{seq}");
    let request = async_nats::Request::new().payload(body.to_string().into()).timeout(Some(target.timeout));
    let reply = client
        .send_request(subject, request)
        .await
        .map_err(|error| anyhow!("lineage request for {stream}:{seq} failed: {error}"))?;
    let graph: Value = serde_json::from_slice(&reply.payload).context("the server's answer is not JSON")?;
    if let Some(description) = graph["error"]["description"].as_str() {
        bail!("cannot trace {stream}:{seq}: {description}");
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&graph)?);
    } else {
        print!("{}", tree(&graph));
    }
    Ok(())
}

/// `STREAM:SEQ` → (stream, seq); the stream is everything before the last colon.
fn parse_target(text: &str) -> Result<(&str, u64)> {
    let (stream, seq) = text.rsplit_once(':').ok_or_else(|| anyhow!("expected STREAM:SEQ, not {text:?}"))?;
    if stream.is_empty() || stream.contains(['.', '*', '>', ' ']) {
        bail!("{stream:?} is not a stream name");
    }
    let seq = seq.parse::<u64>().ok().filter(|seq| *seq > 0).ok_or_else(|| anyhow!("{seq:?} is not a sequence"))?;
    Ok((stream, seq))
}

/// The graph as an indented tree, root first.
pub fn tree(graph: &Value) -> String {
    let nodes: HashMap<&str, &Value> =
        graph["nodes"].as_array().into_iter().flatten().filter_map(|n| Some((n["id"].as_str()?, n))).collect();
    let mut parents: HashMap<&str, Vec<&str>> = HashMap::new();
    for edge in graph["edges"].as_array().into_iter().flatten() {
        if let (Some(from), Some(to)) = (edge["from"].as_str(), edge["to"].as_str()) {
            parents.entry(from).or_default().push(to);
        }
    }
    let root = graph["root"].as_str().unwrap_or_default();
    let mut out = String::new();
    let mut shown = HashSet::new();
    let mut stack = vec![(root, String::new(), String::new())];
    // Depth-first with an explicit stack (children pushed in reverse to print in order); every
    // node is expanded once, so the output is bounded by the graph's edges.
    while let Some((id, branch, indent)) = stack.pop() {
        let first = shown.insert(id);
        out.push_str(&format!("{branch}{}{}\n", line(id, nodes.get(id).copied()), if first { "" } else { " (*)" }));
        if !first {
            continue;
        }
        let children = parents.get(id).map_or(&[][..], Vec::as_slice);
        for (index, child) in children.iter().enumerate().rev() {
            let last = index + 1 == children.len();
            let branch = format!("{indent}{}", if last { "└── " } else { "├── " });
            let below = format!("{indent}{}", if last { "    " } else { "│   " });
            stack.push((child, branch, below));
        }
    }
    if graph["truncated"] == json!(true) {
        out.push_str("(truncated: raise --depth or --nodes, within the server's bounds)\n");
    }
    out
}

/// One node: `STREAM:SEQ subject time producer=... hash=...`, or why it is not there.
fn line(id: &str, node: Option<&Value>) -> String {
    let Some(node) = node else { return id.to_string() };
    let text = |key: &str| node[key].as_str().unwrap_or_default();
    match text("status") {
        "stored" => {
            let mut line = format!("{id}  {}  {}", text("subject"), text("time"));
            if !text("producer").is_empty() {
                line.push_str(&format!("  producer={}", text("producer")));
            }
            if !text("hash").is_empty() {
                let hash = text("hash");
                line.push_str(&format!("  hash={}", &hash[..hash.floor_char_boundary(16)]));
            }
            if node["more_parents"] == json!(true) {
                line.push_str("  (more parents beyond the depth)");
            }
            line
        }
        "deleted" => format!("{id}  (deleted)"),
        "unknown_stream" => format!("{id}  (unknown stream)"),
        "unresolved" => format!("{id}  (unresolved message id)"),
        "unknown" => format!("{id}  (never stored)"),
        other => format!("{id}  ({other})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_stream_and_sequence() {
        assert_eq!(parse_target("ANSWERS:42").unwrap(), ("ANSWERS", 42));
        assert!(parse_target("ANSWERS").is_err());
        assert!(parse_target("ANSWERS:0").is_err());
        assert!(parse_target("a.b:1").is_err());
    }

    #[test]
    fn the_tree_lists_parents_below_children_and_marks_repeats() {
        let graph = json!({
            "root": "A:1",
            "nodes": [
                {"id": "A:1", "status": "stored", "subject": "rag.answer", "time": "t1", "producer": "p", "hash": "0123456789abcdef0123"},
                {"id": "R:1", "status": "stored", "subject": "rag.retrieval", "time": "t0"},
                {"id": "Q:1", "status": "deleted"},
            ],
            "edges": [{"from": "A:1", "to": "R:1"}, {"from": "A:1", "to": "Q:1"}, {"from": "R:1", "to": "Q:1"}],
            "truncated": false,
        });
        let expected = "A:1  rag.answer  t1  producer=p  hash=0123456789abcdef\n\
                        ├── R:1  rag.retrieval  t0\n\
                        │   └── Q:1  (deleted)\n\
                        └── Q:1  (deleted) (*)\n";
        assert_eq!(tree(&graph), expected);
    }
}
