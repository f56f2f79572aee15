// TLS with client certificates, and the rate limit's RetryInfo, against
// a real gateway. The certificates are made for the run by openssl.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client, UnauthenticatedError } from "../src/index.js";
import { start, type Gateway } from "./gateway.js";

let n = 0;
const name = () => `ts-tls/${process.pid}/${++n}`;

/** pki makes a throwaway CA, a server certificate for 127.0.0.1 and a client certificate of tenant-a. */
function pki(dir: string): Record<"ca" | "caKey" | "cert" | "key" | "clientCert" | "clientKey", string> {
  const f = (x: string) => join(dir, x);
  const ssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "pipe" });
  ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=leasegate test CA", "-keyout", f("ca.key"), "-out", f("ca.pem"));
  writeFileSync(f("server.ext"), "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n");
  ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", f("server.key"), "-out", f("server.csr"));
  ssl("x509", "-req", "-in", f("server.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", f("server.ext"), "-out", f("server.pem"));
  writeFileSync(f("client.ext"), "extendedKeyUsage=clientAuth\n");
  ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/O=tenant-a/CN=sdk-test", "-keyout", f("client.key"), "-out", f("client.csr"));
  ssl("x509", "-req", "-in", f("client.csr"), "-CA", f("ca.pem"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "1", "-extfile", f("client.ext"), "-out", f("client.pem"));
  return { ca: f("ca.pem"), caKey: f("ca.key"), cert: f("server.pem"), key: f("server.key"), clientCert: f("client.pem"), clientKey: f("client.key") };
}

describe("TLS with client certificates", () => {
  let gw: Gateway;
  let certs: ReturnType<typeof pki>;
  before(async () => {
    certs = pki(mkdtempSync(join(tmpdir(), "leasegate-pki-")));
    gw = await start("--tls-cert", certs.cert, "--tls-key", certs.key, "--tls-client-ca", certs.ca);
  });
  after(async () => {
    await gw?.stop();
  });

  test("a client certificate the gateway trusts is served", async () => {
    const url = gw.url.replace("http://", "https://");
    const c = new Client([url], { tls: { ca: readFileSync(certs.ca), cert: readFileSync(certs.clientCert), key: readFileSync(certs.clientKey) } });
    const l = await c.tryAcquire(name(), { ttlMs: 5000 });
    assert.ok(l.token > 0n);
    await l.release();
  });

  test("without a client certificate the call fails with UnauthenticatedError", async () => {
    const url = gw.url.replace("http://", "https://");
    const c = new Client([url], { tls: { ca: readFileSync(certs.ca) } });
    await assert.rejects(c.tryAcquire(name(), { ttlMs: 5000 }), UnauthenticatedError);
  });

  test("a gateway certificate the client does not trust fails with UnauthenticatedError", async () => {
    const url = gw.url.replace("http://", "https://");
    const c = new Client([url], { tls: { cert: readFileSync(certs.clientCert), key: readFileSync(certs.clientKey) } });
    await assert.rejects(c.tryAcquire(name(), { ttlMs: 5000 }), UnauthenticatedError);
  });
});

describe("rate limits", () => {
  let gw: Gateway;
  before(async () => {
    gw = await start("--tenant-acquire-rate", "1", "--tenant-acquire-burst", "1");
  });
  after(async () => {
    await gw?.stop();
  });

  test("a rate-limited call waits the gateway's delay and succeeds on the same gateway", async () => {
    const c = new Client([gw.url]);
    const a = await c.tryAcquire(name(), { ttlMs: 5000 });
    const t0 = performance.now();
    const b = await c.tryAcquire(name(), { ttlMs: 5000 }); // refused at first, with a RetryInfo of about 1 s
    const waited = performance.now() - t0;
    assert.ok(waited >= 500, `the second try waited ${waited} ms; want the gateway's delay`);
    await a.release();
    await b.release();
  });
});
