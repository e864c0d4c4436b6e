// nats.js over WebSocket, as a browser app would use it: `wsconnect` from @nats-io/nats-core.
// Usage: node --experimental-websocket websocket.mjs ws://host:port
// Prints one JSON line with what it saw; the pytest in tests/python/test_websocket.py checks it.
import { headers, wsconnect } from "@nats-io/nats-core";

const url = process.argv[2];
const nc = await wsconnect({ servers: url, timeout: 5000 });

const sub = nc.subscribe("js.ws.greet", { max: 1 });
const echo = nc.subscribe("js.ws.echo");
(async () => {
  for await (const m of echo) m.respond(`echo: ${m.string()}`);
})();
await nc.flush();

const h = headers();
h.set("X-Client", "nats.js");
nc.publish("js.ws.greet", "hello from node", { headers: h });
let message;
for await (const m of sub) message = m;

const reply = await nc.request("js.ws.echo", "ping", { timeout: 5000 });
console.log(
  JSON.stringify({
    message: message.string(),
    header: message.headers.get("X-Client"),
    reply: reply.string(),
    server_port: nc.info.port,
  }),
);
await nc.close();
