/**
 * TypeScript client of the memstream gateway, typed by the gateway's OpenAPI document
 * (src/openapi.ts is generated from openapi.json: `npm run types`).
 *
 *   const memory = new MemoryClient({ baseUrl: "http://127.0.0.1:8080", apiKey });
 *   await memory.add("user-1", [{ role: "user", content: "I moved to Porto in March." }]);
 *   const found = await memory.recall("user-1", "Where do I live?", { budgetTokens: 500 });
 *   console.log(found.context);
 *
 * Errors are MemstreamError subclasses carrying the server's reason; 429 and 503 are retried
 * after the server's Retry-After.
 */
import type { components } from "./openapi.js";

type Schemas = components["schemas"];
export type ChatMessage = Schemas["ChatMessage"];
export type TurnsAccepted = Schemas["TurnsAccepted"];
export type RecallResponse = Schemas["RecallResponse"];
export type AnswerResponse = Schemas["AnswerResponse"];
export type Timeline = Schemas["Timeline"];
export type Memory = Schemas["Memory"];
export type MemoryPage = Schemas["MemoryPage"];
export type MemoryDeleted = Schemas["MemoryDeleted"];
export type ToolResult = Schemas["ToolResult"];
export type TurnStored = Schemas["TurnStored"];
export type DeleteResult = Schemas["DeleteResult"];
export type TurnIn = Schemas["TurnIn"];

