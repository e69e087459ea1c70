/**
 * A scripted agent with long-term memory through the TypeScript client (no paid API needed):
 * it stores a conversation, waits until memory has it, and recalls before answering.
 *
 *   MEMSTREAM_GATEWAY_URL=http://127.0.0.1:8080 npm run build && npm run agent
 */
import { MemoryClient, NotFound } from "../src/index.js";

const USER = process.env.AGENT_USER ?? "ts-agent-demo-user";
const QUESTION = "When is my race, and what did I say about my knee?";
const DAY_ONE: Array<[string, string]> = [
  ["I'm training for the Porto half marathon on 14 March.", "Great goal! How far do you run now?"],
  ["About 12 km on Sundays, and my knee hurts after 10.", "Let's plan shorter runs and strength work."],
];

async function waitStored(memory: MemoryClient, turnIds: string[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (const turnId of turnIds) {
    for (;;) {
      try {
        await memory.turn(USER, turnId);
        break;
      } catch (error) {
        if (!(error instanceof NotFound) || Date.now() > deadline) throw error;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  }
}

const memory = new MemoryClient({
  baseUrl: process.env.MEMSTREAM_GATEWAY_URL ?? "http://127.0.0.1:8080",
  apiKey: process.env.MEMSTREAM_API_KEY,
});
const said = new Date("2026-02-02T19:00:00Z");
for (const [text, reply] of DAY_ONE) {
  const accepted = await memory.add(
    USER,
    [
      { role: "user", content: text },
      { role: "assistant", content: reply },
    ],
    { ts: said, sessionId: "day-one" },
  );
  await waitStored(memory, accepted.turn_ids);
}
const found = await memory.recall(USER, QUESTION, { budgetTokens: 300 });
console.log(`Memory of this user:\n${found.context}\n\nUser: ${QUESTION}\nAssistant:`);
console.log(`\n(${found.items.length} memories, ${found.tokens} tokens)`);
process.exit(found.context.includes("14 March") && found.context.includes("knee") ? 0 : 1);
