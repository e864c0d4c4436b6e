// nats.js Object Store (@nats-io/obj), over TCP (@nats-io/transport-node's `connect`) or over
// WebSocket (@nats-io/nats-core's `wsconnect`, as a browser app would).
// Usage: node [--experimental-websocket] objstore.mjs <tcp|ws> <url> <bucket>
// The bucket already holds "from-py" (put by nats-py); this script reads it, puts "big" (streamed
// in pieces, several chunks) and "small", watches, lists and deletes. Prints one JSON line with
// what it saw; tests/python/test_js_clients.py checks it and reads "big" back with nats-py.
import { createHash } from "node:crypto";
import { connect } from "@nats-io/transport-node";
import { wsconnect } from "@nats-io/nats-core";
import { Objm } from "@nats-io/obj";

const [transport, url, bucket] = process.argv.slice(2);
const nc = transport === "ws" ? await wsconnect({ servers: url, timeout: 5000 }) : await connect({ servers: url, timeout: 5000 });
const store = await new Objm(nc).open(bucket);

const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");
const concat = (parts) => Buffer.concat(parts.map((part) => Buffer.from(part)));

async function readAll(result) {
  const parts = [];
  for await (const part of result.data) parts.push(part);
  // Rejects when the digest the client computed differs from the one in the object's info.
  const failed = await result.error;
  if (failed) throw failed;
  return concat(parts);
}

// Updates only (the default): what changes after the watch starts.
const watch = await store.watch();
const seen = [];
const watching = (async () => {
  for await (const info of watch) {
    seen.push({ name: info.name, deleted: info.deleted, size: info.size, update: info.isUpdate });
    if (info.name === "small" && info.deleted) break;
  }
})();

const fromPy = await readAll(await store.get("from-py"));

// The same bytes the Python side expects: (i * 31) % 251, 300 KiB + 7, 64 KiB chunks.
const big = new Uint8Array(300 * 1024 + 7).map((_, i) => (i * 31) % 251);
const pieces = new ReadableStream({
  start(controller) {
    for (let at = 0; at < big.length; at += 50_000) controller.enqueue(big.subarray(at, at + 50_000));
    controller.close();
  },
});
const put = await store.put({ name: "big", options: { max_chunk_size: 64 * 1024 } }, pieces);
const bigBack = await readAll(await store.get("big"));
await store.putBlob({ name: "small" }, new TextEncoder().encode("hello object"));
const small = await store.getBlob("small");
const listed = (await store.list()).map((info) => info.name).sort();
await store.delete("small");
const afterDelete = (await store.list()).map((info) => info.name).sort();
const missing = await store.get("small");

await Promise.race([watching, new Promise((_, reject) => setTimeout(() => reject(new Error("watch saw no delete")), 5000))]);
watch.stop();

console.log(
  JSON.stringify({
    from_py: { size: fromPy.length, sha256: sha256(fromPy) },
    put: { size: put.size, chunks: put.chunks, digest: put.digest },
    big_back: { size: bigBack.length, sha256: sha256(bigBack) },
    small: new TextDecoder().decode(small),
    listed,
    after_delete: afterDelete,
    missing: missing === null,
    watch: seen,
  }),
);
await nc.close();
