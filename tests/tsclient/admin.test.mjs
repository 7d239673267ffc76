// Calls a running sluice gateway's sluice.admin.v1.AdminService through the TypeScript client generated
// into gen/ts by protoc-gen-es (buf.gen.ts.yaml), over Connect (HTTP/1.1, JSON and binary) and gRPC (h2c).
// It proves that clients in other languages can be generated from sluice's protos and work as-is.
//
// Environment:
//   SLUICE_URL             gateway base URL, e.g. http://127.0.0.1:8080 (required)
//   SLUICE_ADMIN_API_KEY   admin API key; when set, calls send it and a call without it must be Unauthenticated
//   SLUICE_EXPECT_WORKERS  comma-separated worker URLs the gateway must list (empty: none)
//   SLUICE_EXPECT_LIMIT    admission limit the gateway starts with (optional; checked when set)
//
// Run: node --test tests/tsclient/admin.test.mjs   (tests/tsclient/tsclient_test.go runs it against an in-process gateway)
// The last test leaves max_inflight_per_worker at 7 and queue_timeout at 2.5s, which the Go side checks.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { register } from "node:module";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { BinaryReader } from "@bufbuild/protobuf/wire";

// The generated code lives outside this package; the hook lets it find @bufbuild/protobuf here.
register("./gen-resolve.mjs", import.meta.url);
const { AdminService } = await import("../../gen/ts/sluice/admin/v1/admin_pb.js");

const baseUrl = process.env.SLUICE_URL;
if (!baseUrl) {
  throw new Error("SLUICE_URL is not set: point it at a running sluice gateway, e.g. http://127.0.0.1:8080");
}
const apiKey = process.env.SLUICE_ADMIN_API_KEY ?? "";
const expectWorkers = (process.env.SLUICE_EXPECT_WORKERS ?? "").split(",").map((s) => s.trim()).filter(Boolean).sort();
const expectLimit = process.env.SLUICE_EXPECT_LIMIT;

// A bounded deadline per call, so a gateway that stops answering fails the test instead of hanging it.
const timeoutMs = 10_000;

function withKey(key) {
  return (next) => async (req) => {
    if (key) {
      req.header.set("Authorization", `Bearer ${key}`);
    }
    return next(req);
  };
}

// One HTTP/2 session manager per gRPC transport, aborted at the end so node can exit.
const sessions = [];
function grpcTransport(key) {
  const sessionManager = new Http2SessionManager(baseUrl);
  sessions.push(sessionManager);
  return createGrpcTransport({ baseUrl, httpVersion: "2", sessionManager, defaultTimeoutMs: timeoutMs, interceptors: [withKey(key)] });
}
after(() => {
  for (const s of sessions) {
    s.abort();
  }
});

const transports = [
  { name: "connect json http/1.1", make: (key) => createConnectTransport({ baseUrl, httpVersion: "1.1", defaultTimeoutMs: timeoutMs, interceptors: [withKey(key)] }) },
  { name: "connect binary http/1.1", make: (key) => createConnectTransport({ baseUrl, httpVersion: "1.1", useBinaryFormat: true, defaultTimeoutMs: timeoutMs, interceptors: [withKey(key)] }) },
  { name: "grpc h2c", make: grpcTransport },
];

// errorInfoReasons decodes the google.rpc.ErrorInfo details of err (field 1 is reason, field 2 domain) by hand:
// the googleapis protos are not vendored, and this is all a client needs of them.
function errorInfoReasons(err) {
  const reasons = [];
  for (const d of err.details) {
    if (d.type !== "google.rpc.ErrorInfo") {
      continue;
    }
    const r = new BinaryReader(d.value);
    let reason = "";
    let domain = "";
    while (r.pos < r.len) {
      const [no, wireType] = r.tag();
      if (no === 1) reason = r.string();
      else if (no === 2) domain = r.string();
      else r.skip(wireType, no);
    }
    reasons.push(`${domain}/${reason}`);
  }
  return reasons;
}

async function rejects(promise, code, reason) {
  await assert.rejects(promise, (err) => {
    assert.ok(err instanceof ConnectError, `want ConnectError, got ${err}`);
    assert.equal(Code[err.code], Code[code], `code (message: ${err.rawMessage})`);
    assert.deepEqual(errorInfoReasons(err), [`sluice.dev/${reason}`], "ErrorInfo details");
    return true;
  });
}

for (const t of transports) {
  describe(t.name, () => {
    const client = createClient(AdminService, t.make(apiKey));

    test("ListWorkers lists the registered workers", async () => {
      const res = await client.listWorkers({});
      const urls = res.workers.map((w) => w.url).sort();
      assert.deepEqual(urls, expectWorkers);
      for (const w of res.workers) {
        assert.ok(w.id, `worker ${w.url} has an id`);
        assert.ok(["prefill", "decode", "regular"].includes(w.role), `role ${w.role}`);
        assert.equal(typeof w.load, "number", "admin integers are 32-bit: load decodes to a number");
      }
    });

    test("ListWorkers filters by role", async () => {
      const all = await client.listWorkers({});
      for (const role of ["prefill", "decode"]) {
        const res = await client.listWorkers({ role });
        const want = all.workers.filter((w) => w.role === role).map((w) => w.id).sort();
        assert.deepEqual(res.workers.map((w) => w.id).sort(), want, role);
      }
    });

    test("GetAdmission reads the settings", async () => {
      const res = await client.getAdmission({});
      assert.ok(res.status, "status is set");
      assert.ok(res.status.settings, "settings are set");
      if (expectLimit !== undefined) {
        assert.equal(res.status.settings.maxInflightPerWorker, Number(expectLimit));
        assert.equal(res.status.enabled, Number(expectLimit) > 0);
      }
    });

    test("UpdateAdmission rejects a negative queue_size with InvalidArgument", async () => {
      await rejects(client.updateAdmission({ queueSize: -1 }), Code.InvalidArgument, "invalid_request");
    });

    test("GetWorker of an unknown id is NotFound", async () => {
      await assert.rejects(client.getWorker({ id: "no-such-worker" }), (err) => {
        assert.equal(Code[ConnectError.from(err).code], Code[Code.NotFound]);
        return true;
      });
    });

    test("a call without the admin key is Unauthenticated", { skip: apiKey ? false : "SLUICE_ADMIN_API_KEY not set" }, async () => {
      await rejects(createClient(AdminService, t.make("")).listWorkers({}), Code.Unauthenticated, "invalid_api_key");
      await rejects(createClient(AdminService, t.make(`${apiKey}-wrong`)).getAdmission({}), Code.Unauthenticated, "invalid_api_key");
    });
  });
}

// Writes over Connect, reads back over Connect and gRPC: both protocols see the same live settings.
test("UpdateAdmission changes the limit, visible over every transport", async () => {
  const writer = createClient(AdminService, transports[0].make(apiKey));
  const res = await writer.updateAdmission({ maxInflightPerWorker: 7, queueTimeout: { seconds: 2n, nanos: 500_000_000 } });
  assert.equal(res.status.settings.maxInflightPerWorker, 7);
  assert.equal(res.status.enabled, true);
  for (const t of transports) {
    const got = await createClient(AdminService, t.make(apiKey)).getAdmission({});
    assert.equal(got.status.settings.maxInflightPerWorker, 7, t.name);
    assert.equal(got.status.settings.queueTimeout.seconds, 2n, t.name);
    assert.equal(got.status.settings.queueTimeout.nanos, 500_000_000, t.name);
  }
});
