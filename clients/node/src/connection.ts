// What producers and workers share: broker endpoints tried in turn, CurveZMQ
// keys read from the files `dueq keygen` writes, a DEALER socket to a broker
// and the one send at a time a zeromq socket allows.
import { readFileSync } from "node:fs";
import { parse as parseToml } from "smol-toml";
import * as zmq from "zeromq";

/** A client's CurveZMQ keys: the broker's public key and the client's own pair (40-character Z85 texts). */
export interface CurveKeys {
  serverPublic: string;
  public: string;
  secret: string;
}

function readKeyFile(path: string, names: string[]): Record<string, string> {
  let table: Record<string, unknown>;
  try {
    table = parseToml(readFileSync(path, "utf8"));
  } catch (error) {
    throw new Error(`${path}: not a dueq key file: ${(error as Error).message}`);
  }
  const keys: Record<string, string> = {};
  for (const name of names) {
    const value = table[name];
    if (typeof value !== "string" || value.length !== 40) throw new Error(`${path}: \`${name}\` is not a 40-character Z85 key`);
    keys[name] = value;
  }
  return keys;
}

/** Reads the broker's `NAME.pub` and the client's `NAME.key`. */
export function curveKeysFromFiles(serverPub: string, clientKey: string): CurveKeys {
  const server = readKeyFile(serverPub, ["public"]);
  const own = readKeyFile(clientKey, ["public", "secret"]);
  return { serverPublic: server["public"]!, public: own["public"]!, secret: own["secret"]! };
}

/** Broker endpoints used one at a time (docs/protocol.md §1). */
export class Endpoints {
  static readonly MAX_ENDPOINTS = 16;
  readonly all: string[];
  private index = 0;

  constructor(endpoints: string | string[]) {
    const listed = typeof endpoints === "string" ? [endpoints] : endpoints;
    this.all = listed.flatMap((item) => item.split(",")).map((e) => e.trim()).filter((e) => e.length > 0);
    if (this.all.length === 0) throw new Error("no broker endpoint given");
  }

  get current(): string {
    return this.all[this.index]!;
  }

  /** Moves to the next; true when a whole pass over the list just ended. */
  advance(): boolean {
    this.index = (this.index + 1) % this.all.length;
    return this.index === 0;
  }

  moveTo(endpoint: string): boolean {
    const at = this.all.indexOf(endpoint);
    if (at < 0) return false;
    this.index = at;
    return true;
  }

  /** Adds the leader a standby named (its not_leader message) when it is not listed:
   * once, at most MAX_ENDPOINTS in all, never a wildcard address. */
  learn(endpoint: string): boolean {
    if (!/^(tcp|ipc):\/\//.test(endpoint) || endpoint.includes("://*:") || endpoint.includes("://0.0.0.0:")) return false;
    if (this.all.includes(endpoint) || this.all.length >= Endpoints.MAX_ENDPOINTS) return false;
    this.all.push(endpoint);
    return true;
  }
}

export function openDealer(endpoint: string, routingId: string | undefined, keys: CurveKeys | undefined): zmq.Dealer {
  const socket = new zmq.Dealer({ linger: 0, sendTimeout: 0 });
  if (routingId !== undefined) socket.routingId = routingId;
  if (keys !== undefined) {
    socket.curveServerKey = keys.serverPublic;
    socket.curvePublicKey = keys.public;
    socket.curveSecretKey = keys.secret;
  }
  socket.connect(endpoint);
  return socket;
}

/**
 * A zeromq socket takes one send at a time: frames wait their turn here. A
 * frame the socket cannot take at once (no broker connected yet) is dropped,
 * as a worker's DONTWAIT send is: HELLO and heartbeats are sent again, and
 * results after WELCOME.
 */
export class Sender {
  private queue: Uint8Array[] = [];
  private busy = false;
  constructor(private readonly socket: zmq.Dealer) {}

  send(frame: Uint8Array): void {
    this.queue.push(frame);
    if (!this.busy) void this.flush();
  }

  /** Resolves once every frame given so far has left (or was dropped). */
  async idle(): Promise<void> {
    while (this.busy) await new Promise((resolve) => setTimeout(resolve, 1));
  }

  private async flush(): Promise<void> {
    this.busy = true;
    while (this.queue.length > 0) {
      const frame = this.queue.shift()!;
      try {
        await this.socket.send(frame);
      } catch {
        // EAGAIN (not connected) or a closed socket: dropped (see above).
      }
    }
    this.busy = false;
  }
}
