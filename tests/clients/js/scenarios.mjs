// Consumer scenarios with the real @nats-io/jetstream / @nats-io/kv clients.
//
//   node scenarios.mjs <nats-url> <scenario>
//
// Each scenario sets up its own stream, does its work, and prints exactly one JSON line on
// stdout: {"ok": true, ...observations} or {"ok": false, "error": "..."} (exit status 1).
// The observations are asserted by tests/clients/test_nats_js.py against jetlog and against a
// real nats-server -js. API requests time out after 3 s so an unimplemented server fails fast.

import { connect } from "@nats-io/transport-node";
import { AckPolicy, DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";

const API_TIMEOUT = 3000;
const td = new TextDecoder();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function withTimeout(p, ms, what) {
  let t;
  return Promise.race([
    p.finally(() => clearTimeout(t)),
    new Promise((_, rej) => {
      t = setTimeout(() => rej(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]);
}

function view(m) {
  return {
    subject: m.subject,
    data: td.decode(m.data),
    seq: m.seq,
    stream: m.info.stream,
    consumer: m.info.consumer,
    dseq: m.info.deliverySequence,
    sseq: m.info.streamSequence,
    delivered: m.info.deliveryCount,
    pending: m.info.pending,
    redelivered: m.redelivered,
    ts_ms: Number(m.info.timestampNanos / 1_000_000),
  };
}

function counters(ci) {
  return {
    delivered: [ci.delivered.consumer_seq, ci.delivered.stream_seq],
    ack_floor: [ci.ack_floor.consumer_seq, ci.ack_floor.stream_seq],
    ack_pending: ci.num_ack_pending,
    redelivered: ci.num_redelivered,
    pending: ci.num_pending,
    waiting: ci.num_waiting,
  };
}

// Collect a status() stream into `into` (type -> count, plus the interesting payloads).
function watchStatus(iter, into) {
  (async () => {
    for await (const s of iter.status()) {
      into.counts[s.type] = (into.counts[s.type] || 0) + 1;
      if (s.type === "consumer_deleted" || s.type === "discard" || s.type === "heartbeats_missed") {
        into.events.push(s);
      }
      if (s.type === "heartbeat") {
        into.last_hb = [s.lastConsumerSequence, s.lastStreamSequence];
      }
      if (s.type === "ordered_consumer_recreated" || s.type === "reset") {
        into.events.push({ type: s.type });
      }
    }
  })().catch(() => {});
}

async function setup(nc, name, subjects) {
  const jsm = await jetstreamManager(nc, { timeout: API_TIMEOUT });
  const js = jetstream(nc, { timeout: API_TIMEOUT });
  await jsm.streams.add({ name, subjects });
  return { jsm, js };
}

async function publishN(js, subject, n, prefix = "m", from = 0) {
  for (let i = from; i < from + n; i++) {
    await js.publish(subject, `${prefix}${i}`);
  }
}

// A QueuedIterator can be iterated only once: keep one async iterator per object.
const iterators = new WeakMap();
function iteratorOf(iter) {
  if (!iterators.has(iter)) iterators.set(iter, iter[Symbol.asyncIterator]());
  return iterators.get(iter);
}

async function take(iter, n, ms, what) {
  const out = [];
  const it = iteratorOf(iter);
  while (out.length < n) {
    const r = await withTimeout(it.next(), ms, `${what} (${out.length}/${n} received)`);
    if (r.done) break;
    out.push(r.value);
  }
  return out;
}

// close() resolves once the iterator has been run to its end: close, then drain what is left.
async function finish(iter) {
  const closing = iter.close();
  const it = iteratorOf(iter);
  await withTimeout(
    (async () => {
      for (let r = await it.next(); !r.done; r = await it.next());
    })(),
    3000,
    "the consume iterator to end after close()",
  );
  await withTimeout(closing, 3000, "close()");
}

const scenarios = {
  // fetch({max_messages, expires}): a full batch, a short batch ended by expiry, an empty fetch.
  async fetch(nc) {
    const { jsm, js } = await setup(nc, "S", ["s.>"]);
    await publishN(js, "s.a", 5);
    await jsm.consumers.add("S", { durable_name: "dur", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get("S", "dur");
    const out = {};

    let t0 = Date.now();
    let it = await c.fetch({ max_messages: 3, expires: 2000 });
    const first = [];
    for await (const m of it) {
      first.push(view(m));
      m.ack();
    }
    out.first = first;
    out.first_ms = Date.now() - t0;

    t0 = Date.now();
    it = await c.fetch({ max_messages: 5, expires: 1000 });
    const second = [];
    let last = null;
    for await (const m of it) {
      second.push(view(m));
      last = m;
    }
    out.second = second;
    out.second_ms = Date.now() - t0;
    out.ackack = await last.ackAck(); // true once the server confirms
    out.after_ackack = counters(await c.info());

    t0 = Date.now();
    it = await c.fetch({ max_messages: 2, expires: 1000 });
    let n = 0;
    for await (const _m of it) n++;
    out.empty_count = n;
    out.empty_ms = Date.now() - t0;
    return out;
  },

  // next(): one message, null when nothing arrives before expires, a message published mid-wait.
  async next(nc) {
    const { jsm, js } = await setup(nc, "N", ["n.>"]);
    await publishN(js, "n.a", 2);
    await jsm.consumers.add("N", { durable_name: "nx", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get("N", "nx");
    const out = { got: [] };
    for (let i = 0; i < 2; i++) {
      const m = await c.next({ expires: 1000 });
      out.got.push(view(m));
      await m.ackAck();
    }
    let t0 = Date.now();
    const none = await c.next({ expires: 1000 });
    out.none = none === null;
    out.none_ms = Date.now() - t0;

    t0 = Date.now();
    setTimeout(() => js.publish("n.late", "late").catch(() => {}), 300);
    const late = await c.next({ expires: 3000 });
    out.late = view(late);
    out.late_ms = Date.now() - t0;
    late.ack();
    // +NAK then next(): redelivered with a new delivery sequence.
    await js.publish("n.a", "again");
    const m = await c.next({ expires: 1000 });
    m.nak();
    const r = await c.next({ expires: 2000 });
    out.nak = [view(m), view(r)];
    r.term();
    // +TERM has no confirmation: wait (bounded) until the server shows it, then report.
    let ci = await c.info();
    for (let i = 0; i < 100 && ci.num_ack_pending !== 0; i++) {
      await sleep(20);
      ci = await c.info();
    }
    out.info = counters(ci);
    return out;
  },

  // consume({max_messages}) across an idle period longer than expires: heartbeats keep it alive
  // and messages published afterwards arrive.
  async consume(nc) {
    const { jsm, js } = await setup(nc, "C", ["c.>"]);
    await publishN(js, "c.a", 5);
    await jsm.consumers.add("C", { durable_name: "cons", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get("C", "cons");
    const st = { counts: {}, events: [] };
    const iter = await c.consume({ max_messages: 10, expires: 2000 });
    watchStatus(iter, st);
    const out = {};
    const before = await take(iter, 5, 5000, "messages published before consume");
    for (const m of before) m.ack();
    out.before = before.map(view);
    await sleep(4500); // the scenario: idle for more than two pull expiries
    out.idle_counts = { ...st.counts };
    out.idle_last_hb = st.last_hb || null;
    const t0 = Date.now();
    await publishN(js, "c.b", 3, "late");
    const after = await take(iter, 3, 5000, "messages published after the idle period");
    out.after_ms = Date.now() - t0;
    after[0].ack();
    after[1].ack();
    out.ackack = await after[2].ackAck();
    out.after = after.map(view);
    out.info = counters(await c.info());
    out.events = st.events;
    await finish(iter);
    return out;
  },

  // The consumer is deleted while consume() runs: the client reports it and (with
  // abort_on_missing_resource) the consume ends with an error.
  async consume_deleted(nc) {
    const { jsm, js } = await setup(nc, "CD", ["cd.>"]);
    await publishN(js, "cd.a", 2);
    await jsm.consumers.add("CD", { durable_name: "doomed", ack_policy: AckPolicy.Explicit });
    const c = await js.consumers.get("CD", "doomed");
    const st = { counts: {}, events: [] };
    const iter = await c.consume({ max_messages: 10, expires: 3000, abort_on_missing_resource: true });
    watchStatus(iter, st);
    const got = await take(iter, 2, 5000, "messages before deletion");
    for (const m of got) m.ack();
    await got[1].ackAck();
    const t0 = Date.now();
    await jsm.consumers.delete("CD", "doomed");
    // Drain the iterator: it must end because the consumer is gone.
    const rest = [];
    const it = iteratorOf(iter);
    let thrown = null;
    await withTimeout(
      (async () => {
        try {
          for (let r = await it.next(); !r.done; r = await it.next()) rest.push(view(r.value));
        } catch (err) {
          thrown = `${err.name}: ${err.message}`;
        }
      })(),
      8000,
      "consume() to end after the consumer was deleted",
    );
    const end_ms = Date.now() - t0;
    const closed = await withTimeout(iter.closed(), 2000, "closed()");
    return {
      got: got.map(view),
      rest,
      end_ms,
      thrown,
      closed_error: closed ? `${closed.name}: ${closed.message}` : null,
      events: st.events,
      counts: st.counts,
    };
  },

  // Ordered consumer (js.consumers.get(stream)): fetch + consume, recreated after its server-side
  // consumer is deleted, delivery sequences restarting at 1.
  async ordered(nc) {
    const { jsm, js } = await setup(nc, "O", ["o.>"]);
    await publishN(js, "o.a", 10);
    const oc = await js.consumers.get("O");
    const out = {};
    const f = await oc.fetch({ max_messages: 4, expires: 2000 });
    out.fetched = [];
    for await (const m of f) out.fetched.push(view(m));
    const info = await oc.info(true);
    out.config = {
      ack_policy: info.config.ack_policy,
      deliver_policy: info.config.deliver_policy,
      opt_start_seq: info.config.opt_start_seq ?? null,
      max_deliver: info.config.max_deliver,
      mem_storage: info.config.mem_storage ?? null,
      num_replicas: info.config.num_replicas,
      inactive_threshold: info.config.inactive_threshold,
      durable: info.config.durable_name ?? null,
    };

    // A second ordered consumer (one initialised for fetch cannot consume), from seq 5.
    const oc2 = await js.consumers.get("O", { opt_start_seq: 5 });
    const st = { counts: {}, events: [] };
    const iter = await oc2.consume({ max_messages: 20, expires: 1000 });
    watchStatus(iter, st);
    const first = await take(iter, 6, 5000, "ordered consume of the rest");
    out.consumed = first.map(view);
    const name = (await oc2.info(true)).name;
    out.name_before = name;
    await jsm.consumers.delete("O", name);
    const t0 = Date.now();
    await publishN(js, "o.b", 5, "n");
    const more = await take(iter, 5, 10000, "ordered consume after its consumer was deleted");
    out.after_delete = more.map(view);
    out.recover_ms = Date.now() - t0;
    out.name_after = (await oc2.info(true)).name;
    const names = [];
    for await (const n of jsm.consumers.list("O")) names.push(n.name);
    out.server_consumers = names;
    out.events = st.events;
    await finish(iter);
    return out;
  },

  // @nats-io/kv: put/get, watch (initial values, then live updates including a delete), keys.
  async kv(nc) {
    const js = jetstream(nc, { timeout: API_TIMEOUT });
    const kvm = new Kvm(js);
    const kv = await kvm.create("cfg", { history: 5 });
    const out = {};
    out.revs = [await kv.put("a", "1"), await kv.put("b", "2"), await kv.put("a", "3")];
    const e = await kv.get("a");
    out.get = { key: e.key, value: e.string(), revision: e.revision, operation: e.operation };
    const w = await kv.watch();
    const init = await take(w, 2, 5000, "initial watch values");
    // One change at a time, so each update is delivered with nothing else pending.
    await kv.put("c", "4");
    const live = await take(w, 1, 5000, "live put");
    await kv.delete("b");
    live.push(...(await take(w, 1, 5000, "live delete")));
    const ev = (x) => ({
      key: x.key,
      value: x.string(),
      revision: x.revision,
      operation: x.operation,
      delta: x.delta ?? null,
      isUpdate: x.isUpdate,
    });
    out.init = init.map(ev);
    out.live = live.map(ev);
    w.stop();
    const keys = [];
    for await (const k of await kv.keys()) keys.push(k);
    out.keys = keys.sort();
    const hist = [];
    for await (const h of await kv.history({ key: "a" })) hist.push(ev(h));
    out.history_a = hist;
    const gone = await kv.get("b");
    out.get_deleted = gone ? { operation: gone.operation, revision: gone.revision } : null;
    return out;
  },
};

async function main() {
  const [url, name] = process.argv.slice(2);
  const fn = scenarios[name];
  if (!url || !fn) {
    throw new Error(`usage: node scenarios.mjs <url> <${Object.keys(scenarios).join("|")}>`);
  }
  const nc = await connect({ servers: url, timeout: 3000 });
  try {
    return await fn(nc);
  } finally {
    await nc.close().catch(() => {});
  }
}

main().then(
  (out) => {
    process.stdout.write(JSON.stringify({ ok: true, ...out }) + "\n");
    process.exit(0);
  },
  (err) => {
    const msg = err && err.stack ? err.stack : String(err);
    process.stdout.write(JSON.stringify({ ok: false, error: msg }) + "\n");
    process.exit(1);
  },
);
