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

// A large, compressible message both ways (compressed when permessage-deflate is negotiated).
const big = "nats.js over websocket ".repeat(4000);
const bigReply = await nc.request("js.ws.echo", big, { timeout: 5000 });

// What the runtime's own WebSocket negotiated with this server (its offer is the same one).
const extensions = await new Promise((resolve) => {
  const ws = new WebSocket(url);
  ws.onopen = () => {
    resolve(ws.extensions);
    ws.close();
  };
  ws.onerror = () => resolve("error");
});

console.log(
  JSON.stringify({
    message: message.string(),
    header: message.headers.get("X-Client"),
    reply: reply.string(),
    big_reply_intact: bigReply.string() === `echo: ${big}`,
    extensions,
    server_port: nc.info.port,
  }),
);
await nc.close();
