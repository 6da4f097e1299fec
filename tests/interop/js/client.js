// nats.js (npm `nats` 2.x, the official JavaScript client) doing what an edge application does with
// what the provider created: read KV buckets (get, keys, watch), create a KV mirror, fetch from a
// durable consumer, put and read objects of an object store. Driven by tests/interop; prints one JSON document per step on stdout.
//
//   node client.js <command> '<json args>'
//
// The server and credentials come from the environment, never the command line:
// NATS_URL, NATS_USER, NATS_PASSWORD.
"use strict";

const crypto = require("crypto");
const { connect, StringCodec } = require("nats");

const sc = StringCodec();

function emit(doc) {
  process.stdout.write(JSON.stringify(doc) + "\n");
}

function entryJson(entry) {
  if (!entry) {
    return null;
  }
  return {
    key: entry.key,
    value: sc.decode(entry.value),
    revision: entry.revision,
    operation: entry.operation,
  };
}

// Bind to an existing bucket; views.kv() would create a missing one, so check it exists first.
async function openBucket(nc, domain, bucket) {
  const jsm = await nc.jetstreamManager({ domain });
  await jsm.streams.info(`KV_${bucket}`); // throws "stream not found"
  return nc.jetstream({ domain }).views.kv(bucket);
}

// Read keys: get each, list all, and watch until every expected key shows its expected value.
async function read(nc, args) {
  const kv = await openBucket(nc, args.domain, args.bucket);
  const out = { get: {}, keys: [], status: {} };
  for (const key of args.get || []) {
    out.get[key] = entryJson(await kv.get(key));
  }
  const keys = await kv.keys();
  for await (const key of keys) {
    out.keys.push(key);
  }
  out.keys.sort();
  const status = await kv.status();
  out.status = { bucket: status.bucket, values: status.values, streamInfo: { name: status.streamInfo.config.name } };
  if (args.watch) {
    out.watch = await watch(kv, args.watch);
  }
  return out;
}

// Watch ``key`` (or all keys); print {"watching": true} once the stored values have been delivered,
// so the test can write; return the entries seen until ``until`` (key -> value) is satisfied.
async function watch(kv, spec) {
  const seen = [];
  const want = Object.assign({}, spec.until || {});
  const iter = await kv.watch({
    key: spec.key || ">",
    initializedFn: () => emit({ watching: true }),
  });
  const timer = setTimeout(() => iter.stop(), (spec.timeout || 20) * 1000);
  for await (const entry of iter) {
    seen.push(entryJson(entry));
    if (want[entry.key] !== undefined && entry.operation === "PUT" && sc.decode(entry.value) === want[entry.key]) {
      delete want[entry.key];
    }
    if (Object.keys(want).length === 0) {
      break;
    }
  }
  clearTimeout(timer);
  return { entries: seen, missing: want };
}

// Create a bucket as an application would with nats.js (a mirror: {name, domain}).
async function createBucket(nc, args) {
  const opts = Object.assign({}, args.options || {});
  const kv = await nc.jetstream({ domain: args.domain }).views.kv(args.bucket, opts);
  const jsm = await nc.jetstreamManager({ domain: args.domain });
  const info = await jsm.streams.info(`KV_${args.bucket}`);
  const out = { config: info.config };
  for (const [key, value] of Object.entries(args.put || {})) {
    out.revision = out.revision || {};
    out.revision[key] = await kv.put(key, sc.encode(value));
  }
  return out;
}

// Fetch from a durable pull consumer and ack each message.
async function fetch(nc, args) {
  const js = nc.jetstream({ domain: args.domain });
  const consumer = await js.consumers.get(args.stream, args.consumer);
  const messages = [];
  const iter = await consumer.fetch({ max_messages: args.max, expires: (args.expires || 5) * 1000 });
  for await (const m of iter) {
    messages.push({
      subject: m.subject,
      stream_seq: m.seq,
      data: sc.decode(m.data),
      msg_id: m.headers ? m.headers.get("Nats-Msg-Id") : null,
    });
    m.ack();
    if (messages.length >= args.max) {
      break;
    }
  }
  await nc.flush();
  const info = await consumer.info();
  return { messages, num_pending: info.num_pending };
}

// Bind to an existing object store (views.os() would create a missing one).
async function openStore(nc, domain, bucket) {
  const jsm = await nc.jetstreamManager({ domain });
  await jsm.streams.info(`OBJ_${bucket}`); // throws "stream not found"
  return nc.jetstream({ domain }).views.os(bucket);
}

// Read objects: each one's info and (unless ``content`` is false) content, its SHA-256 and size (nats.js
// verifying the digest), and (unless ``list`` is false) the list.
async function readObjects(nc, args) {
  const os = await openStore(nc, args.domain, args.bucket);
  const out = { objects: {}, list: [] };
  for (const name of args.names || []) {
    const info = await os.info(name);
    const data = args.content === false ? null : await os.getBlob(name); // rejects a digest mismatch
    out.objects[name] = info && {
      size: info.size,
      chunks: info.chunks,
      digest: info.digest,
      revision: info.revision,
      sha256: data && crypto.createHash("sha256").update(data).digest("hex"),
      length: data && data.length,
    };
  }
  for (const info of args.list === false ? [] : await os.list()) {
    out.list.push(info.name);
  }
  out.list.sort();
  return out;
}

// Put an object of ``size`` pseudo-random bytes (or ``text``) as an application would.
async function putObject(nc, args) {
  const os = await openStore(nc, args.domain, args.bucket);
  const data = args.text !== undefined ? Buffer.from(args.text) : crypto.randomBytes(args.size);
  const info = await os.putBlob({ name: args.name, description: args.description }, new Uint8Array(data));
  return {
    size: info.size,
    chunks: info.chunks,
    digest: info.digest,
    revision: info.revision,
    sha256: crypto.createHash("sha256").update(data).digest("hex"),
  };
}

const COMMANDS = { read, "create-bucket": createBucket, fetch, "read-objects": readObjects, "put-object": putObject };

async function main() {
  const [command, raw] = process.argv.slice(2);
  const run = COMMANDS[command];
  if (!run) {
    throw new Error(`unknown command ${command}: use one of ${Object.keys(COMMANDS).join(", ")}`);
  }
  const nc = await connect({
    servers: process.env.NATS_URL,
    user: process.env.NATS_USER,
    pass: process.env.NATS_PASSWORD,
    name: "interop-nats-js",
  });
  try {
    emit({ result: await run(nc, JSON.parse(raw || "{}")) });
  } finally {
    await nc.close();
  }
}

main().catch((err) => {
  process.stderr.write(`nats.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
