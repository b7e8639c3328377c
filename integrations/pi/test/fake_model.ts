// A fake OpenAI-compatible model on 127.0.0.1 that plays a script: the Nth chat-completions
// request (counted by the assistant turns already in it) gets the Nth step, streamed as
// chat.completion.chunk events. A step is a list of tool calls, or a final text. Every request
// body is kept, so a test can read the tool results Pi sent back to "the model".

import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export type Step = { tools: Array<{ name: string; args: Record<string, unknown> }> } | { text: string };

export interface FakeModel {
	url: string; // http://127.0.0.1:PORT/v1
	requests: any[];
	/** GET /canary hits: a sandboxed command must never reach this server. */
	canaryHits: () => number;
	close: () => Promise<void>;
}

function chunk(delta: object, finish: string | null = null): string {
	const body = { id: "fake", object: "chat.completion.chunk", created: 0, model: "fake", choices: [{ index: 0, delta, finish_reason: finish }] };
	return `data: ${JSON.stringify(body)}\n\n`;
}

export function startFakeModel(script: Step[]): Promise<FakeModel> {
	const requests: any[] = [];
	let canary = 0;
	const server: Server = createServer((req, res) => {
		if (req.method === "GET" && req.url === "/canary") {
			canary++;
			res.writeHead(200).end("canary reached\n");
			return;
		}
		let body = "";
		req.on("data", (c) => (body += c));
		req.on("end", () => {
			if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
				res.writeHead(404).end();
				return;
			}
			const parsed = JSON.parse(body);
			requests.push(parsed);
			const turn = (parsed.messages ?? []).filter((m: any) => m.role === "assistant").length;
			const step: Step = script[turn] ?? { text: "done" };
			res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
			res.write(chunk({ role: "assistant" }));
			if ("text" in step) {
				res.write(chunk({ content: step.text }));
				res.write(chunk({}, "stop"));
			} else {
				step.tools.forEach((t, i) => {
					const call = { index: i, id: `call_${turn}_${i}`, type: "function", function: { name: t.name, arguments: JSON.stringify(t.args) } };
					res.write(chunk({ tool_calls: [call] }));
				});
				res.write(chunk({}, "tool_calls"));
			}
			res.write("data: [DONE]\n\n");
			res.end();
		});
	});
	return new Promise((resolve) => {
		server.listen(0, "127.0.0.1", () => {
			const port = (server.address() as AddressInfo).port;
			resolve({
				url: `http://127.0.0.1:${port}/v1`,
				requests,
				canaryHits: () => canary,
				close: () =>
					new Promise((r) => {
						server.closeAllConnections();
						server.close(() => r());
					}),
			});
		});
	});
}

/** What Pi sent back for each tool call: tool_call_id -> the result text. */
export function toolResults(requests: any[]): Map<string, string> {
	const out = new Map<string, string>();
	for (const r of requests) {
		for (const m of r.messages ?? []) {
			if (m.role !== "tool") continue;
			const text = typeof m.content === "string" ? m.content : (m.content ?? []).map((p: any) => p.text ?? "").join("");
			out.set(m.tool_call_id, text);
		}
	}
	return out;
}

/** Pi's models.json for this server. */
export function modelsJson(url: string): object {
	return {
		providers: {
			fake: {
				baseUrl: url,
				api: "openai-completions",
				apiKey: "fake-key",
				compat: { supportsDeveloperRole: false, supportsReasoningEffort: false },
				models: [{ id: "fake-model", name: "Fake", reasoning: false, input: ["text"], contextWindow: 128000, maxTokens: 4096 }],
			},
		},
	};
}
