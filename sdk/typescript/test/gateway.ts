// A real leasegate gateway on its embedded etcd, on a loopback port, for
// the tests: the binary of LEASEGATE_BIN, or one built from this
// repository once per test process.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createServer, type AddressInfo } from "node:net";

const repo = resolve(import.meta.dirname, "../../../..");
let built: string | undefined;

/** binary returns the gateway binary, building it on first use. */
export function binary(): string {
  if (process.env.LEASEGATE_BIN) return process.env.LEASEGATE_BIN;
  if (!built) {
    const dir = mkdtempSync(join(tmpdir(), "leasegate-bin-"));
    built = join(dir, "leasegate");
    execFileSync("go", ["build", "-o", built, "./cmd/leasegate"], { cwd: repo, stdio: "inherit" });
  }
  return built;
}

/** Gateway is one running gateway process. */
export interface Gateway {
  /** "http://127.0.0.1:PORT". */
  url: string;
  proc: ChildProcess;
  /** Kills the process at once (SIGKILL), as a crash. */
  kill(): Promise<void>;
  /** Stops it and removes its data. */
  stop(): Promise<void>;
}

/** freePort returns a loopback port nothing listens on now. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** start runs a gateway on its embedded etcd (one shard), with extra flags, and resolves once it serves. */
export function start(...flags: string[]): Promise<Gateway> {
  return run(["--shards", "1", ...flags]);
}

/** startOn runs a gateway on the etcd of another one's --embedded-etcd-listen (its shard-0). */
export function startOn(etcdUrl: string, ...flags: string[]): Promise<Gateway> {
  return run(["--etcd", `shard-0=${etcdUrl}`, ...flags]);
}

async function run(flags: string[]): Promise<Gateway> {
  const bin = binary();
  if (!existsSync(bin)) throw new Error(`no gateway binary at ${bin}`);
  const data = mkdtempSync(join(tmpdir(), "leasegate-data-"));
  const proc = spawn(bin, ["--listen", "127.0.0.1:0", "--data-dir", data, ...flags], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const exited = new Promise<void>((r) => proc.once("exit", () => r()));
  const url = await new Promise<string>((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error("the gateway did not serve within 60s:\n" + log)), 60_000);
    const onData = (b: Buffer) => {
      log += b.toString();
      for (const line of log.split("\n")) {
        if (!line.includes('"leasegate serving"')) continue;
        try {
          const addr = JSON.parse(line).addr as string;
          clearTimeout(timer);
          resolveUrl("http://" + addr);
          return;
        } catch {
          // A line still being written.
        }
      }
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the gateway exited (${code}) before serving:\n${log}`));
    });
  });
  const kill = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
    await exited;
  };
  return {
    url,
    proc,
    kill,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(t);
      rmSync(data, { recursive: true, force: true });
    },
  };
}
