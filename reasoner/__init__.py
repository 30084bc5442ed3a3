"""The LLM reasoner: client and embedded server, read-only tools, prompt, agent loop, batch."""
