// nats.js Key-Value over TCP, as a Node service would use it: `connect` from
// @nats-io/transport-node, `Kvm` from @nats-io/kv.
// Usage: node kv.mjs nats://host:port
// Prints one JSON line with what it saw; tests/python/test_js_clients.py checks it.
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";

const nc = await connect({ servers: process.argv[2], timeout: 5000 });
const kv = await new Kvm(nc).create("jsbucket", { history: 3 });

await kv.put("a", "a1");
await kv.put("b", "b1");
await kv.put("a", "a2");
const got = await kv.get("a");
await kv.delete("b");
const deleted = await kv.get("b");

const watch = await kv.watch();
const seen = [];
const done = (async () => {
  for await (const e of watch) {
    seen.push({ key: e.key, value: e.string(), operation: e.operation, delta: e.delta, update: e.isUpdate });
    if (e.key === "c") break;
  }
})();
// The update is written once the initial values have arrived.
while (seen.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
await kv.put("c", "c1");
await Promise.race([done, new Promise((_, reject) => setTimeout(() => reject(new Error("no update")), 5000))]);
watch.stop();

const keys = [];
for await (const k of await kv.keys()) keys.push(k);

console.log(
  JSON.stringify({
    get: { value: got.string(), revision: got.revision },
    deleted: deleted?.operation ?? null,
    watch: seen,
    keys: keys.sort(),
  }),
);
await nc.close();
