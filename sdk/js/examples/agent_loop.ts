// An agent loop in the Anthropic computer-use dialect: Claude sees a
// cubicle desktop through the `computer` tool and drives it until it stops
// asking for the tool. Each tool_use block goes to the computer as it is
// (computer_use), and the tool_result block it answers (a screenshot after
// every action) goes back to the model as it is.
//
//   CUBICLE_URL=... CUBICLE_API_KEY=... ANTHROPIC_API_KEY=... \
//     node dist-examples/agent_loop.js "Open Firefox and search for Debian"
import { Computer } from "cubicle";

const MODEL = process.env.ANTHROPIC_MODEL ?? "claude-sonnet-4-5";
const DISPLAY = { width: 1280, height: 800 };

type Block = { type: string; [key: string]: unknown };
type Message = { role: "user" | "assistant"; content: string | Block[] };

async function claude(messages: Message[]): Promise<{ content: Block[]; stop_reason: string }> {
  const r = await fetch("https://api.anthropic.com/v1/messages", {
    method: "POST",
    headers: {
      "x-api-key": process.env.ANTHROPIC_API_KEY ?? "",
      "anthropic-version": "2023-06-01",
      "anthropic-beta": "computer-use-2025-01-24",
      "content-type": "application/json",
    },
    body: JSON.stringify({
      model: MODEL,
      max_tokens: 2048,
      tools: [{
        type: "computer_20250124", name: "computer",
        display_width_px: DISPLAY.width, display_height_px: DISPLAY.height,
      }],
      messages,
    }),
  });
  if (!r.ok) throw new Error(`Anthropic API: ${r.status} ${await r.text()}`);
  return r.json() as Promise<{ content: Block[]; stop_reason: string }>;
}

export async function run(task: string, maxTurns = 50): Promise<string> {
  await using computer = await Computer.create({
    kind: "desktop", resolution: [DISPLAY.width, DISPLAY.height],
  });
  console.log("watch it live:", await computer.stream_url({ view_only: true, ttl_s: 600 }));
  const messages: Message[] = [{ role: "user", content: task }];
  for (let turn = 0; turn < maxTurns; turn++) {
    const reply = await claude(messages);
    messages.push({ role: "assistant", content: reply.content });
    const uses = reply.content.filter((b) => b.type === "tool_use");
    if (uses.length === 0) {
      return reply.content.filter((b) => b.type === "text").map((b) => b.text).join("\n");
    }
    const results: Block[] = [];
    for (const use of uses) {
      // {"type":"tool_use","id","name":"computer","input":{"action":...}}
      //   → {"type":"tool_result","tool_use_id","content":[screenshot]}
      results.push(await computer.computer_use(use, { dialect: "anthropic" }) as Block);
    }
    messages.push({ role: "user", content: results });
  }
  return "(stopped after " + maxTurns + " turns)";
}

if (process.argv[2]) {
  console.log(await run(process.argv.slice(2).join(" ")));
}
