// An agent loop with Anthropic's computer-use toolset: Claude sees a
// cubicle desktop through `computer_toolset_20260801` and drives it until
// it stops calling the toolset. Each assistant turn goes to the computer as
// it is (computer_use: its calls run in order, stopping at the first that
// fails), and the user message it answers (a tool_result per call, echoing
// toolset_name) goes back to the model as it is (docs/computer-use.md).
//
//   CUBICLE_URL=... CUBICLE_API_KEY=... ANTHROPIC_API_KEY=... \
//     node dist-examples/agent_loop.js "Open Firefox and search for Debian"
import { Computer } from "cubicle";

const MODEL = process.env.ANTHROPIC_MODEL ?? "claude-opus-5-5";
// What the model sees: screenshots come at this size, its coordinates are
// scaled back to the screen. Keep it for the whole session.
const DISPLAY: [number, number] = [1280, 800];

type Block = { type: string; [key: string]: unknown };
type Message = { role: "user" | "assistant"; content: string | Block[] };
type Reply = { type: "message"; role: "assistant"; content: Block[]; stop_reason: string };

async function claude(messages: Message[]): Promise<Reply> {
  const r = await fetch("https://api.anthropic.com/v1/messages", {
    method: "POST",
    headers: {
      "x-api-key": process.env.ANTHROPIC_API_KEY ?? "",
      "anthropic-version": "2023-06-01",
      "content-type": "application/json",
    },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: 2048,
      tools: [{ type: "computer_toolset_20260801" }],
      messages,
    }),
  });
  if (!r.ok) throw new Error(`Anthropic API: ${r.status} ${await r.text()}`);
  return r.json() as Promise<Reply>;
}

export async function run(task: string, maxTurns = 50): Promise<string> {
  await using computer = await Computer.create({ kind: "desktop", resolution: DISPLAY });
  console.log("watch it live:", await computer.stream_url({ view_only: true, ttl_s: 600 }));
  const messages: Message[] = [{ role: "user", content: task }];
  for (let turn = 0; turn < maxTurns; turn++) {
    const reply = await claude(messages);
    messages.push({ role: "assistant", content: reply.content });
    const calls = reply.content.filter((b) => b.type === "tool_use" && b.toolset_name === "computer");
    if (calls.length === 0) {
      return reply.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    }
    // The whole turn at once → {"role": "user", "content": [tool_result, ...]}
    const out = await computer.computer_use(reply, { tool: "computer_toolset_20260801", display: DISPLAY });
    if (out.failed !== null) console.log(`call ${out.failed} failed (${out.error}); ${out.ran} ran`);
    messages.push({ role: "user", content: out.content });
  }
  return "(stopped after " + maxTurns + " turns)";
}

if (process.argv[2]) {
  console.log(await run(process.argv.slice(2).join(" ")));
}