export class MemstreamError extends Error {
  constructor(
    readonly status: number,
    readonly detail: unknown,
    readonly retryAfter: number | null = null,
  ) {
    super(`${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.name = new.target.name;
  }
}
/** 401 (no key, or an unknown one) or 403 (a turn names another tenant). */
export class AuthenticationError extends MemstreamError {}
/** 404: no such turn, memory or tool. */
export class NotFound extends MemstreamError {}
/** 400, 413 or 422: `detail` says what is wrong. */
export class InvalidRequest extends MemstreamError {}
/** 429 after the retries. */
export class RateLimited extends MemstreamError {}
/** 503 or 408 after the retries, or no answer: safe to retry (turns are idempotent). */
export class Unavailable extends MemstreamError {}
/** Any other 5xx. */
export class ServerError extends MemstreamError {}

const BY_STATUS: Record<number, typeof MemstreamError> = {
  400: InvalidRequest,
  401: AuthenticationError,
  403: AuthenticationError,
  404: NotFound,
  408: Unavailable,
  413: InvalidRequest,
  422: InvalidRequest,
  429: RateLimited,
  503: Unavailable,
};
const RETRIED = new Set([429, 503]);
const MAX_RETRY_WAIT_S = 30;

export interface ClientOptions {
  baseUrl?: string;
  apiKey?: string;
  /** Tries after the first for 429, 503 and a failed connection (default 3). */
  retries?: number;
  timeoutMs?: number;
}

export interface AddOptions {
  sessionId?: string;
  ts?: Date;
  metadata?: Record<string, string | number | boolean | null>;
  idempotencyKey?: string;
}

export interface RecallOptions {
  budgetTokens?: number;
  now?: Date;
}

const seg = (id: string): string => encodeURIComponent(id);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function errorOf(response: Response): Promise<MemstreamError> {
  const text = await response.text();
  let detail: unknown = text;
  try {
    detail = (JSON.parse(text) as { detail?: unknown }).detail ?? text;
  } catch {
    // not JSON: the text is the reason
  }
  const retryAfter = response.headers.get("Retry-After");
  const Kind = BY_STATUS[response.status] ?? (response.status >= 500 ? ServerError : MemstreamError);
  return new Kind(response.status, detail, retryAfter === null ? null : Number(retryAfter));
}

export class MemoryClient {
  private readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly retries: number;
  private readonly timeoutMs: number;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.headers = options.apiKey ? { Authorization: `Bearer ${options.apiKey}` } : {};
    this.retries = options.retries ?? 3;
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  private async send(method: string, path: string, body?: unknown, extra: Record<string, string> = {}): Promise<Response> {
    for (let attempt = 0; ; attempt++) {
      let response: Response;
      try {
        response = await fetch(this.baseUrl + path, {
          method,
          headers: { ...this.headers, ...extra, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
          body: body === undefined ? undefined : JSON.stringify(body),
          signal: AbortSignal.timeout(this.timeoutMs),
        });
      } catch (cause) {
        if (attempt >= this.retries) throw new Unavailable(0, `no answer from the gateway: ${String(cause)}`);
        await sleep(500 * 2 ** attempt);
        continue;
      }
      if (!RETRIED.has(response.status) || attempt >= this.retries) {
        if (!response.ok) throw await errorOf(response);
        return response;
      }
      const given = Number(response.headers.get("Retry-After"));
      await response.body?.cancel();
      await sleep(1000 * Math.min(Number.isFinite(given) && given > 0 ? given : 0.5 * 2 ** attempt, MAX_RETRY_WAIT_S));
    }
  }

  private async json<T>(method: string, path: string, body?: unknown, extra?: Record<string, string>): Promise<T> {
    return (await (await this.send(method, path, body, extra)).json()) as T;
  }

  /** Store a user's messages; the same request sent again is stored once. */
  add(userId: string, messages: ChatMessage[], options: AddOptions = {}): Promise<TurnsAccepted> {
    const body = {
      user_id: userId,
      messages,
      ...(options.sessionId ? { session_id: options.sessionId } : {}),
      ...(options.ts ? { ts: options.ts.toISOString() } : {}),
      ...(options.metadata ? { metadata: options.metadata } : {}),
    };
    const extra: Record<string, string> = options.idempotencyKey ? { "Idempotency-Key": options.idempotencyKey } : {};
    return this.json("POST", "/v1/turns", body, extra);
  }

  /** Store turns in the full shape (session_id, turn_id, ts, messages), at most 500. */
  addTurns(turns: TurnIn[]): Promise<TurnsAccepted> {
    return this.json("POST", "/v1/turns", { turns });
  }

  /** Dated memories for `query` within the budget: `context` for a prompt, `items`. */
  recall(userId: string, query: string, options: RecallOptions = {}): Promise<RecallResponse> {
    return this.json("POST", "/v1/recall", recallBody(userId, query, options));
  }

  /** Recall, then the gateway's configured model answers from the context. */
  answer(userId: string, query: string, options: RecallOptions = {}): Promise<AnswerResponse> {
    return this.json("POST", "/v1/answer", recallBody(userId, query, options));
  }

  timeline(userId: string, minLevel = 2): Promise<Timeline> {
    return this.json("GET", `/v1/users/${seg(userId)}/timeline?min_level=${minLevel}`);
  }

  /** Every consolidated memory of the user, fetched a page at a time. */
  async *memories(userId: string, filter: { kind?: string; level?: number; limit?: number } = {}): AsyncGenerator<Memory> {
    let cursor: string | null = null;
    do {
      const query = new URLSearchParams({ limit: String(filter.limit ?? 100) });
      if (filter.kind) query.set("kind", filter.kind);
      if (filter.level) query.set("level", String(filter.level));
      if (cursor) query.set("cursor", cursor);
      const page: MemoryPage = await this.json("GET", `/v1/users/${seg(userId)}/memories?${query}`);
      yield* page.memories;
      cursor = page.next_cursor ?? null;
    } while (cursor);
  }

  memory(memoryId: string): Promise<Memory> {
    return this.json("GET", `/v1/memories/${seg(memoryId)}`);
  }

  deleteMemory(memoryId: string): Promise<MemoryDeleted> {
    return this.json("DELETE", `/v1/memories/${seg(memoryId)}`);
  }

  /** Everything stored about the user as JSON Lines (turns, then memories). */
  async export(userId: string): Promise<string> {
    return (await this.send("GET", `/v1/users/${seg(userId)}/export`)).text();
  }

  tools(): Promise<Array<Record<string, unknown>>> {
    return this.json("GET", "/v1/tools");
  }

  tool(name: string, userId: string, args: Record<string, unknown> = {}): Promise<ToolResult> {
    return this.json("POST", `/v1/tools/${seg(name)}`, { user_id: userId, arguments: args });
  }

  /** The stored turn; NotFound until it is stored. */
  turn(userId: string, turnId: string): Promise<TurnStored> {
    return this.json("GET", `/v1/users/${seg(userId)}/turns/${seg(turnId)}`);
  }

  /** Erase the user's turns and memories everywhere; a tombstone is recorded. */
  forget(userId: string): Promise<DeleteResult> {
    return this.json("DELETE", `/v1/users/${seg(userId)}`);
  }
}

function recallBody(userId: string, query: string, options: RecallOptions): Record<string, unknown> {
  return {
    user_id: userId,
    query,
    budget_tokens: options.budgetTokens ?? 1000,
    ...(options.now ? { now: options.now.toISOString() } : {}),
  };
}
